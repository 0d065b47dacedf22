"""Measuring on a shared host, for the benchmarks: wait for idle CPUs, repeat a measurement that other programs
disturbed, and retry a launch that a rare rank abort lost.

``wait_for_idle_cpus`` lets a benchmark on a shared machine start its timed work when other programs leave the
cores alone, ``measure_quietly`` repeats a measurement that other programs disturbed anyway, and ``retried_once``
keeps one rank's rare abort from losing a whole table. The benchmark scripts import it from their own folder
(``from shared_host import ...``); like them, it puts the repository root on ``sys.path`` for ``executor``.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from executor.errors import ExecutorError  # noqa: E402

T = TypeVar("T")


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


def own_cpu_s() -> float:
    """CPU seconds of this process, of its children that have exited and been waited for, and of its live
    descendants with the children they waited for: the ranks of a local run are forked by a zygote that outlives
    the run (``executor.running.processes``) and reaps them itself."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(part.ru_utime + part.ru_stime for part in usage) + _live_descendants_ticks() / os.sysconf("SC_CLK_TCK")


def process_times(entry: Path) -> tuple[int, int] | None:
    """(parent pid, utime + stime + cutime + cstime in clock ticks) of the process at ``entry`` (``/proc/PID``,
    proc(5)); None once it is gone."""
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()   # from the state on: ppid is [1], utime..cstime [11:15]
    return int(fields[1]), sum(int(value) for value in fields[11:15])


def _live_descendants_ticks() -> int:
    """``process_times``' ticks of every live descendant of this process."""
    parents, ticks = {}, {}
    for entry in Path("/proc").iterdir() if os.path.isdir("/proc") else ():
        times = process_times(entry) if entry.name.isdigit() else None
        if times is not None:
            parents[int(entry.name)], ticks[int(entry.name)] = times
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, pending = 0, list(children.get(os.getpid(), []))
    while pending:
        pid = pending.pop()
        total += ticks[pid]
        pending.extend(children.get(pid, []))
    return total


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
        own_before = own_cpu_s()
        value = measure()
        idle_after, total_after = cpu_times()
        total = max(1, total_after - total_before)
        busy_s = (total - (idle_after - idle_before)) / os.sysconf("SC_CLK_TCK")
        other = max(0.0, busy_s - (own_cpu_s() - own_before)) / (total / os.sysconf("SC_CLK_TCK"))
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
