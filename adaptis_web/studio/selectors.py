"""Reads, always scoped to the teams a user belongs to.

A ``*_get_for_user`` raises ``Http404`` for an object of another team: to an outsider it does not exist.
Deleted objects (``deleted_at``) are left out of every list and page; ``deleted=True`` lists only them, for an
admin to restore.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Case, Count, FloatField, OuterRef, Prefetch, QuerySet, Subquery, Value, When
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce
from django.shortcuts import get_object_or_404
from django.utils import timezone

from adaptis_web.studio.models import (
    ApiToken,
    ClusterRecord,
    Invitation,
    MeasuredProfile,
    Membership,
    ModelSpecRecord,
    Plan,
    PlanningJob,
    Run,
    RunEvent,
    Team,
)
from adaptis_web.studio.common.refusals import Missing
from planner.errors import SpecError

RUN_EVENTS_PAGE = 2000
# What a client sees of an event (api.serializers.RunEventOutput, the run page's chart): plain numbers and words.
RUN_EVENT_FIELDS = ("seq", "rank", "device", "action", "stage", "kind", "microbatch", "step", "start_ms", "end_ms")


def team_list_for_user(*, user: AbstractBaseUser) -> QuerySet[Team]:
    return Team.objects.filter(memberships__user=user).order_by("name")


def team_for_request(*, user: AbstractBaseUser, team_id: int | None) -> Team:
    """The team a request names, or the user's only team when it names none."""
    teams = team_list_for_user(user=user)
    if team_id is not None:
        team = teams.filter(pk=team_id).first()
        if team is None:
            raise Missing("team", f"no team with id {team_id} among your teams")
        return team
    count = teams.count()
    if count == 1:
        return teams.get()
    if count == 0:
        raise SpecError("team", "you belong to no team yet; ask a team owner to add you")
    raise SpecError("team", f"is required: you belong to {count} teams")


def membership_list_for_user(*, user: AbstractBaseUser) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("team").order_by("team__name")


def team_get_for_user(*, user: AbstractBaseUser, team_id: int) -> Team:
    return get_object_or_404(team_list_for_user(user=user), pk=team_id)


def team_memberships(*, team: Team) -> QuerySet[Membership]:
    """The team's members, the owner first, then by role and name."""
    order = Case(*(When(role=role, then=Value(rank)) for rank, role in enumerate(Membership.Role.values)))
    return team.memberships.select_related("user").order_by(order, "user__username")


def team_open_invitations(*, team: Team) -> QuerySet[Invitation]:
    return team.invitations.filter(accepted_at__isnull=True, expires_at__gt=timezone.now()).order_by("-created_at")


def team_current(*, user: AbstractBaseUser, team_id: int | None) -> Team | None:
    """The team a user works in: the one they switched to (``team_id``, kept in their session) while they still
    belong to it, else their first team by name; None when they have none."""
    teams = team_list_for_user(user=user)
    return (teams.filter(pk=team_id).first() if team_id is not None else None) or teams.first()


def token_list_for_user(*, user: AbstractBaseUser) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user)


def token_get_for_user(*, user: AbstractBaseUser, token_key: str) -> ApiToken:
    return get_object_or_404(token_list_for_user(user=user), token_key=token_key)


def user_is_member(*, user: AbstractBaseUser, team: Team) -> bool:
    return Membership.objects.filter(team=team, user=user).exists()


def spec_list_for_user(*, user: AbstractBaseUser, deleted: bool = False) -> QuerySet[ModelSpecRecord]:
    return ModelSpecRecord.objects.filter(team__memberships__user=user, deleted_at__isnull=not deleted).select_related(
        "team", "owner")


def spec_get_for_user(*, user: AbstractBaseUser, spec_id: int) -> ModelSpecRecord:
    return get_object_or_404(spec_list_for_user(user=user), pk=spec_id)


