"""This host's CPUs as the ranks see them: how many cores, each local rank's share, and how busy they are.

Local ranks share the host's cores. torch defaults every process to one intra-op thread per core, so N ranks
on one host would each run N-fold oversubscribed, their OpenMP threads preempting each other mid-kernel;
``fair_share_threads`` is the count that fills the cores without that. ``wait_for_idle_cpus`` lets a
benchmark on a shared machine start its timed work when other programs leave the cores alone, and
``measure_quietly`` repeats a measurement that other programs disturbed anyway.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from executor.errors import ExecutorError

T = TypeVar("T")


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def fair_share_threads(processes: int) -> int:
    """Intra-op threads per process when ``processes`` processes share this host's cores."""
    return max(1, usable_cores() // max(1, processes))


LAUNCHER_PID_ENV = "ADAPTIS_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1


def die_with_launcher() -> None:
    """Have the kernel SIGKILL this rank when the local launcher that started it exits, however it exits.

    The launcher stops and reaps its ranks on failure, timeout and interruption, but a launcher that is itself
    killed (SIGKILL, or a SIGTERM Python does not turn into an exception) runs no cleanup, and its ranks
    would go on computing, or wait forever on a peer, holding the cores. ``prctl(PR_SET_PDEATHSIG)`` is how
    the kernel ties a child's life to its parent's on Linux. A process not started by ``run_plan`` or
    ``executor.alongside.run_alongside`` (they set ``ADAPTIS_LAUNCHER_PID``; torchrun's agent watches its own
    ranks) is left alone, as is a host without prctl.
    """
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != int(launcher):
        os._exit(1)   # the launcher died before the request took effect: nothing would signal this rank


def exit_rank(code: int) -> None:
    """End a rank process that has finished (results written, process group destroyed) without interpreter
    finalization: flush stdio, then ``os._exit``.

    gloo's worker threads can still hold tensors with Python references when the interpreter tears down;
    releasing them then needs a GIL that is gone, and the process aborts ("terminate called without an
    active exception", SIGABRT; pytorch/pytorch#179291). Seen here in about 1 run in 30, after every rank had
    done its work: under torchrun, whose agent then fails the whole run. Nothing a finished rank still has to
    do needs finalization.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def local_cores(local_rank: int, local_world_size: int, threads: int) -> set[int] | None:
    """The cores local rank ``local_rank`` gets to itself: ``threads`` consecutive cores of this process's
    affinity set; None where the local ranks' threads do not fit on separate cores (or affinity is unknown)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if local_world_size * threads > len(cores) or not 0 <= local_rank < local_world_size:
        return None
    return set(cores[local_rank * threads:(local_rank + 1) * threads])


def bind_local_rank(local_rank: int, local_world_size: int, threads: int) -> set[int] | None:
    """Bind this process to local rank ``local_rank``'s cores (``local_cores``) where they fit; the cores,
    or None where the process is left to the OS scheduler."""
    cores = local_cores(local_rank, local_world_size, threads)
    if cores is not None:
        bind_to_cores(cores)
    return cores


def bind_to_cores(cores: set[int]) -> None:
    """Keep every thread of this process, and every thread it starts later, on ``cores``.

    Local CPU ranks left to the scheduler may migrate between cores and meet each other's threads on one
    core; bound to cores of their own (as ``torch.backends.xeon.run_cpu`` binds each instance), each rank
    and its communication threads stay where the profiler measured them. On this project's 2-vCPU virtual
    machines it made no measurable difference either way; on real hosts it is the usual practice.
    """
    for thread_id in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread_id), cores)
        except ProcessLookupError:   # a thread that ended meanwhile
            continue


def cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)   # idle + iowait
    return idle, sum(fields[:8])


def idle_fraction(window_s: float = 0.5) -> float:
    """Share of all CPU time that was idle during the next ``window_s`` seconds (1.0 where /proc is absent)."""
    if not os.path.exists("/proc/stat"):
        return 1.0
    idle_before, total_before = cpu_times()
    time.sleep(window_s)
    idle_after, total_after = cpu_times()
    return (idle_after - idle_before) / max(1, total_after - total_before)


def wait_for_idle_cpus(min_idle: float = 0.9, max_wait_s: float = 30.0, window_s: float = 0.5) -> float:
    """Wait until the CPUs are at least ``min_idle`` idle over a window, or ``max_wait_s`` passed; the last
    idle fraction seen."""
    deadline = time.monotonic() + max_wait_s
    idle = idle_fraction(window_s)
    while idle < min_idle and time.monotonic() < deadline:
        idle = idle_fraction(window_s)
    return idle


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def _own_cpu_s() -> float:
    """CPU seconds of this process and of its children that have exited and been waited for."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(part.ru_utime + part.ru_stime for part in usage)


@dataclass
class Quiet:
    value: object
    other_load: float    # share of the host's CPU capacity other programs used while it was measured
    attempts: int


def measure_quietly(measure: Callable[[], T], *, max_other_load: float = 0.1, attempts: int = 3) -> Quiet:
    """Run ``measure()`` (after waiting for idle CPUs) until other programs used at most ``max_other_load`` of
    the host's CPU capacity meanwhile, at most ``attempts`` times; the least disturbed result.

    Other programs' use is the host's busy CPU time (/proc/stat) less this process's and its waited-for
    children's, so ``measure`` must wait for every process it starts (``run_plan`` and the profilers do).
    """
    best: Quiet | None = None
    for attempt in range(1, attempts + 1):
        wait_for_idle_cpus()
        idle_before, total_before = cpu_times()
        own_before = _own_cpu_s()
        value = measure()
        idle_after, total_after = cpu_times()
        total = max(1, total_after - total_before)
        busy_s = (total - (idle_after - idle_before)) / os.sysconf("SC_CLK_TCK")
        other = max(0.0, busy_s - (_own_cpu_s() - own_before)) / (total / os.sysconf("SC_CLK_TCK"))
        if best is None or other < best.other_load:
            best = Quiet(value, other, attempt)
        if other <= max_other_load:
            break
    return best


def retried_once(run: Callable[[], T]) -> T:
    """``run()``, once more if a rank fails: for benchmarks, where a rare abort of a gloo rank at shutdown (about
    3 launches in 200 on a loaded 2-core host, not yet explained) must not lose a whole table. The failure is
    printed to stderr with the failing rank's output; a second failure propagates."""
    try:
        return run()
    except ExecutorError as error:
        print(f"retrying after a rank failure: {error}\n{error.traceback_text}", file=sys.stderr)
        return run()
