"""What this executor runs, checked before anything imports torch: the web's plan pages and run requests ask it.

A hybrid plan (``adaptis.plan/v2``) runs with every axis it plans, inside its pipeline: data parallelism
(gradients all-reduced at the step's end; with ``sharding`` ``optimizer`` the optimizer state sharded over the
data-parallel ranks, ZeRO-1; with ``full`` the weights too, each layer gathered around its own passes, and the
gradients reduce-scattered into the shards, ZeRO-3, ``executor.running.sharding``), tensor parallelism (Megatron-LM's
column- and row-parallel layers with sequence parallelism, ``executor.model.tensor_parallel``), context parallelism
(``executor.model.context_parallel``) and expert parallelism (``executor.model.expert_parallel``), where every
layer of the model has a form for them here. Each stage recomputes activations as planned
(``executor.model.recompute``). What it cannot run as planned (a layer kind without a TP or CP form, a sequence or
experts that do not split evenly) is refused with the reason: run as less, it would be measured against a prediction
of something else.
"""

from __future__ import annotations

from dataclasses import replace

from planner.errors import SpecError
from planner.parallel.config import ParallelConfig
from planner.parallel.search import context_parallel_limit, expert_parallel_limit
from planner.plan import Plan
from planner.spec.model import (AttentionMixer, DenseMLP, LinearAttentionMixer, Mamba2Mixer, MambaMixer, ModelSpec,
                                MoEMLP)

EXPORT_HINT = "export it to Megatron-LM or torchtitan to run it"


def world_size(plan: Plan) -> int:
    """The ranks a run of ``plan`` starts: one per GPU of a hybrid plan, else one per pipeline device."""
    return plan.parallel_config().num_gpus


# Megatron-LM's --make-vocab-size-divisible-by default (megatron/training/arguments.py): a vocabulary is padded to a
# multiple of this times TP (``_vocab_size_with_padding``, megatron/training/tokenizer/tokenizer.py)
VOCAB_DIVISIBLE_BY = 128


