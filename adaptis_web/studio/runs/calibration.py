"""Closed loop in the Studio: recalibrate a plan's profile from a finished run and plan again with it.

A run's observed action timings (``RunEvent`` rows) after its warm-up steps go through
``planner.service.calibrate_from_run`` (``planner.calibrate.recalibrate``): every stage's layers are scaled so
that the plan that ran predicts each stage's mean observed F, I/B and W durations. The per-message overhead is measured between them
(``planner.calibrate.measure_message_overhead``: the time between consecutive actions of a device that did
not wait for its input, per message end), and the new job's cluster charges it on every link. The new job plans with that
profile and cluster, with the same settings as the job the run's plan came from. It records how well each
step predicts the run it came from (``calibration``), so the page can show the prediction before, with the
calibrated compute, and with the measured overhead against what was observed; what is still off is time the
model does not explain (waits it does not predict, interference).

The cluster's own overhead is kept, with the reason recorded, when the run has no pair of actions to
measure it on (a plan on one device sends no message).

A run of a scaled-down copy calibrates to the copy on the worker's host: the new job then plans what would
run there, which is what a CPU demonstration can check.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from adaptis_web.studio.catalog.specs import spec_check_team
from adaptis_web.studio.common.refusals import Conflict
from adaptis_web.studio.models import JobStatus, PlanningJob, Run
from adaptis_web.studio.planning.jobs import JobRequest, job_create
from planner import service as planner_service


def run_observed_events(run: Run) -> list[dict]:
    """The run's observed actions in the executor's event shape (what ``recalibrate`` reads)."""
    return [{"type": "action", "action": action, "step": step, "start_ms": start, "end_ms": end}
            for action, step, start, end in run.events.order_by("seq").values_list("action", "step", "start_ms",
                                                                                   "end_ms")]


def _observed_iteration_ms(run: Run) -> float:
    summary = run.summary or {}
    return float(summary.get("median_iteration_ms") or summary.get("iteration_ms") or 0.0)


@transaction.atomic
def job_replan_from_run(*, run: Run, user: AbstractBaseUser) -> PlanningJob:
    """A queued job planning with the profile calibrated from ``run``; Conflict (409) on ``run`` when the run has
    not succeeded, ran a hybrid plan, or observed nothing: the run's state refuses it, not the request."""
    source = run.plan.job
    spec_check_team(team=source.spec.team, user=user, doing="re-planning from a run")
    if run.status != JobStatus.SUCCEEDED:
        raise Conflict("run", f"is {run.status}; only a succeeded run's timings can calibrate a profile")
    if source.is_hybrid:
        raise Conflict("run", "ran a plan of a hybrid-parallel job, whose search re-plans from the analytic "
                               "cost model only: plan the job again")
    events = run_observed_events(run)
    if not events:
        raise Conflict("run", "has no observed actions to calibrate from")
    calibrated = planner_service.calibrate_from_run(
        plan_doc=run.plan.plan_doc, profile_doc=run.plan.profile_doc, cluster_doc=source.cluster_doc, events=events,
        warmup_steps=int((run.summary or {}).get("warmup_steps") or 0))
    calibration = {
        "run_id": run.pk, "plan_id": run.plan.pk, "strategy": run.plan.strategy, "scaled_down": run.scaled_down,
        "executed_model": (run.executed_spec or {}).get("name", ""),
        "observed_iteration_ms": _observed_iteration_ms(run),
        "predicted_before_ms": run.plan.iteration_ms,
        **calibrated.record,
    }
    # A measured overhead makes the cluster this job's own: it is no longer the preset it started from.
    request = JobRequest(cluster_preset="" if calibrated.overhead_measured else source.cluster_preset,
                         cluster=calibrated.cluster,
                         num_devices=source.num_devices,
                         num_microbatches=source.num_microbatches, schedule=source.schedule,
                         partition=source.partition, seed=source.seed, time_budget_s=source.time_budget_s,
                         memory_limit_bytes=source.memory_limit_bytes)
    return job_create(spec_record=source.spec, user=user, request=request, profile=calibrated.profile,
                      calibrated_from=run, calibration=calibration)
