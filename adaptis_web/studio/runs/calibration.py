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

A hybrid run calibrates the cluster instead (``planner.service.calibrate_hybrid_from_run``): each link class's
collective latency and bandwidth fitted to its stored collectives (``RunCollective``), and the device's per-kernel
overhead fitted so that the plan's analytic TP/CP shards take what its actions took. The new hybrid job searches
again with the source job's GPUs, sequence, batch and pins on that cluster, which is then its own.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from adaptis_web.studio.catalog.specs import spec_check_team
from adaptis_web.studio.common.refusals import Conflict
from adaptis_web.studio.models import JobMode, JobStatus, PlanningJob, Run
from adaptis_web.studio.planning.jobs import JobRequest, job_create, job_request_check
from planner import service as planner_service
from planner.errors import SpecError


def run_observed_events(run: Run) -> list[dict]:
    """The run's observed actions in the executor's event shape (what ``recalibrate`` reads)."""
    return [{"type": "action", "action": action, "step": step, "start_ms": start, "end_ms": end}
            for action, step, start, end in run.events.order_by("seq").values_list("action", "step", "start_ms",
                                                                                   "end_ms")]


def run_collective_events(run: Run) -> list[dict]:
    """The run's observed collectives in the executor's event shape (what ``fit_collective_links`` reads)."""
    fields = ("op", "group", "rank", "device", "step", "index", "bytes", "start_ms", "end_ms")
    return [{"type": "collective", **dict(zip(fields, row))}
            for row in run.collectives.order_by("seq").values_list(*fields)]


def _observed_iteration_ms(run: Run) -> float:
    summary = run.summary or {}
    return float(summary.get("median_iteration_ms") or summary.get("iteration_ms") or 0.0)


@transaction.atomic
def job_replan_from_run(*, run: Run, user: AbstractBaseUser) -> PlanningJob:
    """A queued job planning with the profile calibrated from ``run`` (a hybrid job's: on the cluster calibrated from
    it); Conflict (409) on ``run`` when the run has not succeeded, observed nothing, or (hybrid) ran no collective to
    fit: the run's state refuses it, not the request."""
    source = run.plan.job
    spec_check_team(team=source.spec.team, user=user, doing="re-planning from a run")
    if run.status != JobStatus.SUCCEEDED:
        raise Conflict("run", f"is {run.status}; only a succeeded run's timings can calibrate a profile")
    events = run_observed_events(run)
    if not events:
        raise Conflict("run", "has no observed actions to calibrate from")
    warmup_steps = int((run.summary or {}).get("warmup_steps") or 0)
    if source.is_hybrid:
        return _hybrid_replan(run=run, user=user, events=events + run_collective_events(run),
                              warmup_steps=warmup_steps)
    calibrated = planner_service.calibrate_from_run(
        plan_doc=run.plan.plan_doc, profile_doc=run.plan.profile_doc, cluster_doc=source.cluster_doc, events=events,
        warmup_steps=warmup_steps)
    calibration = _calibration_record(run, calibrated.record)
    # A measured overhead makes the cluster this job's own: it is no longer the preset it started from.
    request = JobRequest(cluster_preset="" if calibrated.overhead_measured else source.cluster_preset,
                         cluster=calibrated.cluster,
                         num_devices=source.num_devices,
                         num_microbatches=source.num_microbatches, schedule=source.schedule,
                         partition=source.partition, seed=source.seed, time_budget_s=source.time_budget_s,
                         memory_limit_bytes=source.memory_limit_bytes)
    return job_create(spec_record=source.spec, user=user, request=request, profile=calibrated.profile,
                      calibrated_from=run, calibration=calibration)


def _calibration_record(run: Run, calibrated_record: dict) -> dict:
    return {"run_id": run.pk, "plan_id": run.plan.pk, "strategy": run.plan.strategy, "scaled_down": run.scaled_down,
            "executed_model": (run.executed_spec or {}).get("name", ""),
            "observed_iteration_ms": _observed_iteration_ms(run), "predicted_before_ms": run.plan.iteration_ms,
            **calibrated_record}


def _hybrid_replan(*, run: Run, user: AbstractBaseUser, events: list[dict], warmup_steps: int) -> PlanningJob:
    source = run.plan.job
    try:
        calibrated = planner_service.calibrate_hybrid_from_run(
            plan_doc=run.plan.plan_doc, model_doc=run.executed_spec or source.spec.doc,
            cluster_doc=source.cluster_doc, events=events, warmup_steps=warmup_steps)
    except SpecError as error:   # a run without collectives (one GPU), say: its state refuses
        raise Conflict("run", f"cannot calibrate the cluster: {error.reason}") from error
    request = job_request_check(spec=planner_service.load_model_spec(source.spec.doc), mode=JobMode.HYBRID,
                                cluster_doc=calibrated.cluster.to_dict(), gpus=source.gpus, seq_len=source.seq_len,
                                global_batch=source.global_batch, pins=source.pins,
                                software=source.software.to_dict(), time_budget_s=source.time_budget_s)
    return job_create(spec_record=source.spec, user=user, request=request, calibrated_from=run,
                      calibration=_calibration_record(run, calibrated.record))
