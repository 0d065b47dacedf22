"""How steady this host's cores are: the same fixed work, timed again and again on every core at once.

A local run's prediction comes from a profile measured minutes before the run; it can only be as close as
the host keeps its speed between the two. This script starts one process per usable core (each bound to its
core with one intra-op thread, as a local run's ranks are: ``executor.running.cores.bind_local_rank``), all at once,
and each times a fixed float32 matrix product in ``--window`` second windows for ``--seconds`` seconds
(milliseconds per product, the mean over a window). Nothing else of the product runs. Per core: the fastest
window, the median, the slowest, slowest / fastest, and the share of windows more than 10 % slower than the
core's fastest: the part of the time in which a prediction made at full speed misses by more than 10 % from
the host alone.

On a dedicated host the ratio stays within a few percent; on a virtual machine whose physical cores are shared
with other guests it does not, and no program inside the guest sees why (its own CPU accounting shows the
cores idle and no steal).

    .venv/bin/python benchmarks/host_speed.py [--seconds 60] [--window 0.5] [--size 384]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from executor.running.cores import bind_local_rank, usable_cores  # noqa: E402


def probe(index: int, cores: int, seconds: float, window: float, size: int) -> list[float]:
    """Milliseconds per ``size``-square matrix product, one figure per ``window`` seconds, on core ``index``."""
    import torch

    bound = bind_local_rank(index, cores, 1)
    torch.set_num_threads(1)
    a = torch.randn(size, size)
    for _ in range(10):
        a @ a
    windows, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        start, count = time.perf_counter(), 0
        while time.perf_counter() - start < window:
            a @ a
            count += 1
        windows.append((time.perf_counter() - start) * 1000 / count)
    return [sorted(bound or [])] + windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--window", type=float, default=0.5)
    parser.add_argument("--size", type=int, default=384)
    parser.add_argument("--probe", type=int, help=argparse.SUPPRESS)   # one core's probe (started by main)
    args = parser.parse_args()
    cores = usable_cores()
    if args.probe is not None:
        print(json.dumps(probe(args.probe, cores, args.seconds, args.window, args.size)))
        return
    probes = [subprocess.Popen([sys.executable, __file__, "--probe", str(index), "--seconds", str(args.seconds),
                                "--window", str(args.window), "--size", str(args.size)], stdout=subprocess.PIPE,
                               text=True) for index in range(cores)]
    results = [json.loads(process.communicate()[0]) for process in probes]
    print(f"{cores} probes at once, {args.size}x{args.size} float32 products, {args.window:g} s windows for "
          f"{args.seconds:g} s\n")
    print("| core | fastest ms | median ms | slowest ms | slowest / fastest | windows > 10 % slower |")
    print("|---|---:|---:|---:|---:|---:|")
    for index, (bound, *windows) in enumerate(results):
        fastest = min(windows)
        slow = sum(1 for value in windows if value > 1.10 * fastest) / len(windows)
        print(f"| {','.join(map(str, bound)) or f'{index} (unbound)'} | {fastest:.3f} | "
              f"{statistics.median(windows):.3f} | {max(windows):.3f} | {max(windows) / fastest:.2f} | {slow:.0%} |")


if __name__ == "__main__":
    main()
