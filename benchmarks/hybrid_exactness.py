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

``--families`` runs instead one row per HuggingFace ``model_type`` the importer reads: its first fixture in
``tests/planner/fixtures/hf/`` (or, without one, the model ``transformers``' config class defaults to), cut to its
first decoder blocks up to the one that completes its distinct kinds of block (at most 8), scaled down for the plan
(``executor.model.scale.scale_spec``, as a local run scales it) and run at TP 2 x PP 2 x DP 2, or with ``--axes`` at
TP 2 x CP 2 x PP 2, fully sharded over DP 4 x PP 2, or recomputing every layer (``family_pins``), with EP 2 and expert
TP 1 where it has MoE layers.

    .venv/bin/python benchmarks/hybrid_exactness.py [--steps 2] [--backend nccl] [--families [--axes AXES]]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from executor.model.scale import scale_spec  # noqa: E402
from executor.running.launch import run_plan  # noqa: E402
from executor.running.reference import compare_to_reference  # noqa: E402
from executor.running.scope import world_size  # noqa: E402
from planner.parallel.planning import search  # noqa: E402
from planner.parallel.search import context_parallel_limit, tensor_parallel_limit  # noqa: E402
from planner.errors import SpecError  # noqa: E402
from planner.parallel.config import ParallelConfig  # noqa: E402
from planner.spec.hf import FAMILIES, family_of, import_hf_config  # noqa: E402
from planner.spec.model import ModelSpec, MoEMLP  # noqa: E402
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


HF_FIXTURES = REPO_ROOT / "tests" / "planner" / "fixtures" / "hf"
# --families' axes: TP x PP x DP; TP x CP x PP; full sharding over DP 4; TP x PP x DP recomputing every layer (each
# with EP 2 where the model has MoE)
FAMILY_AXES = {"tp-pp-dp": {"tp": 2, "pp": 2, "dp": 2}, "tp-cp-pp": {"tp": 2, "cp": 2, "pp": 2, "dp": 1},
               "fsdp": {"tp": 1, "pp": 2, "dp": 4, "sharding": "full"},
               "recompute": {"tp": 2, "pp": 2, "dp": 2, "recompute": "full"}}
MAX_BLOCKS = 8


# The sizes a family's transformers config class leaves None (dots1: its experts) or at one (Hunyuan MoE: one expert,
# top-1), for a family without a fixture
UNSIZED_DEFAULTS = {"dots1": {"n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 2,
                              "first_k_dense_replace": 1},
                    "hunyuan_v1_moe": {"num_experts": 8, "moe_topk": 2}}


def family_specs() -> list[tuple[str, str, ModelSpec]]:
    """(model_type, where its config came from, the model cut to the blocks that show each of its kinds) for every
    model_type the importer reads."""
    fixtures = {}
    for path in sorted(HF_FIXTURES.glob("*.json")):
        config = json.loads(path.read_text())
        fixtures.setdefault(config.get("model_type"), (path.stem, config))
        fixtures.setdefault(family_of(config), (path.stem, config))
    rows = []
    for model_type in sorted(FAMILIES):
        # its own fixture, else the class defaults, else a fixture of a model_type read the same way (Mistral's: Llama
        # 3's; Gemma 3's text model: the multimodal config's text_config)
        siblings = [(stem, {**config.get("text_config", config), "model_type": model_type})
                    for other, (stem, config) in fixtures.items()
                    if other in FAMILIES and FAMILIES[other].blocks is FAMILIES[model_type].blocks]
        sized = UNSIZED_DEFAULTS.get(model_type, {})
        for source, config in [*([fixtures[model_type]] if model_type in fixtures else []),
                               ("transformers' defaults" + (" and " + ", ".join(sized) if sized else ""),
                                {"model_type": model_type, **sized}), *siblings]:
            try:
                spec = import_hf_config(config)
                break
            except SpecError:   # the class defaults leave a size out
                continue
        else:
            raise SystemExit(f"{model_type}: no fixture, and transformers' defaults leave a size out; add it to "
                             f"UNSIZED_DEFAULTS")
        blocks = spec.layers[1:-1]
        kinds = set(blocks)
        depth = next(count for count in range(2, len(blocks) + 1)
                     if set(blocks[:count]) == kinds or count == MAX_BLOCKS)
        rows.append((model_type, source, dataclasses.replace(
            spec, layers=(spec.layers[0], *blocks[:depth], spec.layers[-1]))))
    return rows


def family_pins(spec: ModelSpec, axes: str = "tp-pp-dp") -> dict:
    """The axes' degrees, TP 2 traded for DP 2 where the model cannot take it (Granite 4.0-H's one group of Mamba-2
    heads, as Megatron-Core's mixer refuses), with EP 2 and expert TP 1 where it has MoE layers."""
    degrees = dict(FAMILY_AXES[axes])
    if degrees["tp"] > 1 and tensor_parallel_limit(spec, degrees["tp"]):
        degrees.update(tp=1, dp=degrees["dp"] * degrees["tp"])
    moe = any(isinstance(layer.mlp, MoEMLP) for layer in spec.layers)
    return {**degrees, **({"ep": 2, "etp": 1} if moe else {})}


def family_refusal(spec: ModelSpec, pins: dict) -> str | None:
    """Why the planner would not split the model so (Mamba-1 under CP), or None."""
    if pins.get("cp", 1) > 1:
        return context_parallel_limit(spec, pins["tp"], pins["cp"])
    return None


def family_model(spec: ModelSpec, pins: dict) -> ModelSpec:
    parallel = ParallelConfig(**{key: pins[key] for key in ("tp", "pp", "dp")}, cp=pins.get("cp", 1),
                              ep=pins.get("ep", 1))
    return scale_spec(spec, parallel=parallel, micro_batch_size=1)


def plan_for(model: str | ModelSpec, pins: dict):
    spec = load_model_preset(model) if isinstance(model, str) else model
    ranks = 1
    for degree in ("tp", "cp", "pp", "dp"):
        ranks *= pins.get(degree, 1)
    pins = {"cp": 1, "ep": 1, "recompute": "none", "microbatch_size": spec.micro_batch_size, **pins}
    global_batch = spec.micro_batch_size * pins["dp"] * 4   # four micro-batches per pipeline
    result = search(spec, f"cpu-1x{ranks}", ranks, spec.seq_len, global_batch, pins)
    return spec, result.best.plan


def row(name: str, model: str | ModelSpec, pins: dict, steps: int, backend: str) -> list[str]:
    spec, plan = plan_for(model, pins)
    model = model if isinstance(model, str) else f"{spec.num_layers - 2} blocks"
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
    parser.add_argument("--families", action="store_true", help="one row per HuggingFace model_type instead")
    parser.add_argument("--axes", choices=sorted(FAMILY_AXES), default="tp-pp-dp", help="--families' degrees")
    args = parser.parse_args()
    rows, refused = ROWS, []
    if args.families:
        rows = []
        for model_type, source, spec in family_specs():
            pins = family_pins(spec, args.axes)
            if reason := family_refusal(spec, pins):
                refused.append(f"{model_type}: {reason}")
            else:
                rows.append((f"{model_type} ({source})", family_model(spec, pins), pins))
    header = ["axes", "model", "plan", "ranks", "update rel. diff", "abs. diff", "loss rel. diff", "worst tensor",
              "collectives / rank / step", "run s"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, model, pins in rows:
        print("| " + " | ".join(row(name, model, pins, args.steps, args.backend)) + " |", flush=True)
    for reason in refused:
        print(f"\nnot run, as the planner refuses the split: {reason}")


if __name__ == "__main__":
    main()
