"""Cancelling a run, and what its page says about it while it goes.

The web asks, the worker acts: ``run_cancel`` sets ``Run.cancel_requested`` (a queued run ends cancelled at
once, since a worker only claims queued runs); the worker running it gives ``executor.running.launch.run_plan`` a
``should_stop`` callback (``run_stop_reader``) that reads the flag every ``CANCEL_READ_INTERVAL_S``, and the
launcher then ends the ranks (SIGTERM to each rank's session, SIGKILL 1.5 s later) and raises
``RunCancelled``; ``runs.local_runs`` records the run as cancelled and keeps the events stored so far.
"""

from __future__ import annotations

import time
from typing import Callable

from django.contrib.auth.models import AbstractBaseUser

from adaptis_web.studio.accounts.roles import role_require_own_or_admin
from adaptis_web.studio.models import JobStatus, Run
from adaptis_web.studio.work.cancelling import request_cancel
from planner.service import load_parallel

CANCEL_READ_INTERVAL_S = 0.25


def run_cancel(*, run: Run, user: AbstractBaseUser) -> Run:
    """Cancel ``run``: its creator (a member) or an admin of its team. A queued run ends cancelled now; a running
    one within a few seconds, when its worker stops the ranks. A 409 on ``status`` for a finished run."""
    role_require_own_or_admin(user=user, team=run.plan.job.spec.team, creator_id=run.created_by_id,
                              doing="cancelling a run")
    request_cancel(run, noun="run", queued_note={"error": "cancelled before a worker started it"})
    run.refresh_from_db(fields=["status", "cancel_requested", "finished_at", "error"])
    return run


def run_stop_reader(run_id: int) -> Callable[[], bool]:
    """``run_plan``'s ``should_stop`` for a run: whether a cancel was asked for (read at most every
    ``CANCEL_READ_INTERVAL_S``; once true it stays true)."""
    state = {"requested": False, "read_at": float("-inf")}

    def should_stop() -> bool:
        now = time.monotonic()
        if not state["requested"] and now - state["read_at"] >= CANCEL_READ_INTERVAL_S:
            state["read_at"] = now
            state["requested"] = Run.objects.filter(pk=run_id, cancel_requested=True).exists()
        return state["requested"]

    return should_stop


def run_phase(*, run: Run, event_count: int) -> str:
    """Where a run is, as its page says it: ``queued`` (waiting for a worker), ``starting`` (the worker has it and
    its ranks are starting: no action has ended yet), ``running``, ``cancelling`` or the final status."""
    if run.is_finished:
        return run.status
    if run.cancel_requested:
        return "cancelling"
    if run.status == JobStatus.QUEUED:
        return "queued"
    return "running" if event_count else "starting"


def run_step_tokens(run) -> int:
    """Tokens one step of ``run`` trains: micro-batches × micro-batch size × sequence length of the model its ranks
    ran (the scaled-down copy where it ran one), the count ``planner.simulator`` divides for a predicted tokens/s; a
    hybrid plan's global batch instead (its micro-batch size, and every data-parallel replica's micro-batches)."""
    executed = run.executed_spec or run.plan.job.spec.doc
    parallel = run.plan.plan_doc.get("parallel")
    sequences = (load_parallel(parallel).global_batch if parallel else
                 run.plan.plan_doc["num_microbatches"] * executed.get("micro_batch_size", 1))
    return sequences * executed["seq_len"]


def run_steps_chart(*, run, predicted_ms: float, predicted_tokens_per_s: float | None) -> dict | None:
    """What the run page's steps card shows of a finished run: each step's iteration beside the predicted one, the
    loss per step, and the observed tokens per second (the steady steps' median iteration, as the page's observed
    iteration, over ``run_step_tokens``). None before it has steps."""
    steps = (run.summary or {}).get("steps") or []
    if not steps:
        return None
    tokens = run_step_tokens(run)
    median_ms = run.summary.get("median_iteration_ms") or run.summary.get("iteration_ms")
    return {"steps": [row["step"] for row in steps], "iteration_ms": [row["iteration_ms"] for row in steps],
            "losses": run.summary.get("losses") or [], "warmup_steps": run.summary.get("warmup_steps", 0),
            "predicted_ms": predicted_ms, "tokens_per_step": tokens,
            "tokens_per_s": tokens / (median_ms / 1e3) if median_ms else None,
            "predicted_tokens_per_s": predicted_tokens_per_s}


def observed_statistic(summary: dict) -> str:
    """What the run's "observed iteration" is, in words, for the summary ``planner.observed.summarize`` wrote."""
    steps = [row["step"] for row in (summary or {}).get("steps", [])]
    if not steps:
        return ""
    span = "each step timed from its first action's start to its last action's end, over all devices"
    warmup = int(summary.get("warmup_steps") or 0)
    measured = steps[warmup:]
    if not warmup:
        return f"step {measured[0]} alone (a one-step run has no warm-up step to leave out); {span}"
    left_out = ", ".join(str(step) for step in steps[:warmup])
    which = f"step {measured[0]}" if len(measured) == 1 else f"steps {measured[0]}–{measured[-1]}"
    return (f"median over {which} ({len(measured)} step{'s' if len(measured) != 1 else ''}; warm-up step "
            f"{left_out} left out); {span}")


def plan_replicas(plan_doc: dict) -> int:
    """The ranks that run each pipeline rank of a plan: tp x cp x dp of a hybrid plan's, else 1."""
    parallel = plan_doc.get("parallel")
    if not parallel:
        return 1
    config = load_parallel(parallel)
    return config.tp * config.cp * config.dp


def predicted_tokens_per_s(plan_doc: dict, simulation: dict) -> float | None:
    """The predicted tokens per second of a whole step: the simulator's are one pipeline's, and each data-parallel
    replica of a hybrid plan trains its own."""
    tokens_per_s = simulation.get("tokens_per_s")
    parallel = plan_doc.get("parallel")
    return tokens_per_s * load_parallel(parallel).dp if tokens_per_s and parallel else tokens_per_s


def predicted_step_end(predicted: dict) -> list[dict]:
    """What a hybrid plan's prediction (the planner's ``predicted``: the slowest pipeline rank's) charges after its
    pipeline, in order: the exposed data-parallel communication, then the optimizer step. Its TP, CP and EP
    collectives are part of F and B, not apart. The run chart draws them after the predicted pipeline."""
    parts = [("data_parallel_exposed", "dp", predicted.get("data_parallel_exposed_ms") or 0.0,
              "the DP gradient reduction and parameter gathering left exposed at the step's end"),
             ("optimizer_step", "optimizer", predicted.get("optimizer_ms") or 0.0, "the optimizer step")]
    return [{"op": op, "group": group, "ms": ms, "note": f"predicted: {note} (the slowest pipeline rank's)"}
            for op, group, ms, note in parts if ms > 0]
