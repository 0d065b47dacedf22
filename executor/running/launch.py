"""``run_plan``: run a Plan on local ranks (one per pipeline device, or per GPU of a hybrid plan) and collect what
they measured.

Each rank is ``python -m executor.running.worker`` with torchrun's environment variables, exactly the process a
multi-host torchrun launch starts, forked by the calling thread's zygote (``executor.running.processes``, which
has imported torch, ``torch._dynamo`` and the executor once: a rank starts without the 2.3 s of CPU those imports
cost, ``benchmarks/run_start.py``) rather than a multiprocessing child: that works the same from a shell, a test, or
a (daemonic) Celery worker. The launcher watches the ranks; the first one to fail decides the error (the others
typically fail after it, on a dead connection), and every child is killed and reaped on failure, timeout or
interruption, so nothing outlives the call. A caller can also stop a run it no longer wants: ``should_stop`` is
asked a few times a second while the ranks run, and once it answers true the ranks are ended (SIGTERM to each rank's
session, SIGKILL after ``CANCEL_KILL_GRACE_SECONDS``) and ``RunCancelled`` is raised; the events the ranks sent
before that stay where they went.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import tempfile
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable
from datetime import timedelta
from pathlib import Path

import torch
from torch.distributed import TCPStore

from executor.running.capacity import check_capacity
from executor.running.scope import execution_refusal, planned_spec, world_size
from executor.running.config import RunConfig
from executor.errors import ExecutorError, RunCancelled
from executor.running.events import open_sink, resolved_sink
from executor.running.processes import LAUNCHER_PID_ENV, REPO_ROOT, ZygoteChild, child_env, zygote
from executor.running.lowering import CAUSAL, lower_plan
from executor.running.worker import RESULT_FILE, done_file, error_file, run_dtype
from planner.plan import Plan
from planner.spec.model import ModelSpec

logger = logging.getLogger(__name__)

FAILURE_GRACE_SECONDS = 3.0
POLL_SECONDS = 0.05
KILL_GRACE_SECONDS = 5.0
CANCEL_POLL_SECONDS = 0.2        # how often a running launcher asks ``should_stop``
CANCEL_KILL_GRACE_SECONDS = 1.5  # a cancelled rank gets this long after SIGTERM before SIGKILL
STDERR_TAIL = 4000


@dataclass
class RunResult:
    events: list[dict]
    summary: dict
    loss: float | None
    losses: list[float | None] = field(default_factory=list)
    step_wall_ms: list[float] = field(default_factory=list)   # per step, barrier to barrier (step_barriers=True)
    # per step, the MoE load-balancing loss (weighed, summed over micro-batches and layers; not in ``losses``),
    # None where the model has none
    balancing_losses: list[float | None] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"events": self.events, "summary": self.summary, "loss": self.loss, "losses": self.losses,
                "balancing_losses": self.balancing_losses, "step_wall_ms": self.step_wall_ms}


def rendezvous_store(world_size: int) -> TCPStore:
    """The run's rendezvous store, hosted here on a port the OS picks while binding it (no race with other
    programs for a port probed earlier); ranks join it as clients, as under torchrun's agent."""
    return TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
                    timeout=timedelta(seconds=600))


def _rank_env(rank: int, world_size: int, port: int, threads: int) -> dict:
    env = dict(os.environ)
    # OMP_NUM_THREADS sizes the OpenMP pool before torch is imported; the rank also calls set_num_threads.
    env.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "TORCHELASTIC_USE_AGENT_STORE": "True", "OMP_NUM_THREADS": str(threads),
                LAUNCHER_PID_ENV: str(os.getpid())})
    return child_env(env)


def _stop(processes: list[ZygoteChild], grace_s: float = KILL_GRACE_SECONDS) -> None:
    """Terminate every rank's process group, then kill what is left after ``grace_s``, and reap them all."""
    for process in processes:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def _failure(job_dir: Path, rank: int, returncode: int) -> ExecutorError:
    report = error_file(job_dir, rank)
    if report.exists():
        details = json.loads(report.read_text())
        return ExecutorError(details["error"], rank=rank, traceback_text=details["traceback"])
    stderr = (job_dir / f"rank{rank}.stderr").read_text(errors="replace")[-STDERR_TAIL:]
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else f"signal {-returncode}"
        return ExecutorError(f"rank {rank} was killed by {name} (the OOM killer, or someone's kill) and could "
                             "not report anything", rank=rank, traceback_text=stderr)
    return ExecutorError(f"exited with status {returncode} without a Python traceback", rank=rank,
                         traceback_text=stderr)


