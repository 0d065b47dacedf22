"""REST endpoints: validate the input, call a selector or a service, serialise. Objects of other teams are 404;
what a role may not do is 403 (services.roles). The lists are the team's history: django-filter filters
(adaptis_web.studio.filters) and cursor pagination."""

from __future__ import annotations

import json

from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from django.urls import reverse
from rest_framework.parsers import FormParser
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from adaptis_web.studio import selectors
from adaptis_web.studio.selectors import RUN_EVENTS_PAGE
from adaptis_web.studio.url_converters import MAX_ID
from adaptis_web.studio.api.parsers import BoundedJSONParser, StrictMultiPartParser
from adaptis_web.studio.api.throttles import ThrottledCreate
from adaptis_web.studio.api.serializers import (
    CLUSTER_CREATE_SCHEMAS,
    SPEC_CREATE_SCHEMAS,
    ClusterCreateInput,
    ClusterDetailOutput,
    ClusterOutput,
    JobCreateInput,
    JobDetailOutput,
    JobOutput,
    MeasuredProfileCreateInput,
    MeasuredProfileOutput,
    PlanOutput,
    IngestBatchInput,
    IngestOutput,
    RunCreateInput,
    RunCreatedOutput,
    RunEventsOutput,
    RunEventsQuery,
    RunOutput,
    SpecCreateInput,
    SpecDetailOutput,
    SpecOutput,
    CuratedOutput,
    DependentsOutput,
    PlanListOutput,
    RenameInput,
    RequiredNameInput,
)
from adaptis_web.studio.filters import (ClusterFilter, HistoryCursorPagination, HistoryFilterBackend, JobFilter,
                                        PlanFilter, RunFilter, SpecFilter, checked_query_int)
from adaptis_web.studio.services import curation
from adaptis_web.studio.services.jobs import JOB_SCHEDULES, job_cancel, job_create, job_request_check
from adaptis_web.studio.services.calibration import job_replan_from_run
from adaptis_web.studio.services.clusters import (MAX_CLUSTER_FILE_BYTES, cluster_create, cluster_parse_doc,
                                                  cluster_parse_upload)
from adaptis_web.studio.services.cluster_runs import IngestRefusal, cluster_run_create, ingest, launch
from adaptis_web.studio.services.runs import run_create
from adaptis_web.studio.services.profiling import measured_profile_create
from adaptis_web.studio.services.run_control import run_cancel
from adaptis_web.studio.services.specs import read_upload, spec_create, spec_parse_upload
from planner.service import ACCELERATORS, PARTITIONS, model_preset_names, preset_names
from planner.spec.model import load_model_spec


class PresetsApi(APIView):
    @extend_schema(responses=inline_serializer("Presets", {
        "clusters": serializers.ListField(child=serializers.CharField()),
        "models": serializers.ListField(child=serializers.CharField()),
        "schedules": serializers.ListField(child=serializers.CharField()),
        "partitions": serializers.ListField(child=serializers.CharField()),
        "cluster_devices": serializers.ListField(
            child=serializers.CharField(),
            help_text="devices of named clusters '<device>-<nodes>x<gpus per node>', e.g. h100-sxm-1024x8")}))
    def get(self, request):
        return Response({"clusters": preset_names(), "models": model_preset_names(),
                         "schedules": list(JOB_SCHEDULES), "partitions": list(PARTITIONS),
                         "cluster_devices": list(ACCELERATORS)})


class HistoryListApi(ListAPIView):
    """A kind's history: django-filter's filters (``filterset_class``), newest first in cursor pages."""

    pagination_class = HistoryCursorPagination
    filter_backends = [HistoryFilterBackend]
    kind = ""

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator, which has no user, reads the filters
            return self.filterset_class.Meta.model.objects.none()
        return selectors.history_for_user(user=self.request.user, kind=self.kind)


