"""Prediction fidelity: measured profile -> plan -> simulated prediction vs the executor's observed time.

For each case the executor first measures the model's per-layer F / I / W on this CPU with one thread (what
each rank gets), the simulator predicts the plan's iteration time from that profile and the ``cpu-host``
cluster's link costs, and the executor then runs the plan; the observed iteration time is the mean span of
the steady-state steps (first action start to last action end). Error = (predicted - observed) / observed.

    .venv/bin/python benchmarks/prediction_fidelity.py [--steps 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(Path(__file__).resolve().parent)]

import torch  # noqa: E402

from executor_vs_torch import schedule_plan, split_layers  # noqa: E402
from executor.launch import run_plan  # noqa: E402
from executor.profiler import measure_profile  # noqa: E402
from planner.cluster import load_cluster_preset  # noqa: E402
from planner.simulator import simulate  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

CASES = [("tiny-llama", "1f1b", 2, 8), ("tiny-hybrid", "gpipe", 2, 4), ("tiny-hybrid", "1f1b", 2, 8),
         ("tiny-hybrid", "1f1b", 3, 6)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cluster = load_cluster_preset("cpu-host")
    profiles = {}
    errors = []
    print(f"{'model':<12} {'schedule':<8} {'devices':>7} {'mbs':>4} {'predicted ms':>13} {'observed ms':>12} "
          f"{'error':>7}")
    for model, schedule, devices, microbatches in CASES:
        spec = load_model_preset(model)
        if model not in profiles:
            profiles[model] = measure_profile(spec, repeats=7, warmup=2)
        plan = schedule_plan(schedule, split_layers(spec.num_layers, devices), microbatches)
        predicted = simulate(plan, profiles[model], cluster).to_dict()["iteration_ms"]
        observed = run_plan(plan, spec, steps=args.steps, timeout_s=600).summary["iteration_ms"]
        error = (predicted - observed) / observed
        errors.append(abs(error))
        print(f"{model:<12} {schedule:<8} {devices:>7} {microbatches:>4} {predicted:>13.2f} {observed:>12.2f} "
              f"{error:>+7.1%}")
    print(f"median |error|: {statistics.median(errors):.1%}")


if __name__ == "__main__":
    main()
