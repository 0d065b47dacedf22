"""What an action costs beyond its layers' profiled times when it starts after work of another kind.

The profiler times each layer between its neighbours in one forward pass and one backward pass, so a layer's
F is timed right after the previous layer's F. In a pipeline an action's first layer usually runs right after
an action of another kind (an F after a B, W or I, an I after an F), when what that work pushed out of the
core's caches (the interpreter's and dispatcher's paths for this kind of work, the stage's weights) has to
come back. This script times each stage of a baseline plan in one process, built and run as the executor's
ranks build and run it (``executor.measuring.stage_timing.time_device_stages``, one intra-op thread, bound to one
core), twice per repeat and kind: the first action of a kind right after one of the other kind, the second
right after the first. ``start cost`` is their difference; ``profiled`` is the sum of the stage's layer times
in this host's profile of the same model (``executor.measuring.profiler.measure_profile``).

No messages and no second process: what is left is the action's own start. A profile summed from layer
times misses it; ``executor profile --plan`` scales the profile to such stage timings (the README's
prediction fidelity section has what it means for the predictions).

    .venv/bin/python benchmarks/action_start_cost.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from executor.running.cores import bind_local_rank  # noqa: E402
from executor.model.linear import enable_weight_grad_deferral  # noqa: E402
from executor.model.scale import scale_spec  # noqa: E402
from executor.measuring.profiler import measure_profile  # noqa: E402
from executor.measuring.stage_timing import time_device_stages  # noqa: E402
from planner.baselines import build_baseline  # noqa: E402
from planner.cluster import load_cluster_preset  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

CASES = [("tiny-llama", "zb-v"), ("tiny-hybrid", "1f1b"), ("gemma-2-9b", "1f1b")]
SCALED = {"gemma-2-9b": {"hidden_size": 64, "seq_len": 64}}
DEVICES, MICROBATCHES = 2, 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    bind_local_rank(0, DEVICES, 1)
    print("| model | schedule | stage | kind | profiled ms | after the same kind ms | after another kind ms "
          "| start cost ms |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for model, schedule in CASES:
        spec = load_model_preset(model)
        if model in SCALED:
            spec = scale_spec(spec, **SCALED[model])
        split = schedule.startswith("zb")
        enable_weight_grad_deferral(split)
        profile = measure_profile(spec, repeats=15, warmup=5, threads=1)
        plan = build_baseline(schedule, profile, DEVICES, MICROBATCHES, cluster=load_cluster_preset("cpu-host"))
        for rank in range(DEVICES):
            timings = time_device_stages(plan, spec, rank, repeats=args.repeats, warmup=args.warmup)
            for (stage, kind), (after_other, after_same) in timings.items():
                profiled = sum(getattr(profile.layers[index], part)
                               for index in plan.stages[stage].layers for part in kind.profile_parts)
                print(f"| {model} | {schedule} | {stage} | {kind} | {profiled:.3f} | {after_same:.3f} | "
                      f"{after_other:.3f} | {after_other - after_same:+.3f} |", flush=True)


if __name__ == "__main__":
    main()
