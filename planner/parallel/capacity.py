"""Capacity planning: how many GPUs to train on. For a model, a token budget and a kind of GPU, the best
configuration at each GPU count of a sweep (the hybrid search, ``planner.parallel.search``), and what it costs:
days to train and GPU-hours.

The cluster of each count is the template cluster (its device, links and NVLink domain) grown or shrunk to the
nodes that count needs. The global batch (sequences per step) and sequence length stay those given at every count,
as a training recipe keeps them while the cluster changes; a count they cannot be split over, or at which the model
fits in no configuration, gets the search's reason instead of a configuration. Each count is searched without the
AdaPtis refinement (the closed form ranks every configuration, the best few are simulated with Megatron's
schedules), so a sweep of the whole range takes seconds per count: the job it picks can then be planned in full.

    days = token_budget / tokens_per_s / 86,400;  GPU-hours = gpus · token_budget / tokens_per_s / 3,600
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from planner.cluster import ClusterSpec
from planner.errors import SpecError
from planner.limits import MAX_GPUS
from planner.parallel.cost import CostOptions
from planner.parallel.search import SearchCancelled, search
from planner.spec.model import ModelSpec

# 64 to 16,384 GPUs, doubling: the range our users train on
DEFAULT_GPU_COUNTS = tuple(64 << step for step in range(9))
MAX_GPU_COUNTS = 16
# GPU-hours within this share of the fewest are as cheap: the fastest such count is the cheapest (perfect scaling
# makes every count cost the same, and then more GPUs only save days)
CHEAPEST_TOLERANCE = 0.01
# a trillion-parameter model's pre-training is ~10-40 T tokens (Llama 3: 15.6 T); 10^15 leaves room and stays exact
MAX_TOKEN_BUDGET = 10**15

Progress = Callable[[float, str], None]


def capacity_check(gpu_counts: object, token_budget: object) -> tuple[tuple[int, ...], int]:
    """The sweep's GPU counts (distinct, ascending) and token budget, or a SpecError naming the field."""
    if not isinstance(gpu_counts, (list, tuple)) or not gpu_counts:
        raise SpecError("gpu_counts", f"must be a list of GPU counts, e.g. {list(DEFAULT_GPU_COUNTS[:3])}; "
                                      f"got {gpu_counts!r}")
    if len(gpu_counts) > MAX_GPU_COUNTS:
        raise SpecError("gpu_counts", f"at most {MAX_GPU_COUNTS} counts; got {len(gpu_counts)}")
    for count in gpu_counts:
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_GPUS:
            raise SpecError("gpu_counts", f"each count must be an integer between 1 and {MAX_GPUS:,}; got {count!r}")
    if isinstance(token_budget, bool) or not isinstance(token_budget, int) or not 1 <= token_budget <= MAX_TOKEN_BUDGET:
        raise SpecError("token_budget", f"must be a number of tokens between 1 and {MAX_TOKEN_BUDGET:.0e}; "
                                        f"got {token_budget!r}")
    return tuple(sorted(set(gpu_counts))), token_budget


