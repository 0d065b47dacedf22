"""REST endpoints of specs and saved clusters: validate, call a selector or a service, serialise."""

from __future__ import annotations

import json

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.parsers import FormParser
from rest_framework.response import Response
from rest_framework.views import APIView

from adaptis_web.studio.accounts.selectors import team_for_request
from adaptis_web.studio.api.parsers import BoundedJSONParser, StrictMultiPartParser
from adaptis_web.studio.api.throttles import ThrottledCreate
from adaptis_web.studio.catalog.clusters import (MAX_CLUSTER_FILE_BYTES, cluster_create, cluster_parse_doc,
                                                 cluster_parse_upload)
from adaptis_web.studio.catalog.selectors import cluster_get_for_user, spec_get_for_user
from adaptis_web.studio.catalog.serializers import (CLUSTER_CREATE_SCHEMAS, SPEC_CREATE_SCHEMAS, ClusterCreateInput,
                                                    ClusterDetailOutput, ClusterOutput, SpecCreateInput,
                                                    SpecDetailOutput, SpecOutput)
from adaptis_web.studio.catalog.specs import read_upload, spec_create, spec_parse_upload
from adaptis_web.studio.history.api import HistoryListApi, NamedDetailMixin
from adaptis_web.studio.history.filters import ClusterFilter, SpecFilter


class SpecListCreateApi(ThrottledCreate, HistoryListApi):
    throttle_scope = "specs"
    serializer_class = SpecOutput
    filterset_class = SpecFilter
    kind = "specs"
    parser_classes = [StrictMultiPartParser, FormParser, BoundedJSONParser]

    @extend_schema(request=SPEC_CREATE_SCHEMAS, responses={201: SpecDetailOutput})
    def post(self, request):
        data = SpecCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        team = team_for_request(user=request.user, team_id=values.get("team"))
        if "file" in values:
            upload = values["file"]
            spec, warnings = spec_parse_upload(content=read_upload(upload, field="file"), filename=upload.name)
            filename = upload.name
        else:
            spec, warnings = spec_parse_upload(content=json.dumps(values["doc"]).encode(), filename="", field="doc",
                                               name=values.get("name", ""))
            filename = ""
        record = spec_create(team=team, owner=request.user, spec=spec, source_filename=filename,
                             name=values.get("name", ""), warnings=warnings)
        return Response(SpecDetailOutput(record).data, status=status.HTTP_201_CREATED)


class SpecDetailApi(NamedDetailMixin, APIView):
    kind = "specs"

    @extend_schema(responses=SpecDetailOutput)
    def get(self, request, spec_id: int):
        return Response(SpecDetailOutput(spec_get_for_user(user=request.user, spec_id=spec_id)).data)


class ClusterListCreateApi(ThrottledCreate, HistoryListApi):
    throttle_scope = "specs"  # a parsed document, as a spec is
    serializer_class = ClusterOutput
    filterset_class = ClusterFilter
    kind = "clusters"
    parser_classes = [StrictMultiPartParser, FormParser, BoundedJSONParser]

    @extend_schema(request=CLUSTER_CREATE_SCHEMAS, responses={201: ClusterDetailOutput},
                   description="Save an adaptis.cluster/v1 document (JSON or YAML file, or inline) for a team; "
                               "its jobs offer it as a cluster. A bad document is a 400 naming the field inside it.")
    def post(self, request):
        data = ClusterCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        team = team_for_request(user=request.user, team_id=values.get("team"))
        if "file" in values:
            upload = values["file"]
            cluster = cluster_parse_upload(content=read_upload(upload, field="file", limit=MAX_CLUSTER_FILE_BYTES),
                                           filename=upload.name)
            filename = upload.name
        else:
            cluster, filename = cluster_parse_doc(doc=values["doc"], field="doc"), ""
        record = cluster_create(team=team, owner=request.user, cluster=cluster, name=values.get("name", ""),
                                source_filename=filename)
        return Response(ClusterDetailOutput(record).data, status=status.HTTP_201_CREATED)


class ClusterDetailApi(NamedDetailMixin, APIView):
    kind = "clusters"

    @extend_schema(responses=ClusterDetailOutput)
    def get(self, request, cluster_id: int):
        return Response(ClusterDetailOutput(cluster_get_for_user(user=request.user,
                                                                           cluster_id=cluster_id)).data)
