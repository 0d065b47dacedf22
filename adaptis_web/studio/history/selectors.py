"""Reads of a team's history: the rows each list shows, and the curated object (spec, cluster, job, plan or run) a
curation request names. Deleted objects are left out of every list; ``deleted=True`` lists only them, for an
admin to restore."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import FloatField, OuterRef, QuerySet, Subquery, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce
from django.shortcuts import get_object_or_404

from adaptis_web.studio.catalog.selectors import cluster_list_for_user, spec_list_for_user
from adaptis_web.studio.models import Plan
from adaptis_web.studio.planning.selectors import job_list_for_user, job_list_with_plan_metrics, plan_list_for_user
from adaptis_web.studio.runs.selectors import run_list_for_user, runs_visible_to


CURATED_KINDS = ("specs", "clusters", "jobs", "plans", "runs")


def curated_get_for_user(*, user: AbstractBaseUser, kind: str, object_id: int, deleted: bool = False):
    """A spec, cluster, job, plan or run (``kind``: their plural) of the user's teams; a deleted one when
    ``deleted``."""
    if kind == "runs":
        rows = runs_visible_to(user, deleted).select_related("plan__job__spec__team")
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
