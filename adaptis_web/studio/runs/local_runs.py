"""Runs: execute a plan on real torch.distributed gloo ranks on the worker's host (``Run on CPU``).

``run_create`` refuses what a CPU host should not attempt (too many ranks, a realistic model without the
scaled-down variant); ``run_execute`` (the Celery task's body) launches the executor with a Redis event
sink, relays the live events into the database while the ranks run, and records the outcome; a cancel
(``runs.run_control``) stops the ranks and records the run as cancelled with the events it sent so far.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from adaptis_web.studio.catalog.specs import spec_check_team
from adaptis_web.studio.models import JobStatus, Plan, Run
from adaptis_web.studio.runs.live_events import RunEventRelay, run_event_sink, run_events_backfill
from adaptis_web.studio.runs.run_control import run_stop_reader
from adaptis_web.studio.work.liveness import heartbeat
from adaptis_web.studio.work.queueing import enqueue_on_commit, internal_error
from executor import service as executor_service
from executor.service import ExecutorError, RunCancelled
from planner.errors import PlanError, SpecError
from planner.service import ModelSpec, count_parameters, load_model_spec, load_plan
from planner.service import Plan as PlannerPlan  # the loaded document; ``Plan`` here is the stored row

logger = logging.getLogger(__name__)

MAX_RUN_STEPS = 50
# A run's first step warms up (allocations, first messages); its observed iteration is the median over the steps
# after it (planner.observed), so a run should have enough of them to show a steady state: 11 here.
DEFAULT_RUN_STEPS = 12
CPU_BACKEND = "gloo"


def cpu_run_refusal(spec: ModelSpec) -> str | None:
    """Why ``spec`` as uploaded is too big for a CPU run, or None when it may run as is."""
    parameters = count_parameters(spec)
    if parameters <= settings.CPU_RUN_MAX_PARAMS:
        return None
    return (f"{spec.name!r} has {parameters / 1e6:,.0f}M parameters, more than a CPU run takes "
            f"({settings.CPU_RUN_MAX_PARAMS / 1e6:,.0f}M); choose the scaled-down variant, which keeps the "
            f"layer pattern at hidden size 64 (executor.model.scale_spec)")


@dataclass(frozen=True)
class PlanExecution:
    """What running a stored plan takes, checked once (the plan document loaded once): its ranks (one per GPU of a
    hybrid plan, ``executor.service.world_size``), why the executor cannot run it as planned anywhere
    (``executor.service.execution_refusal`` with the job's model: a layer kind without a form for the plan's TP, say)
    and why this host cannot start its ranks (more than ``CPU_RUN_MAX_RANKS``), each None when nothing stands in the
    way."""

    world_size: int
    execution_refusal: SpecError | None
    host_refusal: SpecError | None

    @property
    def run_refusal(self) -> SpecError | None:
        """Why ``plan`` cannot run on this host's CPU at all (any steps, scaled down or not), or None: what a page
        says instead of offering "Run on CPU", and what ``run_create`` refuses."""
        return self.execution_refusal or self.host_refusal


def plan_execution(plan: Plan) -> PlanExecution:
    loaded = load_plan(plan.plan_doc)
    world_size = executor_service.world_size(loaded)
    # The job's model as uploaded: a scaled-down copy keeps its layer kinds, which decide what TP can split
    # (its head counts are checked again by the ranks that build it).
    refusal = executor_service.execution_refusal(loaded, load_model_spec(plan.job.spec.doc))
    return PlanExecution(world_size, refusal, _host_ranks_refusal(loaded, world_size))


def _host_ranks_refusal(plan: PlannerPlan, world_size: int) -> SpecError | None:
    if world_size <= settings.CPU_RUN_MAX_RANKS:
        return None
    parallel = plan.parallel
    if parallel is None:
        uses = f"uses {world_size} devices"
    else:
        degrees = [f"{name.upper()}{degree}" for name, degree in
                   (("tp", parallel.tp), ("cp", parallel.cp), ("pp", parallel.pp), ("dp", parallel.dp)) if degree > 1]
        uses = f"uses {world_size} ranks ({' × '.join(degrees)})"
    return SpecError("plan", f"{uses}; a CPU run starts at most {settings.CPU_RUN_MAX_RANKS} ranks "
                             f"(CPU_RUN_MAX_RANKS)")


@transaction.atomic
def run_create(*, plan: Plan, user: AbstractBaseUser, steps: int = 1, scale_down: bool = False) -> Run:
    spec_check_team(team=plan.job.spec.team, user=user, doing="starting a run")

    execution = plan_execution(plan)
    if execution.run_refusal is not None:
        raise execution.run_refusal
    if not 1 <= steps <= MAX_RUN_STEPS:
        raise SpecError("steps", f"must be between 1 and {MAX_RUN_STEPS}; got {steps}")
    refusal = None if scale_down else cpu_run_refusal(load_model_spec(plan.job.spec.doc))
    if refusal:
        raise SpecError("scale_down", refusal)
    run = Run.objects.create(plan=plan, created_by=user, backend=CPU_BACKEND, world_size=execution.world_size,
                             steps=steps, scaled_down=scale_down, celery_task_id=str(uuid.uuid4()))
    enqueue_on_commit(run)
    return run


def _executed_spec(run: Run) -> ModelSpec:
    spec = load_model_spec(run.plan.job.spec.doc)
    if not run.scaled_down:
        return spec
    # scaled so that the plan's axes split it as they split the model (torch: imported on first use, in the runs
    # worker only)
    return executor_service.scale_spec(spec, parallel=load_plan(run.plan.plan_doc).parallel)


def _run_fail(run_id: int, error: str) -> None:
    Run.objects.filter(pk=run_id).update(status=JobStatus.FAILED, error=error, finished_at=timezone.now())


def _execute(run: Run) -> None:
    spec = _executed_spec(run)
    Run.objects.filter(pk=run.pk).update(executed_spec=spec.to_dict())
    relay = RunEventRelay(run.pk).start()
    try:
        result = executor_service.run_plan(load_plan(run.plan.plan_doc), spec, backend=run.backend, seed=0,
                          event_sink=run_event_sink(run.pk), steps=run.steps, timeout_s=settings.RUN_TIMEOUT_S,
                          should_stop=run_stop_reader(run.pk))
    except RunCancelled:
        result = None  # recorded once the relay has stored every event the ranks sent before they were stopped
    except ExecutorError as error:
        _run_fail(run.pk, "\n\n".join(filter(None, [str(error), error.traceback_text])))
        return
    except (SpecError, PlanError) as error:
        _run_fail(run.pk, str(error))
        return
    finally:
        relay.stop()
    if result is None:
        Run.objects.filter(pk=run.pk).update(status=JobStatus.CANCELLED, finished_at=timezone.now(),
                                             error="cancelled while running: its ranks were stopped")
        return
    missed = run_events_backfill(run.pk, result.events)
    if missed:
        logger.warning("run %s: %d events did not arrive through Redis and were stored from the result",
                       run.pk, missed)
    balancing_loss = result.balancing_losses[-1] if result.balancing_losses else None
    Run.objects.filter(pk=run.pk).update(status=JobStatus.SUCCEEDED, summary={**result.summary, "losses": result.losses},
                                         loss=result.loss, balancing_loss=balancing_loss, finished_at=timezone.now())


def run_execute(*, run_id: int) -> None:
    """Run a queued Run (the Celery task's body); failures end on the run row."""
    claimed = Run.objects.filter(pk=run_id, status=JobStatus.QUEUED).update(status=JobStatus.RUNNING,
                                                                         started_at=timezone.now())
    if not claimed:
        logger.warning("run %s is not queued; skipping", run_id)
        return
    run = Run.objects.select_related("plan", "plan__job", "plan__job__spec").get(pk=run_id)
    try:
        with heartbeat(Run, run_id):
            _execute(run)
    except Exception:
        logger.exception("%s %s failed", "run", run_id)
        _run_fail(run_id, internal_error("run", run_id, "runner"))
