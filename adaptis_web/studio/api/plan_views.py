"""The plan editor's endpoints and the plan downloads: simulate an edited plan, save it as a derived plan, export.

Any role in the plan's team may simulate (a what-if stores nothing) and export; saving needs the member role.
"""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from adaptis_web.studio import selectors
from adaptis_web.studio.api.serializers import DocumentField, PlanOutput, StrictCharField
from adaptis_web.studio.services.exports import FORMATS, plan_export
from adaptis_web.studio.services.plan_editing import plan_derive, plan_simulate_edit


class PlanDeriveInput(serializers.Serializer):
    plan = DocumentField(help_text="the edited adaptis.plan/v1 or /v2 document, as simulate/ takes it")
    name = StrictCharField(max_length=200, required=False, allow_blank=True, default="")


SIMULATE_DESCRIPTION = (
    "Re-predict an edited copy of this plan's document (the request body). meta.schedule_policy: auto (keep the "
    "document's orders where they still fit, else the list scheduler orders the actions), keep, one-f-one-b, "
    "zero-bubble, zero-bubble-deep or fill-drain; meta.baseline: a baseline family that replaces partition, "
    "placement and orders. Answers plan (with its orders), metrics, per_device (memory_bytes against "
    "capacity_bytes), timeline, layout, difference (from this plan) and server_ms; 400 names the field and "
    "the reason (\"stage 3 would be empty\", \"device 2 needs 91.0 GiB of 80.0 GiB\"). Stores nothing.")


class PlanSimulateApi(APIView):
    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT},
                   description=SIMULATE_DESCRIPTION)
    def post(self, request, plan_id: int):
        plan = selectors.plan_get_for_user(user=request.user, plan_id=plan_id)
        return Response(plan_simulate_edit(plan=plan, user=request.user, doc=request.data))


class PlanDeriveApi(APIView):
    @extend_schema(request=PlanDeriveInput, responses={201: PlanOutput},
                   description="Save an edited document (as simulate/ takes it) as a new plan of the same job whose "
                               "parent is this plan; needs the member role.")
    def post(self, request, plan_id: int):
        parent = selectors.plan_get_for_user(user=request.user, plan_id=plan_id)
        data = PlanDeriveInput(data=request.data)
        data.is_valid(raise_exception=True)
        plan = plan_derive(parent=parent, user=request.user, doc=data.validated_data["plan"],
                           name=data.validated_data["name"])
        return Response(PlanOutput(plan).data, status=status.HTTP_201_CREATED)


class PlanExportApi(APIView):
    @extend_schema(responses={200: OpenApiResponse(description="the file, as an attachment"),
                              400: OpenApiResponse(description="the format cannot express this plan: the reason")},
                   parameters=[OpenApiParameter("fmt", OpenApiTypes.STR, OpenApiParameter.PATH, enum=list(FORMATS))],
                   description=f"Download the plan as {', '.join(FORMATS)}.")
    def get(self, request, plan_id: int, fmt: str):
        plan = selectors.plan_get_for_user(user=request.user, plan_id=plan_id)
        export = plan_export(plan=plan, user=request.user, fmt=fmt)
        response = HttpResponse(export.content, content_type=f"{export.content_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
        return response