def _await_exit(processes: list[ZygoteChild], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(process.poll() is None for process in processes):
        time.sleep(POLL_SECONDS)


def _first_failure(job_dir: Path, failed_ranks: list[int], codes: list[int | None]) -> int:
    """Of the failed ranks, the cause: a rank killed by a signal before it could report anything (its peers
    then fail with "Connection reset by peer", which they do record), else the one whose error was recorded
    first (the others followed it)."""
    def order(rank: int) -> tuple[int, float, int]:
        report = error_file(job_dir, rank)
        if not report.exists():
            killed = codes[rank] is not None and codes[rank] < 0
            return (0 if killed else 1, float("inf"), rank)
        return (1, json.loads(report.read_text()).get("time", float("inf")), rank)
    return min(failed_ranks, key=order)


def _report(config: RunConfig, event: dict) -> None:
    """Best effort: the error is raised to the caller whether or not the sink takes it."""
    if config.event_sink:
        sink = open_sink(config.event_sink, config.event_token_file)
        try:
            sink.write([event])
        except Exception:  # noqa: BLE001 - a sink that is down must not hide the run's own failure
            logger.warning("could not report %s to the event sink", event.get("type"), exc_info=True)
        finally:
            sink.close()


def _failed_ranks(job_dir: Path, codes: list[int | None]) -> list[int]:
    """Ranks that exited non-zero before their work was over. A rank that ends with a signal after it marked
    its work done (``worker.done_file``) lost nothing: gloo on CPU now and then aborts a rank while the
    process group is torn down (SIGABRT from its I/O thread when the peer closes first, about 3 launches in
    200 on a loaded 2-core host). ``run_plan`` logs that, and does not raise."""
    return [rank for rank, code in enumerate(codes)
            if code not in (None, 0) and not done_file(job_dir, rank).exists()]


def run_plan(plan: Plan, spec: ModelSpec, *, backend: str = "gloo", seed: int = 0, event_sink: str | None = None,
             steps: int = 1, timeout_s: float = 300, optimizer: str = "sgd", lr: float = 1e-3,
             dtype: str | None = None, checkpoint_dir: str | None = None, lookahead: int | str = CAUSAL,
             step_barriers: bool = False, threads_per_rank: int | None = None,
             bind_cores: bool = True, should_stop: Callable[[], bool] | None = None,
             event_token_file: str | None = None) -> RunResult:
    """Train ``spec`` for ``steps`` steps with ``plan`` on local ranks; see the module docstring.

    Raises ``PlanError`` (plan cannot be lowered or deadlocks), ``SpecError`` (bad settings, or a model too
    big for this host: scale it with ``executor.model.scale_spec``), ``ExecutorError`` (a rank failed or the
    run timed out; ``rank`` and ``traceback_text`` say where). ``step_barriers`` puts a barrier before and
    after every step and fills ``RunResult.step_wall_ms`` with rank 0's wall time between them (benchmarks).
    ``threads_per_rank`` (default: this host's cores / ranks) is each rank's torch intra-op thread count;
    ``bind_cores``: on CPU, bind each local rank to cores of its own (``executor.running.cores.bind_to_cores``)
    where they fit; the summary records what every rank used (``threads_per_rank``, ``cores_per_rank``).
    ``lookahead``: when ranks post their receives (``executor.running.lowering``). ``should_stop``: asked every
    ``CANCEL_POLL_SECONDS`` while the ranks run; true ends them and raises ``RunCancelled``.
    ``event_token_file``: the run's secret, for an ``https://`` ``event_sink`` (``executor.running.events.HttpSink``).
    """
    # The ranks run in the repository, not in the caller's directory: relative paths are the caller's.
    config = RunConfig(backend=backend, seed=seed, steps=steps, optimizer=optimizer, lr=lr, dtype=dtype,
                       event_sink=resolved_sink(event_sink) if event_sink else event_sink,
                       event_token_file=_absolute(event_token_file), checkpoint_dir=_absolute(checkpoint_dir),
                       lookahead=lookahead, report_failures=False, step_barriers=step_barriers,
                       threads_per_rank=threads_per_rank, bind_cores=bind_cores)
    spec = planned_spec(plan, spec)
    _refuse_before_starting(plan, spec, config)
    job_dir = Path(tempfile.mkdtemp(prefix="adaptis-run-"))
    job_file = job_dir / "job.json"
    job_file.write_text(json.dumps({"plan": plan.to_dict(), "spec": spec.to_dict(), "config": config.to_dict()}))
    processes: list[ZygoteChild] = []
    ranks = world_size(plan)
    store = rendezvous_store(ranks)
    try:
        processes = _start_ranks(job_file, ranks, store.port, config.rank_threads(ranks))
        _watch_ranks(processes, job_dir, config, timeout_s, should_stop)
        return _collected_result(job_dir)
    finally:
        _stop(processes)
        shutil.rmtree(job_dir, ignore_errors=True)


def _absolute(path: str | None) -> str | None:
    return str(Path(path).resolve()) if path else path


def _refuse_before_starting(plan: Plan, spec: ModelSpec, config: RunConfig) -> None:
    """Fail fast, before any process starts: a plan this executor cannot run as planned or cannot lower, a model
    that cannot fit, a malformed event sink (instead of the same error in every rank)."""
    refusal = execution_refusal(plan, spec)
    if refusal is not None:
        raise refusal
    lower_plan(plan, spec.num_layers, lookahead=config.lookahead)
    device = torch.device("cuda", 0) if config.backend == "nccl" else torch.device("cpu")
    check_capacity(plan, spec, device=device, dtype=run_dtype(config, spec, device), optimizer=config.optimizer)
    if config.event_sink:
        open_sink(config.event_sink, config.event_token_file).close()


def _start_ranks(job_file: Path, world_size: int, port: int, threads: int) -> list[ZygoteChild]:
    """One ``python -m executor.running.worker JOB_FILE`` per rank, forked by this thread's zygote (torch imported
    once, ``executor.running.processes``), each in a session of its own with its stderr in the job's folder; the
    ranks already started are stopped if a later one cannot be."""
    processes: list[ZygoteChild] = []
    try:
        # (the zygote's own environment only matters to its imports: each rank gets its own)
        forker = zygote(str(REPO_ROOT), _rank_env(0, world_size, port, threads))
        for rank in range(world_size):
            processes.append(forker.start("executor.running.worker", [str(job_file)], cwd=str(REPO_ROOT),
                                          env=_rank_env(rank, world_size, port, threads),
                                          stderr_path=str(job_file.parent / f"rank{rank}.stderr")))
    except BaseException:
        _stop(processes)
        raise
    return processes


def _watch_ranks(processes: list[ZygoteChild], job_dir: Path, config: RunConfig, timeout_s: float,
                 should_stop: Callable[[], bool] | None) -> None:
    """Return once every rank has exited with its work done; raise when the caller stops the run, a rank fails
    or the run times out, the ranks ended and the event reported."""
    deadline = time.monotonic() + timeout_s
    next_stop_check = time.monotonic()
    while True:
        if should_stop is not None and time.monotonic() >= next_stop_check:
            next_stop_check = time.monotonic() + CANCEL_POLL_SECONDS
            if should_stop():
                raise _cancelled_run(processes, config)
        codes = [process.poll() for process in processes]
        if _failed_ranks(job_dir, codes):
            raise _failed_run(processes, job_dir, config)
        if all(code is not None for code in codes):
            for rank, code in enumerate(codes):
                if code != 0:
                    logger.warning("rank %d exited with status %d during teardown, after its work was done",
                                   rank, code)
            return
        if time.monotonic() > deadline:
            raise _timed_out_run(processes, config, timeout_s)
        time.sleep(POLL_SECONDS)


def _cancelled_run(processes: list[ZygoteChild], config: RunConfig) -> RunCancelled:
    _stop(processes, CANCEL_KILL_GRACE_SECONDS)
    _report(config, {"type": "run_cancelled"})
    return RunCancelled("cancelled: the ranks were stopped")


def _failed_run(processes: list[ZygoteChild], job_dir: Path, config: RunConfig) -> ExecutorError:
    # A crash makes its peers fail moments later (closed connections); give them time to record their errors so
    # the first failure in time, the cause, is the one reported.
    _await_exit(processes, FAILURE_GRACE_SECONDS)
    codes = [process.poll() for process in processes]
    failed = _first_failure(job_dir, _failed_ranks(job_dir, codes), codes)
    error = _failure(job_dir, failed, codes[failed])
    _stop(processes)
    _report(config, {"type": "run_failed", "rank": failed, "error": error.message})
    return error


def _timed_out_run(processes: list[ZygoteChild], config: RunConfig, timeout_s: float) -> ExecutorError:
    _stop(processes)
    message = f"timed out after {timeout_s:g} s"
    _report(config, {"type": "run_failed", "rank": None, "error": message})
    return ExecutorError(message)


def _collected_result(job_dir: Path) -> RunResult:
    """What rank 0 wrote once every rank was done."""
    result = json.loads((job_dir / RESULT_FILE).read_text())
    return RunResult(events=result["events"], summary=result["summary"], loss=result["loss"],
                     losses=result["losses"], step_wall_ms=result["step_wall_ms"],
                     balancing_losses=result["balancing_losses"])
