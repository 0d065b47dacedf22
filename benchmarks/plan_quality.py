"""Plan quality: AdaPtis search vs the fixed strategies on heterogeneous models (analytic H100 profiles).

For every model preset at PP 4, 8 and 16 with m = 4 x PP micro-batches (PP 16 spans two nodes), prints
the simulated iteration time of S-1F1B (uniform layers), Megatron's interleaved 1F1B (I-1F1B, two
chunks, uniform layers), ZB-V, 1F1B on a time-balanced partition, and the AdaPtis plan, with the lower
bound (``planner.bounds``), the speedup over I-1F1B, the gap to the bound, the peak in-flight
activation memory relative to I-1F1B's and the search time. The search is held to I-1F1B's peak
activation memory per device (``activation_limit_bytes``); model state is left unconstrained, since at
these sizes it is sharded by data/tensor parallelism outside the pipeline.

A second table times the search alone at 8 devices x 32 micro-batches and 32 x 128 (one core).

    .venv/bin/python benchmarks/plan_quality.py [--models a,b] [--pp 4,8,16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.baselines import build_baseline  # noqa: E402
from planner.cluster import load_cluster_preset  # noqa: E402
from planner.cost import analytic_profile  # noqa: E402
from planner.errors import SpecError  # noqa: E402
from planner.search import search_plan  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

MODELS = ("gemma-2-9b", "gemma-3-27b", "deepseek-v2-lite", "deepseek-v3", "nemotron-h-8b", "qwen3-next-80b-a3b",
          "minimax-text-01", "mixtral-8x7b", "llama-3-8b")
CLUSTER_FOR_PP = {4: "h100-sxm-1x8", 8: "h100-sxm-1x8", 16: "h100-sxm-2x8", 32: "h100-sxm-16x8"}
UNCONSTRAINED_MODEL_STATE = 1 << 60
TIMING_CASES = (("nemotron-h-8b", 8, 32), ("minimax-text-01", 8, 32), ("nemotron-h-8b", 32, 128),
                ("minimax-text-01", 32, 128))


def activation_peak(plan_predicted: dict) -> int:
    return max(device["activation_peak_bytes"] for device in plan_predicted["per_device"])


def quality_row(model: str, pp: int) -> dict | None:
    cluster = load_cluster_preset(CLUSTER_FOR_PP[pp])
    profile = analytic_profile(load_model_preset(model), cluster)
    microbatches = 4 * pp
    try:
        interleaved = build_baseline("interleaved-1f1b", profile, pp, microbatches, cluster=cluster)
    except SpecError as error:
        print(f"skipped {model} PP{pp}: I-1F1B cannot be built ({error})", file=sys.stderr)
        return None
    interleaved_activation = activation_peak(interleaved.predicted)
    started = time.process_time()
    result = search_plan(profile, pp, microbatches, cluster=cluster, memory_limit_bytes=UNCONSTRAINED_MODEL_STATE,
                         activation_limit_bytes=interleaved_activation)
    seconds = time.process_time() - started
    baselines = result.baselines
    return {"config": f"{model} PP{pp} m{microbatches}", "s1f1b": baselines["1f1b"]["iteration_ms"],
            "i1f1b": interleaved.predicted["iteration_ms"], "zbv": baselines["zb-v"]["iteration_ms"],
            "balanced": baselines["1f1b+time-balanced"]["iteration_ms"],
            "best_baseline": min(metrics["iteration_ms"] for metrics in baselines.values()
                                 if metrics["fits_memory"]),
            "adaptis": result.iteration_ms, "bound": result.lower_bound_ms,
            "speedup": interleaved.predicted["iteration_ms"] / result.iteration_ms,
            "ceiling": interleaved.predicted["iteration_ms"] / result.lower_bound_ms, "gap": result.gap,
            "memory": activation_peak(result.plan.predicted) / interleaved_activation, "seconds": seconds,
            "stages": result.plan.num_stages, "stopped": result.stats["stopped"]}


def print_quality(rows: list[dict]) -> None:
    print("| config | S-1F1B | I-1F1B | ZB-V | 1F1B time-bal. | AdaPtis | lower bound | speedup vs I-1F1B "
          "| ceiling (I-1F1B/bound) | gap to bound | act. mem vs I-1F1B | stages | search s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['config']} | {row['s1f1b']:.0f} | {row['i1f1b']:.0f} | {row['zbv']:.0f} | "
              f"{row['balanced']:.0f} | **{row['adaptis']:.0f}** | {row['bound']:.0f} | {row['speedup']:.2f}x | "
              f"{row['ceiling']:.2f}x | {row['gap']:.1%} | {row['memory']:.2f} | {row['stages']} | "
              f"{row['seconds']:.1f} |")
    never_slower = sum(row["adaptis"] <= row["best_baseline"] + 1e-9 for row in rows)
    print()
    print(f"configurations: {len(rows)}; times in ms per iteration (simulated)")
    print(f"mean speedup over I-1F1B: {statistics.mean(row['speedup'] for row in rows):.3f}x "
          f"(geometric {statistics.geometric_mean(row['speedup'] for row in rows):.3f}x, "
          f"max {max(row['speedup'] for row in rows):.2f}x); the bound allows at most "
          f"{statistics.mean(row['ceiling'] for row in rows):.3f}x on average")
    print(f"mean gap to the lower bound: {statistics.mean(row['gap'] for row in rows):.2%} "
          f"(max {max(row['gap'] for row in rows):.2%})")
    print(f"peak activation memory vs I-1F1B: max ratio {max(row['memory'] for row in rows):.3f}")
    print(f"never slower than the best baseline: {never_slower}/{len(rows)}")
    print(f"mean search time: {statistics.mean(row['seconds'] for row in rows):.1f} s CPU")


def print_timing() -> None:
    print()
    print("| search timing | devices x micro-batches | CPU s | evaluations | stopped | gap |")
    print("|---|---|---:|---:|---|---:|")
    for model, devices, microbatches in TIMING_CASES:
        cluster = load_cluster_preset(CLUSTER_FOR_PP[devices])
        profile = analytic_profile(load_model_preset(model), cluster)
        started = time.process_time()
        result = search_plan(profile, devices, microbatches, cluster=cluster,
                             memory_limit_bytes=UNCONSTRAINED_MODEL_STATE)
        seconds = time.process_time() - started
        print(f"| {model} | {devices} x {microbatches} | {seconds:.1f} | {result.stats['evaluations']} | "
              f"{result.stats['stopped']} | {result.gap:.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--pp", default="4,8,16")
    parser.add_argument("--skip-timing", action="store_true")
    args = parser.parse_args()
    rows = []
    for pp in (int(value) for value in args.pp.split(",")):
        for model in args.models.split(","):
            row = quality_row(model, pp)
            if row is not None:
                rows.append(row)
                print(f"{row['config']}: {row['speedup']:.2f}x, gap {row['gap']:.1%}, {row['seconds']:.1f} s",
                      file=sys.stderr, flush=True)
    print_quality(rows)
    if not args.skip_timing:
        print_timing()


if __name__ == "__main__":
    main()
