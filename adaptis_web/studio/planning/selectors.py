"""Reads of planning jobs and plans, scoped to the teams a user belongs to (``Http404`` for another team's)."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Prefetch, QuerySet
from django.shortcuts import get_object_or_404

from adaptis_web.studio.common.selectors import referenced
from adaptis_web.studio.models import Plan, PlanningJob


def job_list_for_user(*, user: AbstractBaseUser, deleted: bool = False) -> QuerySet[PlanningJob]:
    return PlanningJob.objects.filter(spec__team__memberships__user=user, deleted_at__isnull=not deleted) \
        .select_related("spec", "spec__team", "created_by")


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


def plan_for_request(*, user: AbstractBaseUser, plan_id: int) -> Plan:
    return referenced(plan_list_for_user(user=user), plan_id, "plan", "plan")
