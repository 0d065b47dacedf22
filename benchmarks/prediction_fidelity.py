"""Prediction fidelity: measured profile -> baseline plan -> simulated prediction vs the executor's observed time.

Everything the prediction uses is measured on this host, under the conditions the ranks run in:

- the profile: ``executor.profiler.measure_profile_alongside``: one profiler process per rank, running at
  the same time, one thread each (as the ranks, which share the cores), with weight-gradient deferral as
  the plan's ranks use it (off for F/B-only schedules, on for zero-bubble ones), so a B is timed as the
  executor runs it and each layer pays the same sharing of cores and memory bandwidth as in the run;
- the cluster: ``executor.linkprobe.measure_link`` ping-pongs gloo messages between two local ranks and
  fits latency + bytes / bandwidth; ``local_cluster`` wraps it into an ``adaptis.cluster/v1`` document;
- the plan: ``planner.baselines.build_baseline`` on that profile and cluster (uniform partition).

The executor then runs the plan; observed = the median over steady-state steps of the span from a step's
first action start to its last action end (what the simulator's ``iteration_ms`` models: the optimizer
step is not part of it). Error = (predicted - observed) / observed. On a shared host, other load moves the
observed times; the link probe runs first and sees the same load the runs see.

    .venv/bin/python benchmarks/prediction_fidelity.py [--steps 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from executor.launch import run_plan  # noqa: E402
from executor.linkprobe import local_cluster, measure_link  # noqa: E402
from executor.profiler import measure_profile_alongside  # noqa: E402
from planner.baselines import build_baseline  # noqa: E402
from planner.cluster import load_cluster  # noqa: E402
from planner.simulator import simulate  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

# Two ranks: this benchmark's host has two cores, and a prediction for more ranks than cores would have to
# model the OS time-slicing them, which the simulator (one device = one processor) does not.
CASES = [("tiny-llama", "1f1b", 2, 8), ("tiny-llama", "gpipe", 2, 8), ("tiny-hybrid", "gpipe", 2, 4),
         ("tiny-hybrid", "1f1b", 2, 8), ("tiny-hybrid", "zb-h1", 2, 8)]
SPLIT_SCHEDULES = ("zb-h1", "zb-v")


def profile_for(spec, devices: int, split_backward: bool, cache: dict):
    key = (spec.name, devices, split_backward)
    if key not in cache:
        cache[key] = measure_profile_alongside(spec, processes=devices, split_backward=split_backward, repeats=9,
                                               warmup=3)
    return cache[key]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    link = measure_link()
    print(f"{os.cpu_count()} CPU cores; gloo loopback link: latency {link['latency_us']:.0f} us, "
          f"bandwidth {link['bandwidth_gb_s']:.2f} GB/s")
    profiles: dict = {}
    errors = []
    print(f"{'model':<12} {'schedule':<8} {'devices':>7} {'mbs':>4} {'predicted ms':>13} {'observed ms':>12} "
          f"{'error':>7}")
    for model, schedule, devices, microbatches in CASES:
        spec = load_model_preset(model)
        cluster = load_cluster(local_cluster(devices, link))
        profile = profile_for(spec, devices, schedule in SPLIT_SCHEDULES, profiles)
        plan = build_baseline(schedule, profile, devices, microbatches, cluster=cluster)
        predicted = simulate(plan, profile, cluster).to_dict()["iteration_ms"]
        observed = run_plan(plan, spec, steps=args.steps, timeout_s=600).summary["median_iteration_ms"]
        error = (predicted - observed) / observed
        errors.append(abs(error))
        print(f"{model:<12} {schedule:<8} {devices:>7} {microbatches:>4} {predicted:>13.2f} {observed:>12.2f} "
              f"{error:>+7.1%}")
    print(f"median |error|: {statistics.median(errors):.1%}")


if __name__ == "__main__":
    main()