def planned_spec(plan: Plan, spec: ModelSpec) -> ModelSpec:
    """``spec`` as a run of ``plan`` holds it: with the hybrid plan's micro-batch size (its sequences per
    micro-batch), and a vocabulary its TP does not divide padded as Megatron-LM pads it, to a multiple of 128 x TP
    (GPT-2's 50,257 tokens under TP 2: 50,432). The padded rows are embedded and scored like the others (a run's
    synthetic tokens are drawn from all of them), in the run and in its one-process reference alike."""
    parallel = plan.parallel
    if parallel is None:
        return spec
    changes = {}
    if parallel.microbatch_size != spec.micro_batch_size:
        changes["micro_batch_size"] = parallel.microbatch_size
    if spec.vocab_size % parallel.tp:
        multiple = VOCAB_DIVISIBLE_BY * parallel.tp
        changes["vocab_size"] = -(-spec.vocab_size // multiple) * multiple
    return replace(spec, **changes) if changes else spec


def tensor_parallel_refusal(spec: ModelSpec, tp: int) -> str | None:
    """Why ``spec`` cannot be split ``tp`` ways by ``executor.model.tensor_parallel``, or None.

    What is split, as Megatron-Core splits it: attention by heads (query heads and key/value groups, so both
    counts must divide), the dense MLP and every MoE expert (shared ones too; expert TP = TP) by its intermediate
    width, the embedding and the head by vocabulary; norms and the router are replicated, their gradients summed
    over the group (sequence parallelism gives each rank a slice of the tokens); Mamba-2 by heads and groups,
    linear attention and latent attention (MLA: its up-projections) by heads, Mamba-1 by channels.
    """
    if tp == 1:
        return None
    if spec.seq_len % tp:
        return f"sequence parallelism splits the sequence ({spec.seq_len} tokens) over TP{tp}, which must divide it"
    for index, layer in enumerate(spec.layers):
        if layer.kind in ("embedding", "head"):
            if spec.vocab_size % tp:
                return f"the vocabulary ({spec.vocab_size} tokens) is split over TP{tp}, which must divide it"
            continue
        mixer, mlp = layer.mixer, layer.mlp
        if isinstance(mixer, Mamba2Mixer):
            if mixer.num_heads % tp or mixer.n_groups % tp:
                return (f"layer {index} is Mamba-2 with {mixer.num_heads} heads in {mixer.n_groups} groups; TP{tp} "
                        f"splits both, so it must divide both")
        elif isinstance(mixer, LinearAttentionMixer):
            key_heads = getattr(mixer, "key_heads", mixer.num_heads)
            if mixer.num_heads % tp or key_heads % tp:
                return (f"layer {index} is linear attention with {mixer.num_heads} heads and {key_heads} key heads; "
                        f"TP{tp} splits both, so it must divide both")
        elif isinstance(mixer, MambaMixer):
            if mixer.inner_size % tp:
                return f"layer {index} is Mamba with {mixer.inner_size} channels, which TP{tp} must divide"
        if isinstance(mixer, AttentionMixer) and (mixer.num_heads % tp or mixer.num_kv_heads % tp):
            return (f"layer {index} has {mixer.num_heads} query heads and {mixer.num_kv_heads} key/value heads; "
                    f"TP{tp} splits both by heads, so it must divide both")
        widths = ([mlp.intermediate_size] if isinstance(mlp, DenseMLP) else
                  [mlp.expert_intermediate_size, mlp.num_shared_experts * mlp.shared_intermediate_size]
                  if isinstance(mlp, MoEMLP) else [])
        for width in widths:
            if width % tp:
                return f"layer {index}'s MLP is {width} wide, which TP{tp} must divide"
    return None


def context_parallel_refusal(spec: ModelSpec, cp: int, tp: int) -> str | None:
    """Why ``spec`` cannot be split over ``cp`` context-parallel ranks (each then over ``tp`` sequence-parallel
    ones), or None: the sequence is cut into 2 cp load-balanced chunks; softmax and latent attention gather the
    group's keys and values, Mamba-2 and linear attention trade tokens for heads (``executor.model.context_parallel``)
    as Megatron-Core does, which the planner's ``context_parallel_limit`` states for both (a TP rank's heads split cp
    ways, Mamba-2's groups of B and C split or repeat over them; no Mamba-1)."""
    if cp == 1:
        return None
    if spec.seq_len % (2 * cp * tp):
        return (f"context parallelism cuts the sequence ({spec.seq_len} tokens) into 2 x CP{cp} chunks, each split "
                f"over TP{tp}, so 2 x {cp} x {tp} must divide it")
    return context_parallel_limit(spec, tp, cp)


def expert_parallel_refusal(spec: ModelSpec, ep: int) -> str | None:
    """Why ``spec``'s MoE layers cannot spread their experts over ``ep`` ranks, or None: each rank holds an equal
    share of every MoE layer's experts (the planner's rule, ``planner.parallel.search.expert_parallel_limit``)."""
    return expert_parallel_limit(spec, ep)


def execution_refusal(plan: Plan, spec: ModelSpec | None = None) -> SpecError | None:
    """Why this executor cannot run ``plan`` as planned (see the module docstring), or None. Without ``spec`` the
    layers are not checked against the plan's axes (the run checks them)."""
    parallel = plan.parallel
    if parallel is None:
        return None
    reason = unrun_settings_refusal(parallel)
    if reason is None and spec is not None:
        spec = planned_spec(plan, spec)   # (a vocabulary TP does not divide is padded, as Megatron-LM pads it)
        reason = (tensor_parallel_refusal(spec, parallel.tp) or context_parallel_refusal(spec, parallel.cp, parallel.tp)
                  or expert_parallel_refusal(spec, parallel.ep))
    if reason is not None:
        return SpecError("plan", f"is {parallel.short()}: {reason}; {EXPORT_HINT}")
    return None


def unrun_settings_refusal(parallel: ParallelConfig) -> str | None:
    """Why the plan's precision or expert TP is none this executor runs (it runs every sharding, in the run's dtype,
    with expert TP = TP, or 1: MoE parallel folding, ``executor.model.expert_parallel``), or None."""
    if parallel.precision == "fp8":
        return "FP8 GEMMs need Transformer Engine, which this executor does not use"
    if parallel.etp not in (1, parallel.tp):
        return f"expert TP {parallel.etp} is neither TP {parallel.tp} nor 1 (MoE parallel folding): not run here"
    return None
