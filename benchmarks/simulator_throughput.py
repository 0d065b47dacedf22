"""Simulator throughput: simulated actions per second for growing plans (target: >= 200k actions/s).

Each row builds one baseline plan on a uniform 64-layer profile with real transfer costs (H100 presets), then times
``simulate`` (best of several repeats, so other load on the machine inflates nothing). Prints a markdown
table. Run: ``python benchmarks/simulator_throughput.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.cluster import load_cluster_preset  # noqa: E402
from planner.profile import LayerProfile, Profile  # noqa: E402
from planner.scheduling import generate_schedule  # noqa: E402
from planner.partition import partition_layers  # noqa: E402
from planner.plan import Plan, Stage  # noqa: E402
from planner.simulator import simulate  # noqa: E402

TARGET_ACTIONS_PER_S = 200_000
CASES = [("1f1b", 4, 16), ("1f1b", 8, 64), ("interleaved-1f1b", 8, 64), ("zb-h1", 8, 64), ("zb-v", 8, 64),
         ("1f1b", 16, 128), ("zb-v", 16, 128), ("interleaved-1f1b", 16, 256), ("zb-v", 32, 256)]
CLUSTERS = [("h100-sxm-1x8", 8), ("h100-sxm-2x8", 16), ("h100-sxm-16x8", 128)]


def uniform_profile(num_layers: int) -> Profile:
    layers = tuple(LayerProfile(f"layers.{i}", "decoder", 1.0, 1.0, 1.0, 1 << 26, 1 << 24, 1 << 28)
                   for i in range(num_layers))
    return Profile("uniform-64", "H100-SXM-80GB", layers)


def plan_for(schedule: str, devices: int, microbatches: int, profile: Profile) -> Plan:
    pipeline = generate_schedule(schedule, devices, microbatches, chunks=2)
    groups = partition_layers("uniform", profile, pipeline.num_stages)
    return Plan(devices, microbatches, [Stage(g, d) for g, d in zip(groups, pipeline.stage_devices)],
                pipeline.actions, strategy=schedule)


def cluster_for(devices: int):
    """The smallest H100 preset with enough devices, so cross-node transfers appear from 16 devices on."""
    return load_cluster_preset(next(name for name, size in CLUSTERS if devices <= size))


def best_seconds(function, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    profile = uniform_profile(64)
    print("| schedule | devices | micro-batches | actions | simulate ms | actions/s | ≥ 200k/s |")
    print("|---|---:|---:|---:|---:|---:|:---:|")
    for schedule, devices, microbatches in CASES:
        plan = plan_for(schedule, devices, microbatches, profile)
        cluster = cluster_for(devices)
        seconds = best_seconds(lambda: simulate(plan, profile, cluster), args.repeats)
        rate = plan.num_actions() / seconds
        print(f"| {schedule} | {devices} | {microbatches} | {plan.num_actions()} | {seconds * 1e3:.2f} | "
              f"{rate:,.0f} | {'yes' if rate >= TARGET_ACTIONS_PER_S else 'no'} |")


if __name__ == "__main__":
    main()
