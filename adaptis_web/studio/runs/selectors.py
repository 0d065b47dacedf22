"""Reads of runs, their events and measured profiles, scoped to the teams a user belongs to (``Http404`` for
another team's)."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.shortcuts import get_object_or_404

from adaptis_web.studio.models import (MeasuredProfile, ModelSpecRecord, PlanningJob, Run, RunCollective,
                                      RunEvent)


RUN_EVENTS_PAGE = 2000
# What a client sees of an event (runs.serializers.RunEventOutput, the run page's chart): plain numbers and words.
RUN_EVENT_FIELDS = ("seq", "rank", "device", "action", "stage", "kind", "microbatch", "step", "start_ms", "end_ms")
# And of a hybrid run's collective (runs.serializers.RunCollectiveOutput).
RUN_COLLECTIVE_FIELDS = ("seq", "rank", "device", "op", "group", "step", "index", "bytes", "start_ms", "end_ms")


def runs_visible_to(user: AbstractBaseUser, deleted: bool = False) -> QuerySet[Run]:
    """The runs of the teams ``user`` belongs to: the one access rule for runs."""
    return Run.objects.filter(plan__job__spec__team__memberships__user=user, deleted_at__isnull=not deleted)


def _with_event_count(runs: QuerySet[Run]) -> QuerySet[Run]:
    # A correlated count rather than Count("events"): that joined every event row to the selected plan and spec
    # documents and sorted them to group, megabytes per run on each detail request and each live events poll.
    event_counts = RunEvent.objects.filter(run=OuterRef("pk")).order_by().values("run").annotate(
        count=Count("pk")).values("count")
    return runs.annotate(event_count=Coalesce(Subquery(event_counts), 0))


def run_list_for_user(*, user: AbstractBaseUser, deleted: bool = False) -> QuerySet[Run]:
    return _with_event_count(runs_visible_to(user, deleted).select_related(
        "plan", "plan__job", "plan__job__spec", "plan__job__spec__team", "created_by"))


def run_get_for_user(*, user: AbstractBaseUser, run_id: int) -> Run:
    return get_object_or_404(run_list_for_user(user=user), pk=run_id)


def run_detail_for_user(*, user: AbstractBaseUser, run_id: int) -> Run:
    """A run with its creator and event count: what the run endpoint shows. Without its plan, job and spec, whose
    documents ``run_get_for_user`` brings (and PostgreSQL sends, and the driver parses) for the pages."""
    return get_object_or_404(_with_event_count(runs_visible_to(user).select_related("created_by")), pk=run_id)


def run_state_for_user(*, user: AbstractBaseUser, run_id: int) -> Run:
    """A run the user may see with only its id and status loaded: what a live events poll needs, several
    times a second per viewer, without the plan, profile and spec documents ``run_get_for_user`` brings."""
    return get_object_or_404(runs_visible_to(user).only("pk", "status"), pk=run_id)


def run_replans(*, run: Run) -> QuerySet[PlanningJob]:
    """The jobs that planned with a profile calibrated from ``run``, newest first."""
    return run.replans.filter(deleted_at__isnull=True).order_by("-created_at", "-id")


def run_events_after(*, run: Run, after_seq: int = 0, limit: int = RUN_EVENTS_PAGE) -> dict:
    """The run's actions and collectives with ``seq > after_seq``, at most ``limit`` of them together in ``seq``
    order (clients page with ``after`` = ``last_seq``): ``{"events": [...], "collectives": [...], "last_seq": n}``,
    plain rows of ``RUN_EVENT_FIELDS`` and ``RUN_COLLECTIVE_FIELDS``: the events endpoint's and the run page's
    shape, with no model instance and no serializer field per value."""
    actions = list(RunEvent.objects.filter(run=run, seq__gt=after_seq).order_by("seq")
                   .values(*RUN_EVENT_FIELDS)[:limit])
    collectives = list(RunCollective.objects.filter(run=run, seq__gt=after_seq).order_by("seq")
                       .values(*RUN_COLLECTIVE_FIELDS)[:limit])
    if len(actions) + len(collectives) > limit:
        last = sorted(row["seq"] for row in actions + collectives)[limit - 1]
        actions = [row for row in actions if row["seq"] <= last]
        collectives = [row for row in collectives if row["seq"] <= last]
    last_seq = max((rows[-1]["seq"] for rows in (actions, collectives) if rows), default=after_seq)
    return {"events": actions, "collectives": collectives, "last_seq": last_seq}


def run_event_count(*, run: Run) -> int:
    return RunEvent.objects.filter(run=run).count()


def measured_profile_get_for_user(*, user: AbstractBaseUser, profile_id: int) -> MeasuredProfile:
    return get_object_or_404(MeasuredProfile.objects.filter(
        spec__team__memberships__user=user, spec__deleted_at__isnull=True).select_related("spec", "spec__team"),
        pk=profile_id)


def spec_measured_profile(*, spec: ModelSpecRecord) -> MeasuredProfile | None:
    """The spec's newest profile measured on the runs' host."""
    return spec.measured_profiles.filter(status="succeeded", deleted_at__isnull=True).first()