class CuratedDetailMixin:
    """PATCH renames (``name``), DELETE deletes softly (taking its dependents along)."""

    kind = ""

    def curated_object(self):
        object_id = self.kwargs[f"{self.kind.removesuffix('s')}_id"]  # the detail URL's spec_id, job_id, ...
        return selectors.curated_get_for_user(user=self.request.user, kind=self.kind, object_id=object_id)

    def rename(self, request, input_class) -> Response:
        obj = self.curated_object()
        data = input_class(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(curated_output(curation.object_rename(obj=obj, user=request.user,
                                                              name=data.validated_data["name"])))

    @extend_schema(request=RenameInput, responses=CuratedOutput)
    def patch(self, request, **ids):
        return self.rename(request, RenameInput)

    @extend_schema(request=None, responses={200: CuratedOutput},
                   description="Delete softly, with what depends on it (see dependents/); an admin can restore it.")
    def delete(self, request, **ids):
        return Response(curated_output(curation.object_delete(obj=self.curated_object(), user=request.user)))


class NamedDetailMixin(CuratedDetailMixin):
    """PATCH renames (``name``: a spec or a saved cluster keeps one), DELETE deletes softly (with its dependents)."""

    @extend_schema(request=RequiredNameInput, responses=CuratedOutput)
    def patch(self, request, **ids):
        return self.rename(request, RequiredNameInput)


def curated_output(obj) -> dict:
    return CuratedOutput({"id": obj.pk, "name": obj.name, "archived_at": obj.archived_at,
                          "deleted_at": obj.deleted_at}).data


class CuratedActionApi(APIView):
    """``/api/<kind>/<id>/<action>/``: archive, unarchive, restore (admins, a deleted object), dependents."""

    ACTIONS = {"archive": curation.object_archive, "unarchive": curation.object_unarchive,
               "restore": curation.object_restore}

    @extend_schema(request=None, responses=CuratedOutput)
    def post(self, request, kind: str, object_id: int, action: str):
        obj = selectors.curated_get_for_user(user=request.user, kind=kind, object_id=object_id,
                                             deleted=action == "restore")
        return Response(curated_output(self.ACTIONS[action](obj=obj, user=request.user)))


class DependentsApi(APIView):
    @extend_schema(responses=DependentsOutput,
                   description="What archiving or deleting this object takes along with it.")
    def get(self, request, kind: str, object_id: int):
        obj = selectors.curated_get_for_user(user=request.user, kind=kind, object_id=object_id)
        return Response(DependentsOutput(curation.dependents_summary(obj)).data)


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
        team = selectors.team_for_request(user=request.user, team_id=values.get("team"))
        if "file" in values:
            upload = values["file"]
            spec, warnings = spec_parse_upload(content=read_upload(upload, field="file"), filename=upload.name)
            filename = upload.name
        else:
            spec, warnings = spec_parse_upload(content=json.dumps(values["doc"]).encode(), filename="doc.json",
                                               field="doc")
            filename = ""
        record = spec_create(team=team, owner=request.user, spec=spec, source_filename=filename,
                             name=values.get("name", ""), warnings=warnings)
        return Response(SpecDetailOutput(record).data, status=status.HTTP_201_CREATED)


class SpecDetailApi(NamedDetailMixin, APIView):
    kind = "specs"

    @extend_schema(responses=SpecDetailOutput)
    def get(self, request, spec_id: int):
        return Response(SpecDetailOutput(selectors.spec_get_for_user(user=request.user, spec_id=spec_id)).data)


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
        team = selectors.team_for_request(user=request.user, team_id=values.get("team"))
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
        return Response(ClusterDetailOutput(selectors.cluster_get_for_user(user=request.user,
                                                                           cluster_id=cluster_id)).data)


class JobListCreateApi(ThrottledCreate, HistoryListApi):
    throttle_scope = "jobs"
    serializer_class = JobOutput
    filterset_class = JobFilter
    kind = "jobs"

    @extend_schema(request=JobCreateInput, responses={201: JobDetailOutput})
    def post(self, request):
        data = JobCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        spec_record = selectors.spec_for_request(user=request.user, spec_id=values["spec"])
        saved = values["saved_cluster"]
        job_request = job_request_check(
            spec=load_model_spec(spec_record.doc), num_devices=values.get("num_devices"),
            num_microbatches=values.get("num_microbatches"), cluster_preset=values["cluster_preset"],
            cluster_doc=values.get("cluster"), schedule=values["schedule"], partition=values["partition"],
            seed=values["seed"], time_budget_s=values["time_budget_s"],
            memory_limit_bytes=values["memory_limit_bytes"], mode=values["mode"], team=spec_record.team,
            saved_cluster=None if saved is None else selectors.cluster_for_request(user=request.user,
                                                                                   cluster_id=saved),
            gpus=values["gpus"], seq_len=values["seq_len"], global_batch=values["global_batch"], pins=data.pins())
        with transaction.atomic():
            job = job_create(spec_record=spec_record, user=request.user, request=job_request)
        return Response(JobDetailOutput(job).data, status=status.HTTP_201_CREATED)


class JobDetailApi(CuratedDetailMixin, APIView):
    kind = "jobs"

    @extend_schema(responses=JobDetailOutput)
    def get(self, request, job_id: int):
        return Response(JobDetailOutput(selectors.job_detail_for_user(user=request.user, job_id=job_id)).data)


class JobCancelApi(APIView):
    @extend_schema(request=None, responses={200: JobDetailOutput},
                   description="A queued job is cancelled at once; a running one when its worker next checks "
                               "(within a second); a finished one is a 400 naming 'status'.")
    def post(self, request, job_id: int):
        job = job_cancel(job=selectors.job_get_for_user(user=request.user, job_id=job_id), user=request.user)
        return Response(JobDetailOutput(job).data)


class PlanListApi(HistoryListApi):
    serializer_class = PlanListOutput
    filterset_class = PlanFilter
    kind = "plans"


class PlanDetailApi(CuratedDetailMixin, APIView):
    kind = "plans"

    @extend_schema(responses=PlanOutput)
    def get(self, request, plan_id: int):
        return Response(PlanOutput(selectors.plan_detail_for_user(user=request.user, plan_id=plan_id)).data)


class RunListCreateApi(ThrottledCreate, HistoryListApi):
    throttle_scope = "runs"
    serializer_class = RunOutput
    filterset_class = RunFilter
    kind = "runs"

    @extend_schema(request=RunCreateInput, responses={201: RunCreatedOutput})
    def post(self, request):
        data = RunCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        plan = selectors.plan_for_request(user=request.user, plan_id=values["plan"])
        if values["target"] == "local":
            with transaction.atomic():
                run = run_create(plan=plan, user=request.user, steps=values["steps"],
                                 scale_down=values["scale_down"])
            return Response(RunOutput(run).data, status=status.HTTP_201_CREATED)
        options = {key: values[key] for key in ("environment", "time_limit") if values.get(key)}
        run, secret = cluster_run_create(plan=plan, user=request.user, steps=values["steps"], **options)
        ingest_url = request.build_absolute_uri(reverse("api:run-events", args=[run.pk]))
        return Response({**RunOutput(run).data, "secret": secret, "launch": launch(run, ingest_url=ingest_url)},
                        status=status.HTTP_201_CREATED)


class RunDetailApi(CuratedDetailMixin, APIView):
    kind = "runs"

    @extend_schema(responses=RunOutput)
    def get(self, request, run_id: int):
        return Response(RunOutput(selectors.run_detail_for_user(user=request.user, run_id=run_id)).data)


class RunReplanApi(ThrottledCreate, APIView):
    throttle_scope = "jobs"
    @extend_schema(request=None, responses={201: JobDetailOutput},
                   description="Recalibrate the run's plan profile from its observed action timings and queue a "
                               "planning job with the same settings on that profile. A run that has not succeeded "
                               "is a 400 naming 'run'.")
    def post(self, request, run_id: int):
        job = job_replan_from_run(run=selectors.run_get_for_user(user=request.user, run_id=run_id),
                                  user=request.user)
        return Response(JobDetailOutput(job).data, status=status.HTTP_201_CREATED)


class RunCancelApi(APIView):
    @extend_schema(request=None, responses={200: RunOutput},
                   description="A queued run is cancelled at once; a running one within a few seconds, when its "
                               "worker ends the ranks (the events they sent are kept); a finished one is a 400 "
                               "naming 'status'. Its creator (a member) or an admin of the team may cancel it.")
    def post(self, request, run_id: int):
        run = run_cancel(run=selectors.run_get_for_user(user=request.user, run_id=run_id), user=request.user)
        return Response(RunOutput(selectors.run_detail_for_user(user=request.user, run_id=run.pk)).data)


class IngestThrottle(ScopedRateThrottle):
    """Each cluster run's ingest by itself (its ranks share the run's budget): ``THROTTLE_INGEST``."""

    scope = "ingest"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": f"run-{view.kwargs['run_id']}"}

    def allow_request(self, request, view) -> bool:
        return request.method != "POST" or super().allow_request(request, view)


class RunEventsApi(APIView):
    """GET: a run's events, for its page and API users. POST: the ingest a cluster run's ranks report to,
    authenticated by that run's secret alone (``Authorization: Bearer <secret>``; services.cluster_runs)."""

    throttle_classes = [IngestThrottle]

    def _ingesting(self) -> bool:
        # No request while the schema generator looks at the view: the methods are described one by one below.
        return getattr(getattr(self, "request", None), "method", None) == "POST"

    def get_authenticators(self):
        return [] if self._ingesting() else super().get_authenticators()

    def get_permissions(self):
        return [AllowAny()] if self._ingesting() else super().get_permissions()

    @extend_schema(request=IngestBatchInput, responses={200: IngestOutput}, auth=[],
                   description="A cluster run's ranks report their events here (executor.events.HttpSink) with the "
                               "run's secret as a bearer token. A wrong, another run's or an expired (finished run) "
                               "secret is a 403 and a batch with an event the plan does not have a 400 naming it; "
                               "either stores nothing. An action already stored is counted as a duplicate.")
    def post(self, request, run_id: int):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        secret = header[len("Bearer "):] if header.startswith("Bearer ") else None
        try:
            outcome = ingest(run_id=run_id, secret=secret, body=request.data)
        except IngestRefusal as refusal:
            return Response({"errors": [{"field": refusal.field, "reason": refusal.reason}]}, status=refusal.status)
        return Response(outcome)

    @extend_schema(parameters=[RunEventsQuery], responses=RunEventsOutput)
    def get(self, request, run_id: int):
        run = selectors.run_state_for_user(user=request.user, run_id=run_id)
        # As the paging parameters are read: an empty or repeated one is a 400 too (a serializer took ?after= as 0)
        after = checked_query_int(request, "after", 0, MAX_ID, 0)
        limit = checked_query_int(request, "limit", 1, RUN_EVENTS_PAGE, RUN_EVENTS_PAGE)
        events = selectors.run_event_rows_after(run=run, after_seq=after, limit=limit)
        # RunEventsOutput's shape, built directly: the rows are already plain values (a page of events is polled
        # several times a second per viewer).
        return Response({"run": run.pk, "status": str(run.status), "finished": run.is_finished,
                         "last_seq": events[-1]["seq"] if events else after, "events": events})



class SpecProfilesApi(APIView):
    @extend_schema(request=MeasuredProfileCreateInput, responses={201: MeasuredProfileOutput},
                   description="Measure the spec's layers on the host that runs CPU runs (a task on the runs queue), "
                               "one profiler per rank at once; with a plan, its stages are timed as its ranks run "
                               "them too. Poll GET /api/profiles/ID/. Jobs on cpu-host plan on such a profile.")
    def post(self, request, spec_id: int):
        data = MeasuredProfileCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        spec = selectors.spec_get_for_user(user=request.user, spec_id=spec_id)
        plan = None if values["plan"] is None else selectors.plan_for_request(user=request.user, plan_id=values["plan"])
        with transaction.atomic():
            profile = measured_profile_create(spec_record=spec, user=request.user, num_ranks=values["num_ranks"],
                                              split_backward=values["split_backward"], plan=plan)
        return Response(MeasuredProfileOutput(profile).data, status=status.HTTP_201_CREATED)


class MeasuredProfileApi(APIView):
    @extend_schema(responses=MeasuredProfileOutput)
    def get(self, request, profile_id: int):
        return Response(MeasuredProfileOutput(
            selectors.measured_profile_get_for_user(user=request.user, profile_id=profile_id)).data)