def parse_gpu_counts(text: str) -> list[int]:
    """GPU counts as a person writes them: "64, 128, 256", or a doubling range "64-16384"; ``DEFAULT_GPU_COUNTS``
    when empty. SpecError naming ``gpu_counts`` otherwise (``capacity_check`` bounds them)."""
    text = text.strip()
    if not text:
        return list(DEFAULT_GPU_COUNTS)
    try:
        if "-" in text and "," not in text:
            low, high = (int(end) for end in text.split("-", 1))
            if not 1 <= low <= high <= MAX_GPUS:
                raise SpecError("gpu_counts", f"a range must run from 1 up to at most {MAX_GPUS:,}; got {text!r}")
            return [low << step for step in range(int(math.log2(high / low)) + 1)]
        return [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise SpecError("gpu_counts", f"write counts as '64, 128, 256' or a doubling range '64-16384'; "
                                      f"got {text!r}") from None


def cluster_of(template: ClusterSpec, gpus: int) -> ClusterSpec:
    """``template`` with the nodes ``gpus`` GPUs need (its device, links and NVLink domain)."""
    nodes = -(-gpus // template.devices_per_node)
    return replace(template, nodes=nodes, name=f"{nodes} node{'s' if nodes > 1 else ''} x {template.devices_per_node} "
                                               f"{template.device.name}")


def capacity_point(model: ModelSpec, template: ClusterSpec, gpus: int, seq_len: int, global_batch: int,
                   token_budget: int, pins: dict | None = None, options: CostOptions = CostOptions()) -> dict:
    """One count of the sweep: the best configuration's ``short``, ``parallel`` and ``predicted`` (with
    ``breakdown_ms``), ``days`` and ``gpu_hours``; or ``error`` ({field, reason}) where the search finds none."""
    cluster = cluster_of(template, gpus)
    point = {"gpus": gpus, "nodes": cluster.nodes}
    try:
        result = search(model, cluster, gpus, seq_len, global_batch, pins, options=options, runners_up=0, refine=False)
    except SpecError as error:
        return {**point, "error": {"field": error.field, "reason": error.reason}}
    best = result.best
    predicted = best.metrics()
    seconds = token_budget / predicted["tokens_per_s"]
    return {**point, "short": best.config.short(), "parallel": best.config.to_dict(), "predicted": predicted,
            "days": seconds / 86400, "gpu_hours": gpus * seconds / 3600}


def capacity_sweep(model: ModelSpec, template: ClusterSpec, gpu_counts: tuple[int, ...], seq_len: int,
                   global_batch: int, token_budget: int, pins: dict | None = None, *,
                   options: CostOptions = CostOptions(), progress: Progress | None = None,
                   cancel: Callable[[], bool] | None = None) -> dict:
    """Every count of ``gpu_counts`` (``capacity_point``), in order, reporting progress between counts. ``cancel``
    is asked before each count: once it answers True the sweep returns the counts done (``cancelled``), or raises
    ``SearchCancelled`` when none of them has a configuration. ``fastest_gpus`` trains in the fewest days,
    ``cheapest_gpus`` in the fewest GPU-hours (the fastest of those within ``CHEAPEST_TOLERANCE`` of the fewest).
    Raises SpecError when no count has a configuration (how many counts, and the largest count's reason)."""
    gpu_counts, token_budget = capacity_check(list(gpu_counts), token_budget)
    report = progress or (lambda fraction, message: None)
    points, cancelled = [], False
    for index, gpus in enumerate(gpu_counts):
        if cancel is not None and cancel():
            if not points:
                raise SearchCancelled("cancelled before the first GPU count was searched")
            cancelled = True
            break
        report(index / len(gpu_counts), f"searching {gpus:,} GPUs ({index + 1} of {len(gpu_counts)})")
        points.append(capacity_point(model, template, gpus, seq_len, global_batch, token_budget, pins, options))
    planned = [point for point in points if "error" not in point]
    if not planned and cancelled:
        raise SearchCancelled(f"cancelled after {len(points)} GPU counts, none of which had a configuration")
    if not planned:
        last = points[-1]["error"]
        raise SpecError(last["field"], f"none of the {len(points)} GPU counts of the sweep has a configuration; at "
                                       f"{points[-1]['gpus']:,} GPUs: {last['reason']}")
    fastest = min(planned, key=lambda point: point["days"])
    fewest = min(point["gpu_hours"] for point in planned)
    cheapest = min((point for point in planned if point["gpu_hours"] <= fewest * (1 + CHEAPEST_TOLERANCE)),
                   key=lambda point: point["days"])
    report(1.0, f"{'cancelled' if cancelled else 'done'}: {len(planned)} of {len(gpu_counts)} counts planned")
    return {"points": points, "token_budget": token_budget, "seq_len": seq_len, "global_batch": global_batch,
            "device": template.device.name, "gpus_per_node": template.devices_per_node,
            "fastest_gpus": fastest["gpus"], "cheapest_gpus": cheapest["gpus"],
            "cancelled": cancelled}
