"""What a hybrid job's page shows of its result: the configurations table, where each one's step goes, the picture of
the cluster and the memory of each pipeline rank. Pure functions of the stored job; the template only lays them out.

The picture draws every GPU (a cell labelled with its (tp, cp, dp, pp, ep) coordinate, coloured by pipeline
rank) for jobs of up to ``PICTURE_ALL_UP_TO`` GPUs; a larger job shows its first ``PICTURE_FIRST_NODES`` nodes
in full, the count of the rest, and which nodes each pipeline rank spans, so the page stays a few hundred
elements at 16,384 GPUs.
"""

from __future__ import annotations

from planner.service import SHARDING_LABELS, STEP_PARTS, ClusterSpec, RankMapping, load_cluster, load_parallel
from planner import service as planner_service

GIB = 2**30
PICTURE_ALL_UP_TO = 256
PICTURE_FIRST_NODES = 8
MEMORY_PARTS = (("params_bytes", "parameters"), ("gradients_bytes", "gradients"), ("optimizer_bytes", "optimizer"),
                ("activations_bytes", "activations"), ("buffers_overhead_bytes", "buffers & overhead"))

# the planner's step parts (``predicted.breakdown_ms``), in its order, with their labels
STEP_LABELS = {"compute": "compute", "recompute": "recomputation", "tp": "exposed TP comm.", "cp": "exposed CP comm.",
               "ep": "exposed EP comm.", "pipeline_transfers": "pipeline transfers", "bubble": "pipeline bubble",
               "dp": "exposed DP comm.", "optimizer": "optimizer step"}
STEP_BAR_PARTS = tuple((part, STEP_LABELS[part]) for part in STEP_PARTS)


def stage_colour(pp_rank: int, pp: int) -> str:
    """Pipeline ranks evenly round the colour wheel, light enough for dark text."""
    return f"hsl({round(360 * pp_rank / max(pp, 1)) % 360}, 70%, 80%)"


def _step(score: dict) -> dict:
    """A configuration's step as ``planner.comparison`` compares steps."""
    predicted = score["predicted"]
    return {"iteration_ms": predicted["iteration_ms"], "tokens_per_s": predicted["tokens_per_s"],
            "gpus": planner_service.plan_gpus({"parallel": score["parallel"]})}


def configuration_rows(result: dict) -> list[dict]:
    """The chosen configuration, then the runners-up: throughput, MFU, step time, peak memory, fits, and each
    runner-up against the chosen one by tokens/s (``planner.comparison``; it says if the batch or GPUs differ)."""
    chosen = _step(result["best"])
    rows = []
    for index, score in enumerate([result["best"], *result["runners_up"]]):
        predicted = score["predicted"]
        difference = planner_service.throughput_difference(chosen, _step(score))
        rows.append({"chosen": index == 0, "short": score["short"], "parallel": score["parallel"],
                     "schedule": predicted["schedule"], "chunks": predicted["chunks"],
                     "estimated": predicted["estimated"], "iteration_s": predicted["iteration_ms"] / 1e3,
                     "tokens_per_s": predicted["tokens_per_s"], "mfu_percent": 100 * predicted["mfu"],
                     "hardware_tflops_per_gpu": predicted["hardware_tflops_per_gpu"],
                     "peak_memory_gib": predicted["peak_memory_bytes"] / GIB, "fits": predicted["fits"],
                     "throughput_percent": 100 * (difference["tokens_per_s_ratio"] - 1)
                     if difference["tokens_per_s_ratio"] is not None else None,
                     "comparison_note": difference["note"]})
    return rows


def stacked(amounts: dict, parts: list[tuple[str, str]], scale: float, unit: float) -> list[dict]:
    """One stacked bar's parts: ``(key, label)`` in order, each amount in ``unit`` and in percent of ``scale``."""
    return [{"key": key, "label": label, "amount": amounts[key] / unit, "percent": 100 * amounts[key] / scale}
            for key, label in parts]


def legend(parts) -> list[dict]:
    """The legend of stacked bars of ``(key, label)`` parts."""
    return [{"key": key, "label": label} for key, label in parts]


