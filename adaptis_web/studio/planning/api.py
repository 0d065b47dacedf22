"""REST endpoints of jobs and plans (and the presets, schedules and partitions a job may name), and the plan
editor's and downloads' endpoints: simulate an edited plan, save it as a derived plan, export. Any role in the
plan's team may simulate (a what-if stores nothing) and export; saving needs the member role."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from adaptis_web.studio.api.throttles import ThrottledCreate
from adaptis_web.studio.catalog.selectors import cluster_for_request, spec_for_request
from adaptis_web.studio.history.api import CuratedDetailMixin, HistoryListApi
from adaptis_web.studio.history.filters import JobFilter, PlanFilter
from adaptis_web.studio.planning.exports import FORMATS, plan_export
from adaptis_web.studio.planning.jobs import JOB_SCHEDULES, job_cancel, job_create, job_request_check
from adaptis_web.studio.planning.plan_editing import plan_derive, plan_simulate_edit
from adaptis_web.studio.planning.selectors import (job_detail_for_user, job_get_for_user, plan_detail_for_user,
                                                   plan_get_for_user)
from adaptis_web.studio.planning.serializers import (JobCreateInput, JobDetailOutput, JobOutput, PlanDeriveInput,
                                                     PlanListOutput, PlanOutput)
from planner.service import ACCELERATORS, PARTITIONS, load_model_spec, model_preset_names, preset_names


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
        spec_record = spec_for_request(user=request.user, spec_id=values["spec"])
        saved = values["saved_cluster"]
        job_request = job_request_check(
            spec=load_model_spec(spec_record.doc), num_devices=values.get("num_devices"),
            num_microbatches=values.get("num_microbatches"), cluster_preset=values["cluster_preset"],
            cluster_doc=values.get("cluster"), schedule=values["schedule"], partition=values["partition"],
            seed=values["seed"], time_budget_s=values["time_budget_s"],
            memory_limit_bytes=values["memory_limit_bytes"], mode=values["mode"], team=spec_record.team,
            saved_cluster=None if saved is None else cluster_for_request(user=request.user,
                                                                                   cluster_id=saved),
            gpus=values["gpus"], seq_len=values["seq_len"], global_batch=values["global_batch"], pins=data.pins(),
            gpu_counts=values.get("gpu_counts"), token_budget=values.get("token_budget"), software=values)
        job = job_create(spec_record=spec_record, user=request.user, request=job_request)
        return Response(JobDetailOutput(job).data, status=status.HTTP_201_CREATED)


class JobDetailApi(CuratedDetailMixin, APIView):
    kind = "jobs"

    @extend_schema(responses=JobDetailOutput)
    def get(self, request, job_id: int):
        return Response(JobDetailOutput(job_detail_for_user(user=request.user, job_id=job_id)).data)


class JobCancelApi(APIView):
    @extend_schema(request=None, responses={200: JobDetailOutput},
                   description="A queued job is cancelled at once; a running one when its worker next checks "
                               "(within a second); a finished one is a 400 naming 'status'.")
    def post(self, request, job_id: int):
        job = job_cancel(job=job_get_for_user(user=request.user, job_id=job_id), user=request.user)
        return Response(JobDetailOutput(job).data)


class PlanListApi(HistoryListApi):
    serializer_class = PlanListOutput
    filterset_class = PlanFilter
    kind = "plans"


class PlanDetailApi(CuratedDetailMixin, APIView):
    kind = "plans"

    @extend_schema(responses=PlanOutput)
    def get(self, request, plan_id: int):
        return Response(PlanOutput(plan_detail_for_user(user=request.user, plan_id=plan_id)).data)


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
        plan = plan_get_for_user(user=request.user, plan_id=plan_id)
        return Response(plan_simulate_edit(plan=plan, user=request.user, doc=request.data))


class PlanDeriveApi(APIView):
    @extend_schema(request=PlanDeriveInput, responses={201: PlanOutput},
                   description="Save an edited document (as simulate/ takes it) as a new plan of the same job whose "
                               "parent is this plan; needs the member role.")
    def post(self, request, plan_id: int):
        parent = plan_get_for_user(user=request.user, plan_id=plan_id)
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
        plan = plan_get_for_user(user=request.user, plan_id=plan_id)
        export = plan_export(plan=plan, user=request.user, fmt=fmt)
        response = HttpResponse(export.content, content_type=f"{export.content_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
        return response
