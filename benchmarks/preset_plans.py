"""The shipped model presets planned as a user would: pure pipeline parallelism on the smallest named GPU cluster
whose memory holds the model state (all its devices, at most one per layer), 32 micro-batches, the AdaPtis search
with its default budget, under each device's real memory (model state plus in-flight activations).

Per preset: the plan, its time, each term of the lower bound (``planner.bounds.search_lower_bound``; ``memory
flow`` is the memory-aware term), the term that binds, the gap, what memory allows the plan's own partition
(``planner.bounds.plan_memory_limit``: the device whose memory binds most and how many micro-batches fit there),
the search's seconds (CPU, one core), evaluations and why it stopped. ``--json FILE`` also writes the rows, so
that two commits can be compared (``--compare OLD.json`` adds a "before" column from such a file).

``--held-out N`` plans N random heterogeneous stacks instead, profiles no preset or tuning has seen: an embedding,
12-40 layers drawn from 2-4 kinds (each with its own time, weight-gradient share, activations and weights), a head
2-12 decoders heavy, on 4 or 8 devices with 4 micro-batches per device and a memory limit leaving room for 0.5-4
micro-batches' activations per device beside an even share of the weights (seeded: the same N stacks every run).

    .venv/bin/python benchmarks/preset_plans.py [--models a,b | --held-out 24] [--json rows.json]
                                                [--compare before.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import random  # noqa: E402

from planner.cluster import load_cluster_preset  # noqa: E402
from planner.cost import analytic_profile  # noqa: E402
from planner.memory import layer_state_bytes  # noqa: E402
from planner.profile import LayerProfile, Profile  # noqa: E402
from planner.errors import SpecError  # noqa: E402
from planner.search import check_model_state_fits, search_plan  # noqa: E402
from planner.spec.presets import load_model_preset, model_preset_names  # noqa: E402

# The named GPU clusters, smallest first (devices, then memory per device).
CLUSTERS = ("a100-40gb-pcie-1x8", "h100-sxm-1x8", "h100-sxm-2x8", "h100-sxm-16x8")
MICROBATCHES = 32
TERMS = (("optimal_device_load_ms", "load"), ("pipeline_fill_ms", "fill"), ("layer_chain_ms", "chain"),
         ("memory_flow_ms", "memory flow"))


def preset_row(model: str) -> dict | None:
    """The search on the first cluster of ``CLUSTERS`` where a plan fits: its devices (at most one per layer) hold
    the model state and the search finds a schedule whose activations fit beside it."""
    spec = load_model_preset(model)
    for name in CLUSTERS:
        cluster = load_cluster_preset(name)
        profile = analytic_profile(spec, cluster)
        devices = min(cluster.num_devices, profile.num_layers)
        try:
            check_model_state_fits(profile, devices, cluster=cluster)
            started = time.process_time()
            result = search_plan(profile, devices, MICROBATCHES, cluster=cluster)
        except SpecError as error:
            print(f"{model} does not fit {name}: {error}", file=sys.stderr)
            continue
        return _row(model, name, devices, MICROBATCHES, result, time.process_time() - started)
    print(f"skipped {model}: no named cluster fits it in pure pipeline parallelism", file=sys.stderr)
    return None


MIB = 1 << 20


def held_out_row(index: int) -> dict | None:
    """The search on random heterogeneous stack ``index`` (see the module doc), with no cluster: transfers free."""
    rng = random.Random(1000 + index)
    kinds = [(rng.uniform(0.3, 2.0), rng.uniform(0.2, 0.6), rng.randint(16, 256), rng.randint(20, 400))
             for _ in range(rng.randint(2, 4))]
    layers = [LayerProfile(name="embed", kind="embedding", forward=0.05, backward_input=0.05, backward_weight=0.05,
                           activation_bytes=16 * MIB, output_bytes=8 * MIB, param_bytes=rng.randint(100, 800) * MIB)]
    for layer in range(rng.randint(12, 40)):
        forward, weight_share, activation_mib, param_mib = rng.choice(kinds)
        layers.append(LayerProfile(name=f"layers.{layer}", kind="decoder", forward=forward,
                                   backward_input=2 * forward * (1 - weight_share),
                                   backward_weight=2 * forward * weight_share, activation_bytes=activation_mib * MIB,
                                   output_bytes=8 * MIB, param_bytes=param_mib * MIB))
    head = rng.uniform(1, 6)
    layers.append(LayerProfile(name="head", kind="head", forward=head, backward_input=head, backward_weight=head,
                               activation_bytes=rng.randint(64, 512) * MIB, output_bytes=8 * MIB,
                               param_bytes=rng.randint(100, 800) * MIB))
    profile = Profile(model=f"held-out-{index}", device="test", layers=tuple(layers), seq_len=4096)
    devices = rng.choice((4, 8))
    state = layer_state_bytes(profile)
    activations = sum(layer.activation_bytes for layer in layers)
    limit = int(sum(state) / devices + max(state) + rng.uniform(0.5, 4) * activations / devices)
    started = time.process_time()
    try:
        result = search_plan(profile, devices, 4 * devices, memory_limit_bytes=limit)
    except SpecError as error:
        print(f"{profile.model} does not fit: {error}", file=sys.stderr)
        return None
    return _row(profile.model, "—", devices, 4 * devices, result, time.process_time() - started)


def _row(model: str, cluster: str, devices: int, microbatches: int, result, seconds: float) -> dict:
    meta = result.plan.meta
    memory = meta.get("memory_binding") or {}
    return {"model": model, "cluster": cluster, "devices": devices, "microbatches": microbatches,
            "iteration_ms": result.iteration_ms, "layout": meta["layout"], "schedule": meta.get("schedule", ""),
            "bound": dict(result.lower_bound), "lower_bound_ms": result.lower_bound_ms, "gap": result.gap,
            "binding": (meta.get("binding") or {}).get("term"), "memory_device": memory.get("device"),
            "microbatches_fit": memory.get("microbatches_fit"), "plan_memory_flow_ms": memory.get("memory_flow_ms"),
            "seconds": seconds, "evaluations": result.stats["evaluations"], "stopped": result.stats["stopped"]}


def print_rows(rows: list[dict], before: dict[str, dict]) -> None:
    header = ["preset", "cluster", "p", "m", "before ms", "AdaPtis ms", *(label for _, label in TERMS), "binds",
              "gap", "plan's memory", "search s", "evals", "stopped"]
    print("| " + " | ".join(header) + " |")
    print("|---|---|---:|---:|---:|---:|" + "---:|" * len(TERMS) + "---|---:|---|---:|---:|---|")
    for row in rows:
        old = before.get(row["model"])
        terms = [f"{row['bound'][key]:,.0f}" if key in row["bound"] else "—" for key, _ in TERMS]
        memory = (f"dev {row['memory_device']}: {row['microbatches_fit']} mb in flight, "
                  f"≥ {row['plan_memory_flow_ms']:,.0f}" if row["memory_device"] is not None else "—")
        print(f"| {row['model']} | {row['cluster']} | {row['devices']} | {row['microbatches']} | "
              f"{old['iteration_ms']:,.0f} | " if old else f"| {row['model']} | {row['cluster']} | {row['devices']} | "
              f"{row['microbatches']} | — | ", end="")
        print(f"**{row['iteration_ms']:,.0f}** | " + " | ".join(terms) +
              f" | {(row['binding'] or '').removesuffix('_ms').replace('_', ' ')} | {row['gap']:.1%} | {memory} | "
              f"{row['seconds']:.1f} | {row['evaluations']} | {row['stopped']} |")
    print()
    print(f"presets: {len(rows)}; mean gap to the bound {statistics.mean(row['gap'] for row in rows):.1%}; "
          f"within 10 %: {sum(row['gap'] <= 0.10 for row in rows)}/{len(rows)}; "
          f"max search time {max(row['seconds'] for row in rows):.1f} s")
    compared = [(before[row["model"]]["iteration_ms"] / row["iteration_ms"]) for row in rows if row["model"] in before]
    if compared:
        print(f"against the before column: mean speedup {statistics.mean(compared):.3f}x, "
              f"worst {min(compared):.3f}x, best {max(compared):.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(model_preset_names()))
    parser.add_argument("--held-out", type=int, metavar="N", help="plan N random heterogeneous stacks instead")
    parser.add_argument("--json", metavar="FILE", help="also write the rows to FILE")
    parser.add_argument("--compare", metavar="FILE", help="rows written by --json on another commit")
    args = parser.parse_args()
    before = {}
    if args.compare:
        before = {row["model"]: row for row in json.loads(Path(args.compare).read_text())}
    rows = []
    jobs = ([lambda index=index: held_out_row(index) for index in range(args.held_out)] if args.held_out
            else [lambda model=model: preset_row(model) for model in args.models.split(",")])
    for job in jobs:
        row = job()
        if row is not None:
            rows.append(row)
            print(f"{row['model']}: {row['iteration_ms']:,.0f} ms, gap {row['gap']:.1%}, {row['seconds']:.1f} s, "
                  f"{row['stopped']}", file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print_rows(rows, before)


if __name__ == "__main__":
    main()
