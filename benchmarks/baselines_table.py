"""Every baseline schedule on every realistic model preset at PP 4 / 8 / 16 with m = 4 x PP micro-batches.

Analytic profiles on H100 SXM presets (one 8-GPU node up to PP 8, two nodes for PP 16, so PP 16 pays
inter-node transfers); Megatron-style uniform partition unless ``--partition`` says otherwise. Each cell:
simulated iteration time, bubble ratio, and the peak memory of the busiest device (parameters, gradients,
optimizer state and activations as ``planner.memory`` counts them). Prints a markdown table.
Run: ``python benchmarks/baselines_table.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.baselines import BASELINE_SCHEDULES, PARTITIONS, build_baseline  # noqa: E402
from planner.cluster import load_cluster_preset  # noqa: E402
from planner.cost import analytic_profile  # noqa: E402
from planner.errors import PlanError, SpecError  # noqa: E402
from planner.spec.presets import load_model_preset, model_preset_names  # noqa: E402

PIPELINE_SIZES = (4, 8, 16)
CLUSTER_FOR_SIZE = {4: "h100-sxm-1x8", 8: "h100-sxm-1x8", 16: "h100-sxm-2x8"}
GIB = 1 << 30


def realistic_presets() -> list[str]:
    """The presets that describe released models (the ``tiny-*`` ones are CPU test models)."""
    return [name for name in model_preset_names() if not name.startswith("tiny-")]


def cell(schedule: str, profile, devices: int, cluster, partition: str, notes: list[str]) -> str:
    """One table cell; a baseline that cannot be built shows ``n/a`` with a numbered note saying why."""
    try:
        plan = build_baseline(schedule, profile, devices, 4 * devices, cluster=cluster, partition=partition)
    except (SpecError, PlanError) as error:
        notes.append(f"{schedule}: {error}")
        return f"n/a [{len(notes)}]"
    predicted = plan.predicted
    return (f"{predicted['iteration_ms']:,.0f} ms · {predicted['bubble_ratio']:.1%} · "
            f"{predicted['peak_memory_bytes'] / GIB:,.1f} GiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partition", default="uniform", choices=PARTITIONS)
    parser.add_argument("--models", nargs="*", default=None, help="model presets (default: all realistic ones)")
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"Partition: {args.partition}. Cell: iteration time · bubble ratio · peak device memory.\n")
    print("| model | PP | m | " + " | ".join(BASELINE_SCHEDULES) + " |")
    print("|---|---:|---:|" + "---|" * len(BASELINE_SCHEDULES))
    notes: list[str] = []
    for model in args.models or realistic_presets():
        spec = load_model_preset(model)
        for devices in PIPELINE_SIZES:
            cluster = load_cluster_preset(CLUSTER_FOR_SIZE[devices])
            profile = analytic_profile(spec, cluster)
            cells = [cell(schedule, profile, devices, cluster, args.partition, notes) for schedule in BASELINE_SCHEDULES]
            print(f"| {model} | {devices} | {4 * devices} | " + " | ".join(cells) + " |", flush=True)
    print("".join(f"\n[{number}] {note}" for number, note in enumerate(notes, 1)))
    print(f"_{time.perf_counter() - started:.1f} s_")


if __name__ == "__main__":
    main()