def memory_bars(memory: list[dict]) -> dict:
    """One stacked bar per pipeline rank, widths in percent of the largest of capacity and use."""
    scale = max(max(rank["capacity_bytes"], rank["total_bytes"]) for rank in memory)
    parts = [(key.removesuffix("_bytes"), label) for key, label in MEMORY_PARTS]
    bars = []
    for rank in memory:
        amounts = {key.removesuffix("_bytes"): value for key, value in rank.items()}
        amounts["buffers_overhead"] = rank["buffers_bytes"] + rank["overhead_bytes"]
        bars.append({
            "pipeline_rank": rank["pipeline_rank"], "fits": rank["fits"], "total_gib": rank["total_bytes"] / GIB,
            "capacity_gib": rank["capacity_bytes"] / GIB,
            "capacity_percent": 100 * rank["capacity_bytes"] / scale, "parts": stacked(amounts, parts, scale, GIB)})
    return {"bars": bars, "parts": legend(parts)}


def step_bars(result: dict) -> dict:
    """Where each configuration's step goes (``predicted.breakdown_ms``): one stacked bar for the chosen one and each
    runner-up, widths in percent of the longest step; a configuration predicted before steps were broken down has
    no bar."""
    scores = [result["best"], *result["runners_up"]]
    scale = max(score["predicted"]["iteration_ms"] for score in scores)
    bars = []
    for index, score in enumerate(scores):
        predicted = score["predicted"]
        breakdown = predicted.get("breakdown_ms")
        bars.append({"chosen": index == 0, "short": score["short"], "schedule": predicted["schedule"],
                     "chunks": predicted["chunks"], "iteration_s": predicted["iteration_ms"] / 1e3,
                     "parts": stacked(breakdown, STEP_BAR_PARTS, scale, 1e3) if breakdown else None})
    return {"bars": bars, "parts": legend(STEP_BAR_PARTS)}


def cluster_picture(parallel: dict, cluster: ClusterSpec) -> dict:
    """Nodes as boxes of GPU cells (the first nodes only for a large job) and each pipeline rank's span."""
    config = load_parallel(parallel)
    mapping = RankMapping(config, cluster)
    gpus, per_node = config.num_gpus, cluster.devices_per_node
    nodes_used = -(-gpus // per_node)
    shown = nodes_used if gpus <= PICTURE_ALL_UP_TO else min(PICTURE_FIRST_NODES, nodes_used)
    nodes = []
    for node in range(shown):
        cells = []
        for gpu in range(node * per_node, min((node + 1) * per_node, gpus)):
            coordinate = mapping.coordinate(gpu)
            cells.append({**coordinate, "colour": stage_colour(coordinate["pp"], config.pp)})
        nodes.append({"index": node, "gpus": cells})
    per_rank = gpus // config.pp
    stages = [{"pp": rank, "colour": stage_colour(rank, config.pp), "first_gpu": rank * per_rank,
               "last_gpu": (rank + 1) * per_rank - 1, "first_node": rank * per_rank // per_node,
               "last_node": ((rank + 1) * per_rank - 1) // per_node} for rank in range(config.pp)]
    return {"nodes": nodes, "shown_gpus": sum(len(node["gpus"]) for node in nodes), "gpus": gpus,
            "nodes_used": nodes_used, "hidden_nodes": nodes_used - shown,
            "hidden_gpus": gpus - sum(len(node["gpus"]) for node in nodes), "per_node": per_node,
            "idle_gpus": cluster.num_devices - gpus, "cluster_nodes": cluster.nodes, "stages": stages,
            "gpus_per_stage": per_rank}


def hybrid_page_context(job) -> dict:
    """The hybrid sections of the job page; empty until the job has a result."""
    result = job.result or {}
    if "best" not in result:
        return {"hybrid": None}
    best = result["best"]
    cluster = load_cluster(job.cluster_doc)
    config = load_parallel(best["parallel"])
    return {"hybrid": {
        "result": result, "best": best, "predicted": best["predicted"], "rows": configuration_rows(result),
        "picture": cluster_picture(best["parallel"], cluster), "memory": memory_bars(best["memory"]),
        "steps": step_bars(result),
        "recompute": config.recompute_text(), "sharding": SHARDING_LABELS[config.sharding],
        "precision": config.precision.upper(), "etp": config.etp, "moe": config.ep > 1 or config.etp != config.tp,
        "device": cluster.device.name,
        "peak_memory_gib": best["predicted"]["peak_memory_bytes"] / GIB,
        "capacity_gib": cluster.device.memory_bytes / GIB,
    }}