def cluster_list_for_user(*, user: AbstractBaseUser, deleted: bool = False) -> QuerySet[ClusterRecord]:
    return ClusterRecord.objects.filter(team__memberships__user=user, deleted_at__isnull=not deleted).select_related(
        "team", "owner")


def cluster_get_for_user(*, user: AbstractBaseUser, cluster_id: int) -> ClusterRecord:
    return get_object_or_404(cluster_list_for_user(user=user), pk=cluster_id)


def cluster_choices_for_team(*, team: Team) -> QuerySet[ClusterRecord]:
    """The saved clusters a job form offers: the team's, not archived, newest first, without their documents."""
    return ClusterRecord.objects.filter(team=team, deleted_at__isnull=True, archived_at__isnull=True).defer("doc")


def cluster_choices_for_user(*, user: AbstractBaseUser) -> QuerySet[ClusterRecord]:
    """The saved clusters of every team of ``user`` (the upload form, which picks the team too)."""
    return cluster_list_for_user(user=user).filter(archived_at__isnull=True).defer("doc")


def job_list_for_user(*, user: AbstractBaseUser, deleted: bool = False) -> QuerySet[PlanningJob]:
    return PlanningJob.objects.filter(spec__team__memberships__user=user, deleted_at__isnull=not deleted).select_related(
        "spec", "spec__team", "created_by")


def job_list_with_plan_metrics(*, user: AbstractBaseUser, deleted: bool = False) -> QuerySet[PlanningJob]:
    """Jobs with their plans' ids and headline metrics prefetched, without the large JSON columns."""
    plans = Plan.objects.filter(deleted_at__isnull=True).only(
        "id", "job_id", "name", "strategy", "iteration_ms", "bubble_ratio", "created_at", "parent_id", "deleted_at")
    return job_list_for_user(user=user, deleted=deleted).prefetch_related(Prefetch("plans", queryset=plans))


def job_get_for_user(*, user: AbstractBaseUser, job_id: int) -> PlanningJob:
    return get_object_or_404(job_list_with_plan_metrics(user=user), pk=job_id)


def job_detail_for_user(*, user: AbstractBaseUser, job_id: int) -> PlanningJob:
    """``job_get_for_user`` without the spec's document and the job's profile, which the job endpoint does not
    show."""
    return get_object_or_404(job_list_with_plan_metrics(user=user).defer("spec__doc", "profile_doc"), pk=job_id)


def plan_list_for_user(*, user: AbstractBaseUser, deleted: bool = False) -> QuerySet[Plan]:
    return Plan.objects.filter(job__spec__team__memberships__user=user, deleted_at__isnull=not deleted).select_related(
        "job", "job__spec", "job__spec__team", "job__created_by")


def plan_get_for_user(*, user: AbstractBaseUser, plan_id: int) -> Plan:
    return get_object_or_404(plan_list_for_user(user=user), pk=plan_id)


def plan_detail_for_user(*, user: AbstractBaseUser, plan_id: int) -> Plan:
    """A plan without its documents, which the plan endpoint sends as the text planning.plan_json keeps (and reads
    only for a plan not encoded yet), nor the spec's and the job's (the job's cluster is read with the plan's
    documents, for its prediction)."""
    return get_object_or_404(plan_list_for_user(user=user).defer(
        "plan_doc", "profile_doc", "simulation", "job__spec__doc", "job__cluster_doc", "job__profile_doc",
        "job__result", "job__calibration"), pk=plan_id)


def job_own_plan(*, job: PlanningJob) -> Plan | None:
    """The plan a job page opens on: the one the job made (``PlanningJob.own_plan``), with its documents."""
    own = job.own_plan
    return None if own is None else job.plans.get(pk=own.pk)


def job_plan_from_query(*, job: PlanningJob, plan_id: str | None) -> Plan | None:
    """The job's plan a page's ``?plan=`` names; None (the page's default) when it names none of them."""
    if not plan_id or not plan_id.isdigit():
        return None
    return job.plans.filter(pk=int(plan_id), deleted_at__isnull=True).first()


