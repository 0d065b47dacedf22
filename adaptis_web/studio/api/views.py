"""REST endpoints: validate the input, call a selector or a service, serialise. Objects of other teams are 404."""

from __future__ import annotations

import json

from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from adaptis_web.studio import selectors
from adaptis_web.studio.api.serializers import (
    JobCreateInput,
    JobDetailOutput,
    JobOutput,
    PlanOutput,
    RunCreateInput,
    RunEventsOutput,
    RunEventsQuery,
    RunOutput,
    SpecCreateInput,
    SpecDetailOutput,
    SpecOutput,
    TeamOutput,
)
from adaptis_web.studio.services.jobs import JOB_SCHEDULES, job_cancel, job_create, job_request_check
from adaptis_web.studio.services.calibration import job_replan_from_run
from adaptis_web.studio.services.runs import run_create
from adaptis_web.studio.services.specs import spec_create, spec_parse_upload
from planner.baselines import PARTITIONS
from planner.cluster import preset_names
from planner.spec.model import load_model_spec
from planner.spec.presets import model_preset_names


class TeamListApi(ListAPIView):
    serializer_class = TeamOutput

    def get_queryset(self):
        return selectors.team_list_for_user(user=self.request.user).prefetch_related("memberships")


class PresetsApi(APIView):
    @extend_schema(responses=inline_serializer("Presets", {
        "clusters": serializers.ListField(child=serializers.CharField()),
        "models": serializers.ListField(child=serializers.CharField()),
        "schedules": serializers.ListField(child=serializers.CharField()),
        "partitions": serializers.ListField(child=serializers.CharField())}))
    def get(self, request):
        return Response({"clusters": preset_names(), "models": model_preset_names(),
                         "schedules": list(JOB_SCHEDULES), "partitions": list(PARTITIONS)})


class SpecListCreateApi(ListAPIView):
    serializer_class = SpecOutput
    parser_classes = [MultiPartParser, FormParser, JSONParser]

    def get_queryset(self):
        return selectors.spec_list_for_user(user=self.request.user).defer("doc")  # the list omits documents

    @extend_schema(request=SpecCreateInput, responses={201: SpecDetailOutput})
    def post(self, request):
        data = SpecCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        team = selectors.team_for_request(user=request.user, team_id=values.get("team"))
        if "file" in values:
            upload = values["file"]
            spec = spec_parse_upload(content=upload.read(), filename=upload.name)
            filename = upload.name
        else:
            spec = spec_parse_upload(content=json.dumps(values["doc"]).encode(), filename="doc.json", field="doc")
            filename = ""
        record = spec_create(team=team, owner=request.user, spec=spec, source_filename=filename,
                             name=values.get("name", ""))
        return Response(SpecDetailOutput(record).data, status=status.HTTP_201_CREATED)


class SpecDetailApi(APIView):
    @extend_schema(responses=SpecDetailOutput)
    def get(self, request, spec_id: int):
        return Response(SpecDetailOutput(selectors.spec_get_for_user(user=request.user, spec_id=spec_id)).data)


class JobListCreateApi(ListAPIView):
    serializer_class = JobOutput

    def get_queryset(self):  # the list shows none of the documents: decoding them was most of its time
        return selectors.job_list_with_plan_metrics(user=self.request.user).defer(
            "spec__doc", "cluster_doc", "profile_doc", "result", "calibration")

    @extend_schema(request=JobCreateInput, responses={201: JobDetailOutput})
    def post(self, request):
        data = JobCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        spec_record = selectors.spec_for_request(user=request.user, spec_id=values["spec"])
        job_request = job_request_check(
            spec=load_model_spec(spec_record.doc), num_devices=values["num_devices"],
            num_microbatches=values["num_microbatches"], cluster_preset=values["cluster_preset"],
            cluster_doc=values.get("cluster"), schedule=values["schedule"], partition=values["partition"],
            seed=values["seed"], time_budget_s=values["time_budget_s"],
            memory_limit_bytes=values["memory_limit_bytes"])
        with transaction.atomic():
            job = job_create(spec_record=spec_record, user=request.user, request=job_request)
        return Response(JobDetailOutput(job).data, status=status.HTTP_201_CREATED)


class JobDetailApi(APIView):
    @extend_schema(responses=JobDetailOutput)
    def get(self, request, job_id: int):
        return Response(JobDetailOutput(selectors.job_get_for_user(user=request.user, job_id=job_id)).data)


class JobCancelApi(APIView):
    @extend_schema(request=None, responses={200: JobDetailOutput},
                   description="A queued job is cancelled at once; a running one when its worker next checks "
                               "(within a second); a finished one is a 400 naming 'status'.")
    def post(self, request, job_id: int):
        job = job_cancel(job=selectors.job_get_for_user(user=request.user, job_id=job_id), user=request.user)
        return Response(JobDetailOutput(job).data)


class PlanDetailApi(APIView):
    @extend_schema(responses=PlanOutput)
    def get(self, request, plan_id: int):
        return Response(PlanOutput(selectors.plan_get_for_user(user=request.user, plan_id=plan_id)).data)


class RunListCreateApi(ListAPIView):
    serializer_class = RunOutput

    def get_queryset(self):
        return selectors.run_list_for_user(user=self.request.user)

    @extend_schema(request=RunCreateInput, responses={201: RunOutput})
    def post(self, request):
        data = RunCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        plan = selectors.plan_for_request(user=request.user, plan_id=values["plan"])
        with transaction.atomic():
            run = run_create(plan=plan, user=request.user, steps=values["steps"], scale_down=values["scale_down"])
        return Response(RunOutput(run).data, status=status.HTTP_201_CREATED)


class RunDetailApi(APIView):
    @extend_schema(responses=RunOutput)
    def get(self, request, run_id: int):
        return Response(RunOutput(selectors.run_get_for_user(user=request.user, run_id=run_id)).data)


class RunReplanApi(APIView):
    @extend_schema(request=None, responses={201: JobDetailOutput},
                   description="Recalibrate the run's plan profile from its observed action timings and queue a "
                               "planning job with the same settings on that profile. A run that has not succeeded "
                               "is a 400 naming 'run'.")
    def post(self, request, run_id: int):
        job = job_replan_from_run(run=selectors.run_get_for_user(user=request.user, run_id=run_id),
                                  user=request.user)
        return Response(JobDetailOutput(job).data, status=status.HTTP_201_CREATED)


class RunEventsApi(APIView):
    @extend_schema(parameters=[OpenApiParameter("after", int, description="only events with a larger seq"),
                               OpenApiParameter("limit", int, description="at most this many (default 2000)")],
                   responses=RunEventsOutput)
    def get(self, request, run_id: int):
        run = selectors.run_state_for_user(user=request.user, run_id=run_id)
        query = RunEventsQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        after = query.validated_data["after"]
        events = selectors.run_events_after(run=run, after_seq=after, limit=query.validated_data["limit"])
        return Response(RunEventsOutput({
            "run": run.pk, "status": run.status, "finished": run.is_finished,
            "last_seq": events[-1].seq if events else after, "events": events}).data)

