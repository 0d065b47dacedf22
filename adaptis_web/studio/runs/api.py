"""REST endpoints of runs (local and cluster), their events (read, and the ingest a cluster run's ranks report to),
and profiles measured on the runs' host."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from adaptis_web.studio.api.pagination import checked_query_int
from adaptis_web.studio.api.throttles import ThrottledCreate
from adaptis_web.studio.catalog.selectors import spec_get_for_user
from adaptis_web.studio.history.api import CuratedDetailMixin, HistoryListApi
from adaptis_web.studio.history.filters import RunFilter
from adaptis_web.studio.planning.selectors import plan_for_request
from adaptis_web.studio.planning.serializers import JobDetailOutput
from adaptis_web.studio.runs.calibration import job_replan_from_run
from adaptis_web.studio.runs.cluster_runs import IngestRefusal, cluster_run_create, ingest, launch
from adaptis_web.studio.runs.local_runs import run_create
from adaptis_web.studio.runs.profiling import measured_profile_create
from adaptis_web.studio.runs.run_control import run_cancel
from adaptis_web.studio.runs.selectors import (RUN_EVENTS_PAGE, measured_profile_get_for_user, run_detail_for_user,
                                               run_events_after, run_get_for_user, run_state_for_user)
from adaptis_web.studio.runs.serializers import (IngestBatchInput, IngestOutput, MeasuredProfileCreateInput,
                                                 MeasuredProfileOutput, RunCreatedOutput, RunCreateInput,
                                                 RunEventsOutput, RunEventsQuery, RunOutput)
from adaptis_web.studio.url_converters import MAX_ID


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
        plan = plan_for_request(user=request.user, plan_id=values["plan"])
        if values["target"] == "local":
            run = run_create(plan=plan, user=request.user, steps=values["steps"], scale_down=values["scale_down"])
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
        return Response(RunOutput(run_detail_for_user(user=request.user, run_id=run_id)).data)


class RunReplanApi(ThrottledCreate, APIView):
    throttle_scope = "jobs"
    @extend_schema(request=None, responses={201: JobDetailOutput},
                   description="Recalibrate the run's plan profile from its observed action timings and queue a "
                               "planning job with the same settings on that profile. A run that has not succeeded "
                               "is a 400 naming 'run'.")
    def post(self, request, run_id: int):
        job = job_replan_from_run(run=run_get_for_user(user=request.user, run_id=run_id),
                                  user=request.user)
        return Response(JobDetailOutput(job).data, status=status.HTTP_201_CREATED)


class RunCancelApi(APIView):
    @extend_schema(request=None, responses={200: RunOutput},
                   description="A queued run is cancelled at once; a running one within a few seconds, when its "
                               "worker ends the ranks (the events they sent are kept); a finished one is a 400 "
                               "naming 'status'. Its creator (a member) or an admin of the team may cancel it.")
    def post(self, request, run_id: int):
        run = run_cancel(run=run_get_for_user(user=request.user, run_id=run_id), user=request.user)
        return Response(RunOutput(run_detail_for_user(user=request.user, run_id=run.pk)).data)


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
                   description="A cluster run's ranks report their events here (executor.running.events.HttpSink) "
                               "with the run's secret as a bearer token. A wrong, another run's or an expired "
                               "(finished run) secret is a 403 and a batch with an event the plan does not have a 400 "
                               "naming it; either stores nothing. An action or collective already stored is counted "
                               "as a duplicate.")
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
        run = run_state_for_user(user=request.user, run_id=run_id)
        # As the paging parameters are read: an empty or repeated one is a 400 too (a serializer took ?after= as 0)
        after = checked_query_int(request, "after", 0, MAX_ID, 0)
        limit = checked_query_int(request, "limit", 1, RUN_EVENTS_PAGE, RUN_EVENTS_PAGE)
        page = run_events_after(run=run, after_seq=after, limit=limit)
        # RunEventsOutput's shape, built directly: the rows are already plain values (a page of events is polled
        # several times a second per viewer).
        return Response({"run": run.pk, "status": str(run.status), "finished": run.is_finished, **page})


class SpecProfilesApi(APIView):
    @extend_schema(request=MeasuredProfileCreateInput, responses={201: MeasuredProfileOutput},
                   description="Measure the spec's layers on the host that runs CPU runs (a task on the runs queue), "
                               "one profiler per rank at once; with a plan, its stages are timed as its ranks run "
                               "them too. Poll GET /api/profiles/ID/. Jobs on cpu-host plan on such a profile.")
    def post(self, request, spec_id: int):
        data = MeasuredProfileCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        spec = spec_get_for_user(user=request.user, spec_id=spec_id)
        plan = None if values["plan"] is None else plan_for_request(user=request.user, plan_id=values["plan"])
        profile = measured_profile_create(spec_record=spec, user=request.user, num_ranks=values["num_ranks"],
                                          split_backward=values["split_backward"], plan=plan)
        return Response(MeasuredProfileOutput(profile).data, status=status.HTTP_201_CREATED)


class MeasuredProfileApi(APIView):
    @extend_schema(responses=MeasuredProfileOutput)
    def get(self, request, profile_id: int):
        return Response(MeasuredProfileOutput(
            measured_profile_get_for_user(user=request.user, profile_id=profile_id)).data)