def _runs_visible_to(user: AbstractBaseUser, deleted: bool = False) -> QuerySet[Run]:
    """The runs of the teams ``user`` belongs to: the one access rule for runs."""
    return Run.objects.filter(plan__job__spec__team__memberships__user=user, deleted_at__isnull=not deleted)


def _with_event_count(runs: QuerySet[Run]) -> QuerySet[Run]:
    # A correlated count rather than Count("events"): that joined every event row to the selected plan and spec
    # documents and sorted them to group, megabytes per run on each detail request and each live events poll.
    event_counts = RunEvent.objects.filter(run=OuterRef("pk")).order_by().values("run").annotate(
        count=Count("pk")).values("count")
    return runs.annotate(event_count=Coalesce(Subquery(event_counts), 0))


def run_list_for_user(*, user: AbstractBaseUser, deleted: bool = False) -> QuerySet[Run]:
    return _with_event_count(_runs_visible_to(user, deleted).select_related(
        "plan", "plan__job", "plan__job__spec", "plan__job__spec__team", "created_by"))


def run_get_for_user(*, user: AbstractBaseUser, run_id: int) -> Run:
    return get_object_or_404(run_list_for_user(user=user), pk=run_id)


def run_detail_for_user(*, user: AbstractBaseUser, run_id: int) -> Run:
    """A run with its creator and event count: what the run endpoint shows. Without its plan, job and spec, whose
    documents ``run_get_for_user`` brings (and PostgreSQL sends, and the driver parses) for the pages."""
    return get_object_or_404(_with_event_count(_runs_visible_to(user).select_related("created_by")), pk=run_id)


def run_state_for_user(*, user: AbstractBaseUser, run_id: int) -> Run:
    """A run the user may see with only its id and status loaded: what a live events poll needs, several
    times a second per viewer, without the plan, profile and spec documents ``run_get_for_user`` brings."""
    return get_object_or_404(_runs_visible_to(user).only("pk", "status"), pk=run_id)


def run_replans(*, run: Run) -> QuerySet[PlanningJob]:
    """The jobs that planned with a profile calibrated from ``run``, newest first."""
    return run.replans.filter(deleted_at__isnull=True).order_by("-created_at", "-id")


def run_event_rows_after(*, run: Run, after_seq: int = 0, limit: int = RUN_EVENTS_PAGE) -> list[dict]:
    """The run's events with ``seq > after_seq`` in order, at most ``limit`` (clients page with ``after``), as
    plain rows of ``RUN_EVENT_FIELDS``: the events endpoint's and the run page's shape, with no model instance and
    no serializer field per value."""
    return list(RunEvent.objects.filter(run=run, seq__gt=after_seq).order_by("seq").values(*RUN_EVENT_FIELDS)[:limit])


def run_event_count(*, run: Run) -> int:
    return RunEvent.objects.filter(run=run).count()


def measured_profile_get_for_user(*, user: AbstractBaseUser, profile_id: int) -> MeasuredProfile:
    return get_object_or_404(MeasuredProfile.objects.filter(
        spec__team__memberships__user=user, spec__deleted_at__isnull=True).select_related("spec", "spec__team"),
        pk=profile_id)


def spec_measured_profile(*, spec: ModelSpecRecord) -> MeasuredProfile | None:
    """The spec's newest profile measured on the runs' host."""
    return spec.measured_profiles.filter(status="succeeded", deleted_at__isnull=True).first()


def _referenced(queryset: QuerySet, pk: int, field: str, noun: str):
    """An object a request body refers to; unknown and foreign ids read the same (no existence leak)."""
    found = queryset.filter(pk=pk).first()
    if found is None:
        raise Missing(field, f"no {noun} with id {pk} among your teams' {noun}s")
    return found


