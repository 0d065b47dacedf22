"""The hybrid-parallel planner in one call, for the CLI, the web and scripts.

``search(model, cluster, gpus, seq_len, global_batch, pins)`` takes a ``ModelSpec`` or a model preset name
and a ``ClusterSpec`` or a cluster preset name (``h100-sxm-1024x8``), and returns a
``planner.parallel.search.HybridResult``; ``HybridResult.to_dict()`` is plain JSON::

    {"best": {"parallel": {tp, cp, pp, dp, ep, microbatch_size, num_microbatches, recompute,
                           distributed_optimizer},
              "short": "TP8 CP1 PP4 DP32 EP1 mbs1 m56 full ZeRO-1",
              "predicted": {iteration_ms, pipeline_ms, data_parallel_exposed_ms, optimizer_ms, tokens_per_s, mfu,
                            hardware_tflops_per_gpu, peak_memory_bytes, fits, schedule, chunks, estimated},
              "memory": [{pipeline_rank, params_bytes, gradients_bytes, optimizer_bytes, activations_bytes,
                          buffers_bytes, overhead_bytes, total_bytes, capacity_bytes, fits}, ...],
              "plan": {... the adaptis.plan/v2 document ...},
              "rank_mapping": {order, gpus_per_node, nvlink_domain, groups: {tp, cp, dp, ep, edp, pp: {size,
                               per_domain, crosses_domains, ring_bandwidth_gb_s}},
                               ranks: [{gpu, node, tp, cp, dp, pp, ep}, ...]}},
     "runners_up": [{"parallel", "short", "predicted", "memory"}, ...],
     "considered": int, "pruned_by_memory": int, "seconds": float, "stats": {...}}

Every GPU of a pipeline rank holds the same memory, so ``memory`` has one entry per pipeline rank; a GPU's
entry is ``memory[ranks[gpu]["pp"]]``. Bad input raises ``planner.errors.SpecError`` naming the field.
"""

from __future__ import annotations

from planner.cluster import ClusterSpec, load_cluster_preset
from planner.parallel.search import PIN_KEYS, HybridResult
from planner.parallel.search import search as search_configuration
from planner.spec.model import ModelSpec
from planner.spec.presets import load_model_preset


def search(model: ModelSpec | str, cluster: ClusterSpec | str, gpus: int, seq_len: int, global_batch: int,
           pins: dict | None = None, **options) -> HybridResult:
    """The best hybrid-parallel plan; ``options`` go to ``planner.parallel.search.search``."""
    if isinstance(model, str):
        model = load_model_preset(model)
    if isinstance(cluster, str):
        cluster = load_cluster_preset(cluster)
    return search_configuration(model, cluster, gpus, seq_len, global_batch, pins, **options)


__all__ = ["PIN_KEYS", "HybridResult", "search"]
