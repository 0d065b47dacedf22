"""``run_alongside``: a few measuring processes on this host, released together, their results collected.

The profilers (``executor.measuring.profiler``) and the stage timers (``executor.measuring.stage_timing``)
measure as a host's local ranks run: one process per rank, all computing at the same time. Each process is a
``python -m executor.measuring.alongside`` forked by the caller's zygote, as the launcher's ranks are
(``executor.running.launch``), not a multiprocessing child: a Celery prefork pool process is daemonic, and
multiprocessing refuses children to a daemonic process ("daemonic processes are not allowed to have children"),
so every measured profile failed in the worker pool ``make run`` starts. The zygote works the same from a shell,
a test, or a pool process.

Process i runs ``target(*per_process_args[i], start, results)``, ``target`` found by its module and name as
pickle finds functions (with the caller's ``sys.path``): it sets itself up (binding, threads, building), calls
``start.wait()``, which returns once every process has called it, so that all of them measure at the same time,
and hands one picklable result to ``results.put``. The barrier is two FIFOs in the run's scratch folder: each
process opens "go" for reading, writes a byte to "ready" and blocks reading "go", which the caller holds open
(read and write, so that no open blocks) and closes once every process is ready: end of file, for all at once.
A result is written to a file of the scratch folder (renamed into place, so it is whole when it appears). The
processes are forked by the caller's zygote (``executor.running.processes``: torch imported once, not by each
process), and each dies with it (``die_with_launcher``), so none outlives a caller that is killed without cleaning
up.
"""

from __future__ import annotations

import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from executor.errors import ExecutorError
from executor.running.processes import REPO_ROOT, ZygoteChild, child_env, zygote

JOB_FILE = "job.pickle"
POLL_SECONDS = 0.05
EXIT_GRACE_SECONDS = 5.0   # a process that gave its result gets this long to exit before it is killed
STDERR_TAIL = 4000


def _result_file(job_dir: Path, index: int) -> Path:
    return job_dir / f"result{index}.pickle"


def _stderr_file(job_dir: Path, index: int) -> Path:
    return job_dir / f"process{index}.stderr"


def _fifo(job_dir: Path, name: str) -> Path:
    return job_dir / f"{name}.fifo"


class Barrier:
    """The processes' side of the start barrier (see the module docstring)."""

    def __init__(self, job_dir: Path):
        self.job_dir = job_dir

    def wait(self) -> None:
        go = os.open(_fifo(self.job_dir, "go"), os.O_RDONLY)   # before "ready": the caller holds "go" open till then
        ready = os.open(_fifo(self.job_dir, "ready"), os.O_WRONLY)
        os.write(ready, b".")
        os.close(ready)
        os.read(go, 1)   # end of file once the caller closes its end: every process is ready
        os.close(go)


class Results:
    """The processes' side of the results: ``put`` one picklable value."""

    def __init__(self, job_dir: Path, index: int):
        self.path = _result_file(job_dir, index)

    def put(self, value) -> None:
        partial = self.path.with_suffix(".partial")
        partial.write_bytes(pickle.dumps(value))
        partial.replace(self.path)


def _exit_description(code: int) -> str:
    if code < 0 and -code in signal.valid_signals():
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _failure(job_dir: Path, index: int, count: int, name: str, code: int) -> ExecutorError:
    stderr = _stderr_file(job_dir, index).read_text(errors="replace")[-STDERR_TAIL:]
    last_line = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    return ExecutorError(f"process {index} of {count} ({name}) {_exit_description(code)} before its result"
                         + (f": {last_line.strip()}" if last_line else ""), traceback_text=stderr)


def _start(job_dir: Path, count: int) -> list[ZygoteChild]:
    env = child_env(dict(os.environ))
    forker = zygote(str(REPO_ROOT), env)
    processes: list[ZygoteChild] = []
    try:
        for index in range(count):
            processes.append(forker.start("executor.measuring.alongside", [str(job_dir), str(index)],
                                          cwd=os.getcwd(), env=env,
                                          stderr_path=str(_stderr_file(job_dir, index))))
    except BaseException:
        for process in processes:
            process.kill()
        _stop(processes, grace_s=0)
        raise
    return processes


def _stop(processes: list[ZygoteChild], *, grace_s: float) -> None:
    """Wait up to ``grace_s`` for every process to exit, kill what is left, and reap them all."""
    deadline = time.monotonic() + grace_s
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_alongside(target: Callable, per_process_args: list[tuple], *, timeout_s: float = 600) -> list:
    """What each of ``len(per_process_args)`` processes hands to ``results.put``, in the order they finish (see
    the module docstring).

    A process that exits without its result, whatever its exit code, ends the wait at once with an ExecutorError
    naming it, its exit code and the last line of its stderr (all of it in ``traceback_text``), not at the
    timeout; every process is gone when this returns or raises."""
    if target.__module__ == "__main__":
        raise ValueError(f"{target.__name__} must be defined in an importable module, not in __main__: the "
                         "processes import it by name")
    count, name = len(per_process_args), target.__name__
    job_dir = Path(tempfile.mkdtemp(prefix="adaptis-alongside-"))
    (job_dir / JOB_FILE).write_bytes(pickle.dumps((sys.path, pickle.dumps((target, per_process_args)))))
    for fifo in ("ready", "go"):
        os.mkfifo(_fifo(job_dir, fifo), 0o600)
    # read and write: no open of either end blocks, and "ready" never reads as ended while a process is to come
    ready_read = os.open(_fifo(job_dir, "ready"), os.O_RDWR)
    go_write = os.open(_fifo(job_dir, "go"), os.O_RDWR)
    processes: list[ZygoteChild] = []
    collected: dict[int, object] = {}
    try:
        processes = _start(job_dir, count)
        ready, deadline = 0, time.monotonic() + timeout_s
        while len(collected) < count:
            if go_write >= 0 and select.select([ready_read], [], [], POLL_SECONDS)[0]:
                ready += len(os.read(ready_read, count))
                if ready >= count:
                    os.close(go_write)   # releases every process at once
                    go_write = -1
            elif go_write < 0:
                time.sleep(POLL_SECONDS)
            for index, process in enumerate(processes):
                if index in collected:
                    continue
                code = process.poll()   # before looking for the result: it is written before the process exits
                if _result_file(job_dir, index).exists():
                    collected[index] = pickle.loads(_result_file(job_dir, index).read_bytes())
                elif code is not None:
                    raise _failure(job_dir, index, count, name, code)
            if len(collected) < count and time.monotonic() > deadline:
                raise ExecutorError(f"{name}: {count - len(collected)} of {count} processes gave no result "
                                    f"within {timeout_s:.0f} s")
        return list(collected.values())
    finally:
        for descriptor in (ready_read, go_write):
            if descriptor >= 0:
                os.close(descriptor)
        if len(collected) < count:   # failed or timed out: what is left waits for nothing
            for process in processes:
                if process.poll() is None:
                    process.kill()
        _stop(processes, grace_s=EXIT_GRACE_SECONDS)
        shutil.rmtree(job_dir, ignore_errors=True)


def _process_main(job_dir: Path, index: int) -> None:
    # (it dies with the zygote that forked it: executor.running.processes set that up before this runs)
    caller_path, payload = pickle.loads((job_dir / JOB_FILE).read_bytes())
    sys.path.extend(entry for entry in caller_path if entry not in sys.path)
    target, per_process_args = pickle.loads(payload)
    target(*per_process_args[index], Barrier(job_dir), Results(job_dir, index))


if __name__ == "__main__":
    _process_main(Path(sys.argv[1]), int(sys.argv[2]))