def spec_for_request(*, user: AbstractBaseUser, spec_id: int) -> ModelSpecRecord:
    return _referenced(spec_list_for_user(user=user), spec_id, "spec", "spec")


def cluster_for_request(*, user: AbstractBaseUser, cluster_id: int) -> ClusterRecord:
    return _referenced(cluster_list_for_user(user=user), cluster_id, "saved_cluster", "cluster")


def plan_for_request(*, user: AbstractBaseUser, plan_id: int) -> Plan:
    return _referenced(plan_list_for_user(user=user), plan_id, "plan", "plan")


CURATED_KINDS = ("specs", "clusters", "jobs", "plans", "runs")


def curated_get_for_user(*, user: AbstractBaseUser, kind: str, object_id: int, deleted: bool = False):
    """A spec, cluster, job, plan or run (``kind``: their plural) of the user's teams; a deleted one when
    ``deleted``."""
    if kind == "runs":
        rows = _runs_visible_to(user, deleted).select_related("plan__job__spec__team")
    else:
        rows = {"specs": spec_list_for_user, "clusters": cluster_list_for_user, "jobs": job_list_for_user,
                "plans": plan_list_for_user}[kind](user=user, deleted=deleted)
    return get_object_or_404(rows, pk=object_id)


def history_for_user(*, user: AbstractBaseUser, kind: str, deleted: bool = False) -> QuerySet:
    """The rows a history list shows of ``kind``, without the large documents (the lists never show them) and
    joined only to what the API lists and the History page show of a row (its team is neither: the filters join
    it themselves)."""
    if kind == "specs":
        return spec_list_for_user(user=user, deleted=deleted).select_related(None).select_related("owner").defer("doc")
    if kind == "clusters":
        return cluster_list_for_user(user=user, deleted=deleted).select_related(None).select_related(
            "owner").defer("doc")
    if kind == "jobs":
        return job_list_with_plan_metrics(user=user, deleted=deleted).select_related(None).select_related(
            "spec", "created_by").defer("spec__doc", "cluster_doc", "profile_doc", "result", "calibration").annotate(
            iteration_ms=_job_own_plan_value("iteration_ms"), bubble_ratio=_job_own_plan_value("bubble_ratio"))
    if kind == "plans":
        return plan_list_for_user(user=user, deleted=deleted).select_related(None).select_related(
            "job", "job__spec", "job__created_by").defer(
            "plan_doc", "simulation", "profile_doc", "job__spec__doc", "job__cluster_doc", "job__profile_doc",
            "job__result", "job__calibration").annotate(tokens_per_s=_json_number("simulation", "tokens_per_s", 0.0))
    return run_list_for_user(user=user, deleted=deleted).select_related(None).select_related(
        "plan", "plan__job", "plan__job__spec", "created_by").defer(
        "plan__plan_doc", "plan__simulation", "plan__profile_doc", "plan__job__spec__doc", "plan__job__cluster_doc",
        "plan__job__profile_doc", "plan__job__result", "plan__job__calibration").annotate(
        observed_iteration_ms=_json_number("summary", "median_iteration_ms", UNMEASURED))


# What a result a row lacks (a run not measured yet, a job not planned yet) sorts as: after every real one.
UNMEASURED = 1e300


def _json_number(column: str, key: str, missing: float):
    """A number inside a JSON column, as a float the database can sort and compare (``missing`` where absent)."""
    return Coalesce(Cast(KeyTextTransform(key, column), FloatField()), Value(missing))


def _job_own_plan_value(field: str):
    """A job's own plan's ``field`` (``PlanningJob.own_plan``: made by the job, its schedule's strategy first)."""
    made = Plan.objects.filter(job=OuterRef("pk"), parent__isnull=True, deleted_at__isnull=True)
    return Coalesce(Subquery(made.filter(strategy=OuterRef("schedule")).order_by("id").values(field)[:1]),
                    Subquery(made.order_by("id").values(field)[:1]), Value(UNMEASURED), output_field=FloatField())
