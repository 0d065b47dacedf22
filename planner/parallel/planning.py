"""The hybrid-parallel planner in one call, for the CLI, the web and scripts.

``search(model, cluster, gpus, seq_len, global_batch, pins)`` takes a ``ModelSpec`` or a model preset name
and a ``ClusterSpec`` or a cluster preset name (``h100-sxm-1024x8``), and returns a
``planner.parallel.search.HybridResult``; ``HybridResult.to_dict()`` is plain JSON::

    {"best": {"parallel": {tp, cp, pp, dp, ep, etp (only where it differs from tp), microbatch_size,
                           num_microbatches, recompute, sharding, precision, vpp (where every rank holds as many
                           stages)},
              "short": "TP8 CP1 PP4 DP32 EP1 mbs1 m56 full ZeRO-1",
              "predicted": {iteration_ms, pipeline_ms, data_parallel_exposed_ms, optimizer_ms, tokens_per_s, mfu,
                            hardware_tflops_per_gpu, peak_memory_bytes, fits, schedule, chunks, estimated,
                            breakdown_ms: {compute, recompute, tp, cp, ep, pipeline_transfers, bubble, dp,
                                           optimizer} (evaluate.STEP_PARTS, summing to iteration_ms)},
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

``check(model, cluster, gpus, seq_len, global_batch, pins)`` raises the ``SpecError`` the search would raise for
bad input or a model that fits nowhere, in a fraction of a second (what a web request checks before queueing
the search); ``search(..., cancel=callable)`` stops when the callable answers True.

``predict(plan, model, cluster, seq_len)`` re-predicts an ``adaptis.plan/v2`` plan (after an edit, say) and
returns the same ``{"parallel", "short", "predicted", "memory"}`` block as a search result's entries;
``pipeline(plan, model, cluster, seq_len)`` the profile and cluster its pipeline is simulated on (for a timeline).
"""

from __future__ import annotations

from planner.cluster import ClusterSpec, load_cluster_preset
from planner.errors import SpecError
from planner.parallel.cost import CostOptions, Software
from planner.parallel.evaluate import Job, plan_pipeline, score_plan
from planner.parallel.search import (PIN_KEYS, HybridResult, SearchCancelled, check_job, check_memory,
                                     normalized_pins)
from planner.parallel.search import search as search_configuration
from planner.plan import Plan
from planner.profile import Profile
from planner.spec.model import ModelSpec
from planner.spec.presets import load_model_preset


def search(model: ModelSpec | str, cluster: ClusterSpec | str, gpus: int, seq_len: int, global_batch: int,
           pins: dict | None = None, **options) -> HybridResult:
    """The best hybrid-parallel plan; ``options`` go to ``planner.parallel.search.search``."""
    return search_configuration(_model(model), _cluster(cluster), gpus, seq_len, global_batch, pins, **options)


def check(model: ModelSpec | str, cluster: ClusterSpec | str, gpus: int, seq_len: int, global_batch: int,
          pins: dict | None = None, options: CostOptions = CostOptions()) -> None:
    """Raise the SpecError ``search`` would for this input (a pin that cannot split the GPUs or the batch, no
    configuration that fits in memory), without searching."""
    job = Job(model=_model(model), cluster=_cluster(cluster), gpus=gpus, seq_len=seq_len, global_batch=global_batch,
              options=options)
    pins = normalized_pins(pins)
    check_job(job, pins)
    check_memory(job, pins)


def predict(plan: Plan, model: ModelSpec | str, cluster: ClusterSpec | str, seq_len: int,
            options: CostOptions | None = None) -> dict:
    """The job-level prediction of a v2 plan: its pipeline simulated on the ranks' links, plus DP, optimizer and
    every GPU's memory. The GPU count and global batch follow from ``plan.parallel``; ``options`` default to the
    overlaps, framework, recompute modules and MoE dispatcher the plan was searched with (its ``meta.overlap``, ``dp``
    without one, ``meta.framework``, ``megatron`` without one, ``meta.recompute_modules``, ``core_attn`` without one,
    and ``meta.ep_dispatcher``, ``alltoall`` without one)."""
    job = _plan_job(plan, model, cluster, seq_len, options)
    chunks = max(len(plan.stages_on(device)) for device in range(plan.num_devices))
    return score_plan(job, plan.parallel, plan, plan.strategy, chunks).to_dict()


def pipeline(plan: Plan, model: ModelSpec | str, cluster: ClusterSpec | str, seq_len: int,
             options: CostOptions | None = None) -> tuple[Profile, ClusterSpec]:
    """The profile and pipeline-rank cluster ``predict`` simulates a v2 plan's pipeline on: simulate the plan on
    them for its timeline (``planner.simulator.simulate``)."""
    return plan_pipeline(_plan_job(plan, model, cluster, seq_len, options), plan.parallel, plan)


def _plan_job(plan: Plan, model: ModelSpec | str, cluster: ClusterSpec | str, seq_len: int,
              options: CostOptions | None) -> Job:
    if options is None:
        options = Software.named(plan.meta, prefix="meta.").options()
    if plan.parallel is None:
        raise SpecError("parallel", "the plan has no parallel configuration (an adaptis.plan/v1 plan): simulate it "
                                    "on a profile instead")
    model, cluster = _model(model), _cluster(cluster)
    config = plan.parallel
    if plan.stages[-1].last_layer != model.num_layers - 1:
        raise SpecError("stages", f"the plan's stages cover {plan.stages[-1].last_layer + 1} layers, "
                                  f"{model.name} has {model.num_layers}")
    job = Job(model=model, cluster=cluster, gpus=config.num_gpus, seq_len=seq_len, global_batch=config.global_batch,
              options=options)
    check_job(job, {"tp": config.tp, "pp": config.pp, "ep": config.ep, "precision": config.precision})
    return job


def _model(model: ModelSpec | str) -> ModelSpec:
    return load_model_preset(model) if isinstance(model, str) else model


def _cluster(cluster: ClusterSpec | str) -> ClusterSpec:
    return load_cluster_preset(cluster) if isinstance(cluster, str) else cluster


__all__ = ["PIN_KEYS", "HybridResult", "SearchCancelled", "check", "pipeline", "predict", "search"]
