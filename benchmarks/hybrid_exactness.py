"""Hybrid plans as the planner makes them, run by the executor and checked against one process.

Each row asks the hybrid planner (``planner.parallel.planning.search``) for a plan with the row's degrees pinned on a
local CPU cluster (``cpu-1x<ranks>``), runs it on that many local gloo ranks in float64 for two AdamW steps, and
compares every layer's update and every step's loss with the same steps in one process
(``executor.running.reference``, what ``python -m executor run --verify`` prints). The table gives the largest
difference of an update relative to that parameter's largest update (and the tensor where it is largest), the largest
absolute difference, and how many collectives each rank ran per step (the run's events), with the run's wall time on
this host.

``--backend nccl`` runs the rows on this host's GPUs, one per rank (NCCL allows no two ranks on one GPU), in float64
on CUDA against the reference on the CPU; rows with more ranks than GPUs are listed as not run.

    .venv/bin/python benchmarks/hybrid_exactness.py [--steps 2] [--backend nccl]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from executor.running.launch import run_plan  # noqa: E402
from executor.running.reference import compare_to_reference  # noqa: E402
from executor.running.scope import world_size  # noqa: E402
from planner.parallel.planning import search  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

# (what the row shows, model preset, pinned degrees)
ROWS = [
    ("one rank, every layer kind", "tiny-hybrid", {"tp": 1, "pp": 1, "dp": 1}),
    ("TP2 x PP2", "tiny-llama", {"tp": 2, "pp": 2, "dp": 1}),
    ("CP2 x PP2", "tiny-llama", {"cp": 2, "pp": 2, "dp": 1}),
    ("DP2 x PP2, ZeRO-1", "tiny-llama", {"dp": 2, "pp": 2, "tp": 1}),
    ("EP2 x DP2 x PP2 (MoE), ZeRO-1", "tiny-hybrid", {"ep": 2, "dp": 2, "pp": 2, "tp": 1}),
    ("DP2 x PP2, full sharding (ZeRO-3)", "tiny-llama", {"dp": 2, "pp": 2, "tp": 1, "sharding": "full"}),
    ("EP2 x DP2 x PP2 (MoE), full sharding", "tiny-hybrid", {"ep": 2, "dp": 2, "pp": 2, "tp": 1, "sharding": "full"}),
    ("EP2 x DP4 x PP2 (MoE), full sharding, experts over expert DP 2", "tiny-hybrid",
     {"ep": 2, "dp": 4, "pp": 2, "tp": 1, "sharding": "full"}),
    ("CP2 x PP2, full sharding (over dp x cp)", "tiny-llama", {"cp": 2, "pp": 2, "dp": 1, "sharding": "full"}),
    ("TP2 x PP2 x DP2, ZeRO-1", "tiny-llama", {"tp": 2, "pp": 2, "dp": 2}),
    ("TP2 x PP2 x DP2, full sharding", "tiny-llama", {"tp": 2, "pp": 2, "dp": 2, "sharding": "full"}),
    ("TP2 x CP2 x PP2", "tiny-llama", {"tp": 2, "cp": 2, "pp": 2, "dp": 1}),
    ("TP2 x PP2, full recomputation", "tiny-llama", {"tp": 2, "pp": 2, "dp": 1, "recompute": "full"}),
]
LR = 1e-2


def plan_for(model: str, pins: dict):
    spec = load_model_preset(model)
    ranks = 1
    for degree in ("tp", "cp", "pp", "dp"):
        ranks *= pins.get(degree, 1)
    pins = {"cp": 1, "ep": 1, "recompute": "none", "microbatch_size": spec.micro_batch_size, **pins}
    global_batch = spec.micro_batch_size * pins["dp"] * 4   # four micro-batches per pipeline
    result = search(spec, f"cpu-1x{ranks}", ranks, spec.seq_len, global_batch, pins)
    return spec, result.best.plan


def row(name: str, model: str, pins: dict, steps: int, backend: str) -> list[str]:
    spec, plan = plan_for(model, pins)
    if backend == "nccl" and world_size(plan) > torch.cuda.device_count():
        return [name, model, plan.parallel.short(), str(world_size(plan)),
                f"not run: {torch.cuda.device_count()} GPU(s) here", "", "", "", "", ""]
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.perf_counter()
        result = run_plan(plan, spec, backend=backend, seed=1, steps=steps, optimizer="adamw", lr=LR, dtype="fp64",
                          checkpoint_dir=checkpoint, timeout_s=300)
        seconds = time.perf_counter() - started
        verification = compare_to_reference(checkpoint, spec, num_microbatches=plan.num_microbatches,
                                            data_parallel=plan.parallel.dp, steps=steps, seed=1, lr=LR,
                                            optimizer="adamw", dtype=torch.float64)
    loss = verification.loss_relative(result.losses, result.balancing_losses)
    per_rank = Counter(event["rank"] for event in result.events if event["type"] == "collective")
    collectives = statistics.median(per_rank[rank] for rank in range(world_size(plan))) / steps
    return [name, model, plan.parallel.short(), str(world_size(plan)), f"{verification.largest_relative:.1e}",
            f"{verification.largest_difference:.1e}", f"{loss:.1e}", verification.worst, f"{collectives:.0f}",
            f"{seconds:.1f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    args = parser.parse_args()
    header = ["axes", "model", "plan", "ranks", "update rel. diff", "abs. diff", "loss rel. diff", "worst tensor",
              "collectives / rank / step", "run s"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, model, pins in ROWS:
        print("| " + " | ".join(row(name, model, pins, args.steps, args.backend)) + " |", flush=True)


if __name__ == "__main__":
    main()
