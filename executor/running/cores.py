"""This host's cores as the local ranks see them: how many, each local rank's share, and binding a rank to its own.

Local ranks share the host's cores. torch defaults every process to one intra-op thread per core, so N ranks
on one host would each run N-fold oversubscribed, their OpenMP threads preempting each other mid-kernel;
``fair_share_threads`` is the count that fills the cores without that, and ``bind_local_rank`` keeps each rank
on cores of its own. The runs' ranks use it (``executor.running.worker``), and so do the measuring processes
(``executor.measuring``), so that they measure as the ranks will run.
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def fair_share_threads(processes: int) -> int:
    """Intra-op threads per process when ``processes`` processes share this host's cores."""
    return max(1, usable_cores() // max(1, processes))


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
