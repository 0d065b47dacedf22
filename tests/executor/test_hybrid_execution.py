"""Hybrid plans run for real: tensor parallelism with sequence parallelism, context parallelism, data parallelism
with and without the sharded optimizer (ZeRO-1) and expert parallelism, inside the pipeline, each equal to the
one-process reference in float64 on gloo, and every collective an event with the rank's coordinate."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch

from executor.model.build import layer_parameter_counts
from executor.running.launch import run_plan
from executor.running.place import RankPlace
from executor.running.reference import compare_to_reference
from executor.running.scope import execution_refusal, planned_spec
from executor_plans import list_schedule, one_f_one_b
from planner.parallel.config import ParallelConfig
from planner.spec.model import load_model_spec

SEED, LR = 3, 0.5

# Every layer kind the executor splits over TP: grouped-query attention with biases, QK-norm, a sliding window and
# sinks; Mamba-2 (heads in groups) and Mamba-1 (biased projections); gated delta-net (fewer key heads than value
# heads) and lightning attention; latent attention (MLA, with a query latent); gated and plain MLPs, one with biases
# and a squared ReLU;
# biased MoE experts with a shared expert and a balancing loss; the embedding tied to the head.
TP_KINDS = load_model_spec({
    "format": "adaptis.model/v1", "name": "tp-kinds", "hidden_size": 32, "vocab_size": 96, "seq_len": 12,
    "micro_batch_size": 2, "tie_embeddings": True,
    "layers": [
        {"kind": "embedding"},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8,
                                      "qkv_bias": True, "output_bias": True, "qk_norm": True},
         "mlp": {"type": "dense", "intermediate_size": 48}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8,
                                      "window": 4, "sinks": True},
         "mlp": {"type": "moe", "num_experts": 4, "top_k": 2, "expert_intermediate_size": 16, "bias": True,
                 "num_shared_experts": 1, "shared_intermediate_size": 16, "aux_loss_coeff": 0.05}},
        {"kind": "decoder", "mixer": {"type": "mamba2", "num_heads": 4, "head_dim": 8, "state_size": 8,
                                      "conv_kernel": 3, "n_groups": 2},
         "mlp": {"type": "dense", "intermediate_size": 40, "gated": False, "bias": True,
                 "activation": "squared_relu"}},
        {"kind": "decoder", "mixer": {"type": "linear_attention", "num_heads": 4, "num_key_heads": 2, "head_dim": 8,
                                      "variant": "gated_delta"}},
        {"kind": "decoder", "mixer": {"type": "linear_attention", "num_heads": 4, "head_dim": 8,
                                      "variant": "lightning"}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 4, "head_dim": 12,
                                      "kv_lora_rank": 16, "q_lora_rank": 12, "rope_head_dim": 4, "v_head_dim": 8}},
        {"kind": "decoder", "mixer": {"type": "mamba", "inner_size": 64, "state_size": 8, "dt_rank": 2,
                                      "conv_kernel": 4, "conv_bias": False, "proj_bias": True}},
        {"kind": "head"},
    ],
})
# All-gathers of the sequence per micro-batch, F and I together (reduce-scatters as many): an attention, MLP or MoE
# block gathers and scatters in F and in I; the vocabulary-parallel embedding scatters in F and gathers in I, the
# head gathers in F and scatters in I.
GATHERS = {0: 1, 1: 4, 2: 4, 3: 4, 4: 2, 5: 2, 6: 2, 7: 2, 8: 1}
BLOCKS = {0: 0, 1: 2, 2: 2, 3: 2, 4: 1, 5: 1, 6: 1, 7: 1, 8: 0}   # what a full recomputation runs again (not the head)
# Sums over the group per micro-batch, F and I together: the head's cross-entropy reduces its maximum, target logit
# and sum of exponentials in F; Mamba-2's gated norm and lightning's norm over all heads their sum of squares, and
# Mamba-1 its x_proj's partial sums, in F and their gradients in I.
ALL_REDUCES = {0: 0, 1: 0, 2: 0, 3: 2, 4: 0, 5: 2, 6: 0, 7: 2, 8: 3}
FORWARD_ALL_REDUCES = {3: 1, 5: 1, 7: 1}   # what a full recomputation runs again

# MoE layers of every routing kind: top-2 with a shared expert and a balancing loss, top-1 (experts without a gate,
# squared ReLU: Nemotron-H's), biased experts
MOE_KINDS = load_model_spec({
    "format": "adaptis.model/v1", "name": "moe-kinds", "hidden_size": 32, "vocab_size": 96, "seq_len": 12,
    "micro_batch_size": 2,
    "layers": [
        {"kind": "embedding"},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8},
         "mlp": {"type": "moe", "num_experts": 4, "top_k": 2, "expert_intermediate_size": 16,
                 "num_shared_experts": 1, "shared_intermediate_size": 16, "aux_loss_coeff": 0.05}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8},
         "mlp": {"type": "moe", "num_experts": 4, "top_k": 1, "expert_intermediate_size": 16, "aux_loss_coeff": 0.02,
                 "gated": False, "activation": "squared_relu"}},
        {"kind": "mlp", "mlp": {"type": "moe", "num_experts": 8, "top_k": 2, "expert_intermediate_size": 8,
                                "bias": True, "router_groups": 4, "router_group_topk": 2}},
        {"kind": "head"},
    ],
})

# Latent MoEs (Nemotron 3's LatentMoE): MOE_KINDS' layers routed on the hidden state, their tokens projected to 8 of
# its 32 channels, sent and computed at that width, and projected back
LATENT_MOE = dataclasses.replace(MOE_KINDS, name="latent-moe", layers=tuple(
    dataclasses.replace(layer, mlp=dataclasses.replace(layer.mlp, latent_size=8)) if layer.mlp is not None else layer
    for layer in MOE_KINDS.layers))

# Context parallelism: learned absolute positions (GPT-2), rotary and position-free attention, windowed attention
# with sinks, chunked attention (Llama 4's; chunks of 6 tokens, whose edges fall inside the CP ranks' blocks of 4),
# latent attention (MLA), an MoE layer whose experts spread over the CP ranks (EP carved out of dp x cp)
CP_KINDS = load_model_spec({
    "format": "adaptis.model/v1", "name": "cp-kinds", "hidden_size": 32, "vocab_size": 96, "seq_len": 16,
    "micro_batch_size": 2, "norm": "layernorm", "position_embeddings": 16,
    "layers": [
        {"kind": "embedding"},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8,
                                      "window": 5, "sinks": True, "qkv_bias": True},
         "mlp": {"type": "moe", "num_experts": 4, "top_k": 2, "expert_intermediate_size": 16,
                 "aux_loss_coeff": 0.05}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 1, "head_dim": 8,
                                      "rotary": False, "qk_norm": True},
         "mlp": {"type": "dense", "intermediate_size": 48}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8,
                                      "chunk": 6}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 2, "num_kv_heads": 2, "head_dim": 8,
                                      "kv_lora_rank": 8, "rope_head_dim": 4}},
        {"kind": "head"},
    ],
})

# Context parallelism for the recurrent mixers (heads traded for tokens, as Megatron-Core runs Mamba-2 and gated
# delta-net): Mamba-2 with fewer groups of B and C on a TP rank than CP ranks (each group repeated over two ranks) and
# with more, gated delta-net with fewer key heads than value heads (and Qwen3-Next's MoE), lightning attention, beside
# softmax attention
SSM_CP_KINDS = load_model_spec({
    "format": "adaptis.model/v1", "name": "ssm-cp-kinds", "hidden_size": 32, "vocab_size": 96, "seq_len": 16,
    "micro_batch_size": 2,
    "layers": [
        {"kind": "embedding"},
        {"kind": "decoder", "mixer": {"type": "mamba2", "num_heads": 8, "head_dim": 4, "state_size": 4,
                                      "conv_kernel": 3, "n_groups": 2}},
        {"kind": "decoder", "mixer": {"type": "linear_attention", "num_heads": 8, "num_key_heads": 4, "head_dim": 4,
                                      "variant": "gated_delta"},
         "mlp": {"type": "moe", "num_experts": 4, "top_k": 2, "expert_intermediate_size": 16,
                 "num_shared_experts": 1, "shared_intermediate_size": 16, "aux_loss_coeff": 0.05}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8}},
        {"kind": "decoder", "mixer": {"type": "mamba2", "num_heads": 8, "head_dim": 4, "state_size": 4,
                                      "conv_kernel": 4, "n_groups": 4}},
        {"kind": "decoder", "mixer": {"type": "linear_attention", "num_heads": 4, "head_dim": 8,
                                      "variant": "lightning"}},
        {"kind": "head"},
    ],
})


def hybrid(plan, **degrees):
    return dataclasses.replace(plan, parallel=ParallelConfig(
        pp=plan.num_devices, num_microbatches=plan.num_microbatches, microbatch_size=TP_KINDS.micro_batch_size,
        **degrees))


def run_and_verify(tmp_path, plan, *, spec=TP_KINDS, steps=1, optimizer="sgd"):
    checkpoint = tmp_path / "layers"
    result = run_plan(plan, spec, seed=SEED, steps=steps, optimizer=optimizer, lr=LR, dtype="fp64",
                      checkpoint_dir=str(checkpoint), timeout_s=240)
    verification = compare_to_reference(checkpoint, planned_spec(plan, spec), num_microbatches=plan.num_microbatches,
                                        data_parallel=plan.parallel.dp, steps=steps, seed=SEED, lr=LR,
                                        optimizer=optimizer, dtype=torch.float64)
    assert verification.compared == sum(len(torch.load(path)) for path in checkpoint.glob("layer*.pt"))
    assert verification.largest_relative <= 1e-8, verification.worst
    assert result.losses == pytest.approx(verification.losses, rel=1e-9)
    assert result.balancing_losses == pytest.approx(verification.balancing_losses, rel=1e-9)
    assert all(loss is not None for loss in result.balancing_losses)
    return result


def collectives(result) -> Counter:
    return Counter((event["rank"], event["op"]) for event in result.events if event["type"] == "collective")


def test_tp2_pp2_with_split_backward_and_recomputation_on_a_v_shape_matches_one_process(tmp_path):
    """TP inside a zero-bubble V: I carries the sequence collectives, W only the deferred weight matmuls; each stage
    recomputes as planned (full, selective, none, full)."""
    recompute = ("full", "selective", "none", "full")
    plan = hybrid(list_schedule([[0, 1], [2], [3, 4], [5, 6, 7, 8]], [0, 1, 1, 0], num_microbatches=3,
                                split_backward=True), tp=2, sharding="none", recompute=recompute)
    assert any(action.type == "W" for action in plan.actions[0])
    result = run_and_verify(tmp_path, plan, steps=2, optimizer="adamw")
    counts = collectives(result)
    for rank in range(4):
        place = RankPlace.of(plan, rank)
        stages = plan.stages_on(place.pp)
        layers = [layer for stage in stages for layer in plan.stages[stage].layers]
        gathers = sum(GATHERS[layer] for layer in layers)
        recomputed = [BLOCKS[layer] for stage in stages for layer in plan.stages[stage].layers
                      if recompute[stage] == "full" and BLOCKS[layer]]
        # per step and micro-batch, and F's pairs again where the whole layer is recomputed (selective recomputation
        # holds no collective) but for the layer's last scatter: torch's checkpoint stops recomputing once it has
        # every tensor the backward needs
        assert counts[(rank, "tp_all_gather")] == 2 * 3 * (gathers + sum(recomputed))
        assert counts[(rank, "tp_reduce_scatter")] == 2 * 3 * (gathers + sum(recomputed) - len(recomputed))
        again = sum(FORWARD_ALL_REDUCES.get(layer, 0) for stage in stages for layer in plan.stages[stage].layers
                    if recompute[stage] == "full")
        assert counts[(rank, "tp_all_reduce")] == 2 * 3 * (sum(ALL_REDUCES[layer] for layer in layers) + again)
        assert counts[(rank, "tp_grad_all_reduce")] == 2


@pytest.mark.parametrize("placement", ["post", "sandwich"])
def test_norms_after_or_around_each_sublayer_run_under_tp2_pp2_as_one_process_and_are_held_as_planned(tmp_path,
                                                                                                  placement):
    """OLMo 2's norms after each sublayer and Gemma's before and after it (``ModelSpec.block_norms``) under TP 2 with
    sequence parallelism: each norm runs on its rank's slice of the sequence and its gradient is summed over the
    group, so the run equals one process. Every TP rank holds the extra norms whole, as many more parameters as the
    planner's per-GPU split adds (``planner.parallel.params``)."""
    from executor.model.layers import build_layer
    from executor.model.tensor_parallel import SequenceGroup, replicated_parameters, shard_layer
    from planner.parallel.params import layer_params
    spec = dataclasses.replace(TP_KINDS, block_norms=placement)
    run_and_verify(tmp_path, hybrid(one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7, 8]], num_microbatches=2), tp=2,
                                    sharding="none"), spec=spec)

    def held_whole(model) -> list[int]:
        counts = []
        for index in range(model.num_layers):
            layer = build_layer(model, index)
            shard_layer(layer, SequenceGroup(None, 0, 2))
            counts.append(sum(parameter.numel() for parameter in replicated_parameters([layer])))
        return counts

    ours, pre = held_whole(spec), held_whole(TP_KINDS)
    planned = [held.replicated for held in layer_params(spec)]
    planned_pre = [held.replicated for held in layer_params(TP_KINDS)]
    extra = [a - b for a, b in zip(ours, pre)]
    assert extra == [a - b for a, b in zip(planned, planned_pre)]
    assert extra == [0 if placement == "post" or layer.kind != "decoder"
                     else ((layer.mixer is not None) + (layer.mlp is not None)) * TP_KINDS.hidden_size
                     for layer in TP_KINDS.layers]   # one more a sublayer


@pytest.mark.parametrize("placement", ["pre", "sandwich"])
def test_a_tp_rank_holds_whole_exactly_the_parameters_the_planner_replicates(placement):
    """Every layer kind, sharded for one rank of TP 2: the parameters it keeps whole (whose gradients are summed over
    the group) are as many as ``planner.parallel.params`` replicates — norms (a LayerNorm's bias too), QK-norms,
    row-parallel output biases, MLA's duplicated down-projections and their norms, gated delta-net's output norm, a
    learned position table, the router; and of the routed experts, the output biases held whole by an expert's TP
    ranks (``expert_whole``) and the rest split over them (``expert``)."""
    from executor.model.layers import build_layer
    from executor.model.tensor_parallel import SequenceGroup, replicated_parameters, shard_layer
    from executor_plans import modern_kinds_spec
    from planner.parallel.params import layer_params
    for model in (TP_KINDS, MOE_KINDS, modern_kinds_spec()):
        spec = dataclasses.replace(model, block_norms=placement)
        for index, planned in enumerate(layer_params(spec)):
            layer = build_layer(spec, index)
            shard_layer(layer, SequenceGroup(None, 0, 2))
            whole = {id(parameter) for parameter in replicated_parameters([layer])}
            named = list(layer.named_parameters())
            experts = [(name, parameter) for name, parameter in named if name.startswith("mlp.experts.")]
            assert sum(parameter.numel() for name, parameter in named if id(parameter) in whole
                       and not name.startswith("mlp.experts.")) == planned.replicated, (spec.name, index)
            # routed experts: their output biases whole on each expert's TP ranks, the rest split over them
            assert sum(parameter.numel() for _, parameter in experts if id(parameter) in whole) == planned.expert_whole
            assert sum(parameter.numel() for _, parameter in experts if id(parameter) not in whole) * 2 == \
                planned.expert, (spec.name, index)


def test_gemmas_and_granites_scalars_run_under_tp2_pp2_as_one_process(tmp_path):
    """The embedding, residual and logits multipliers and the logits soft-cap (``ModelSpec``), and every attention's
    scale and soft-cap (sinks and latent attention too), under TP 2 with sequence parallelism and a vocabulary-parallel
    head, whose soft-cap acts on each rank's slice of the logits: the run equals one process."""
    from planner.spec.model import AttentionMixer
    layers = tuple(dataclasses.replace(layer, mixer=dataclasses.replace(layer.mixer, softmax_scale=0.3, softcap=4.0))
                   if isinstance(layer.mixer, AttentionMixer) else layer for layer in TP_KINDS.layers)
    spec = dataclasses.replace(TP_KINDS, layers=layers, embedding_multiplier=2.0, residual_multiplier=0.5,
                               logits_multiplier=0.7, logits_softcap=3.0)
    assert sum(isinstance(layer.mixer, AttentionMixer) for layer in layers) == 3
    run_and_verify(tmp_path, hybrid(one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7, 8]], num_microbatches=2), tp=2,
                                    sharding="none"), spec=spec)


def test_a_vocabulary_tp_does_not_divide_is_padded_as_megatron_pads_it_and_matches_one_process(tmp_path):
    """97 tokens under TP 2 (GPT-2's 50,257 are as odd): padded to 256, a multiple of 128 x TP as Megatron-LM's
    --make-vocab-size-divisible-by pads, the tied embedding and head each TP rank's half of it."""
    spec = dataclasses.replace(TP_KINDS, vocab_size=97)
    plan = hybrid(one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7, 8]], num_microbatches=2), tp=2, sharding="none")
    assert planned_spec(plan, spec).vocab_size == 256 and execution_refusal(plan, spec) is None
    run_and_verify(tmp_path, plan, spec=spec)
    embedding = torch.load(tmp_path / "layers" / "layer0000.pt")
    assert {tuple(value.shape) for name, value in embedding.items() if "weight" in name} == {(256, 32)}


def test_dp2_pp2_with_the_sharded_optimizer_matches_one_process(tmp_path):
    plan = hybrid(one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7, 8]], num_microbatches=3), dp=2, sharding="optimizer")
    result = run_and_verify(tmp_path, plan, steps=2, optimizer="adamw")
    counts = collectives(result)
    assert all(counts[(rank, "dp_all_reduce")] == counts[(rank, "dp_optimizer_step")] == 2 for rank in range(4))
    assert all(counts[(rank, "pp_tied_all_reduce")] == 2 for rank in range(4))


def test_ep2_dp2_pp2_with_split_backward_and_sharded_expert_state_matches_one_process(tmp_path):
    """Each rank holds half of every MoE layer's experts; its replica's tokens travel to them and back; every layer
    is recomputed (the balancing loss reported once)."""
    plan = hybrid(list_schedule([[0, 1], [2], [3], [4]], [0, 1, 1, 0], num_microbatches=3, split_backward=True),
                  dp=2, ep=2, sharding="optimizer", recompute="full")
    result = run_and_verify(tmp_path, plan, spec=MOE_KINDS, optimizer="adamw")
    assert all(loss is not None for loss in result.balancing_losses)
    counts = collectives(result)
    for rank in range(4):
        place = RankPlace.of(plan, rank)
        moe_blocks = sum(1 for stage in plan.stages_on(place.pp) for layer in plan.stages[stage].layers
                         if layer in (1, 2, 3))
        # dispatch and combine run again where the layer's forward is recomputed (every layer here)
        for op, times in (("ep_dispatch", 2), ("ep_combine", 2), ("ep_dispatch_backward", 1),
                          ("ep_combine_backward", 1)):
            assert counts[(rank, op)] == 3 * moe_blocks * times, (rank, op)
        # expert parameters are summed over the EP group by the exchanges themselves: DP sums the rest only
        assert counts[(rank, "dp_all_reduce")] == 1 and counts[(rank, "edp_all_reduce")] == 0


def test_cp2_pp2_with_experts_spread_over_the_cp_ranks_matches_one_process(tmp_path):
    """Each CP rank holds two of the sequence's four chunks (causal load balancing) and gathers every rank's keys and
    values; the MoE layer's experts are spread over the same two ranks."""
    plan = hybrid(one_f_one_b([[0, 1, 2], [3, 4, 5]], num_microbatches=2), cp=2, ep=2, sharding="optimizer")
    result = run_and_verify(tmp_path, plan, spec=CP_KINDS, optimizer="adamw")
    counts = collectives(result)
    # per pipeline rank and micro-batch: attention gathers keys and values in F and scatters their gradients in B, MLA
    # its latents
    gathers = {0: 2 + 2, 1: 2 + 1}
    for rank in range(4):
        pp = RankPlace.of(plan, rank).pp
        expected = 2 * gathers[pp]
        assert counts[(rank, "cp_all_gather")] == counts[(rank, "cp_reduce_scatter")] == expected
        assert counts[(rank, "dp_all_reduce")] == 1   # over dp x cp: every parameter saw this rank's tokens only


def test_moe_parallel_folding_routes_each_tp_ranks_own_tokens_to_whole_experts_and_matches_one_process(tmp_path):
    """Expert TP 1 under TP 2 (Megatron-Core's MoE parallel folding): the EP group of 4 spans the TP ranks and the DP
    replicas, each TP rank routes its own sequence-parallel tokens to whole experts without gathering the sequence,
    and the shared expert stays a TP-split block that gathers and scatters."""
    plan = hybrid(one_f_one_b([[0, 1, 2], [3, 4]], num_microbatches=2), tp=2, dp=2, ep=4, etp=1, sharding="optimizer")
    result = run_and_verify(tmp_path, plan, spec=MOE_KINDS, optimizer="adamw")
    counts = collectives(result)
    # per micro-batch, F and I: the vocabulary-parallel embedding 1, attention 2, the shared expert 2, the head 1; the
    # routed MoE blocks none (they gather 2 each unfolded)
    gathers, moe_blocks = {0: 1 + 2 + 2 + 2, 1: 1}, {0: 2, 1: 1}
    for rank in range(8):
        pp = RankPlace.of(plan, rank).pp
        assert counts[(rank, "tp_all_gather")] == 2 * gathers[pp], rank
        assert counts[(rank, "ep_dispatch")] == counts[(rank, "ep_combine")] == 2 * moe_blocks[pp]
        assert counts[(rank, "edp_all_reduce")] == 0   # expert DP 1: each expert on one rank of the stage


@pytest.mark.parametrize("etp", [2, 1], ids=["experts-split-over-tp", "folded"])
def test_a_latent_moe_sends_its_latents_and_matches_one_process_under_tp_ep_and_pp(tmp_path, etp):
    """TP 2 × DP 2 × PP 2 with EP 2 (experts split over TP: the up-projection works on each rank's partial sums and
    adds its bias once) or EP 4 folded (each TP rank projects its own tokens): both equal one process, and every
    dispatch and combine carries tokens of the latent width, a quarter of the hidden size."""
    plan = hybrid(one_f_one_b([[0, 1, 2], [3, 4]], num_microbatches=2), tp=2, dp=2, ep=4 if etp == 1 else 2,
                  etp=etp, sharding="optimizer")
    result = run_and_verify(tmp_path, plan, spec=LATENT_MOE, optimizer="adamw")
    ep = plan.parallel.ep
    for rank in range(8):
        events = [event for event in result.events if event["type"] == "collective" and event["rank"] == rank]
        # each dispatch first exchanges the per-rank counts (ep int64s), then the arriving slots' experts (one int64
        # each): so the slots that arrived, and the fp64 values the dispatch moved for each of them
        counts = [event["bytes"] for event in events if event["op"] == "ep_counts"]
        arrived = (sum(counts) - len(counts) // 2 * ep * 8) // 8
        dispatched = sum(event["bytes"] for event in events if event["op"] == "ep_dispatch")
        assert arrived > 0 and dispatched == arrived * 8 * 8, (rank, arrived, dispatched)   # 8 latent channels


def test_moe_parallel_folding_under_tp2_cp2_counts_the_balancing_loss_over_the_tp_x_cp_tokens(tmp_path):
    """Folded under TP 2 x CP 2 with EP 2: each rank routes a quarter of the micro-batch's tokens, the balancing
    loss counts the routings of all four (the TP x CP group), and each expert's gradient is summed over its two
    holders (expert DP 2)."""
    spec = dataclasses.replace(MOE_KINDS, seq_len=16)
    plan = hybrid(one_f_one_b([[0, 1, 2], [3, 4]], num_microbatches=2), tp=2, cp=2, ep=2, etp=1,
                  sharding="optimizer")
    result = run_and_verify(tmp_path, plan, spec=spec, optimizer="adamw")
    counts = collectives(result)
    assert all(counts[(rank, "edp_all_reduce")] == 1 for rank in range(8))
    # the routing counts summed over the TP x CP group: per micro-batch, each MoE block with a balancing loss (layers 1
    # and 2; layer 3 has none)
    assert all(counts[(rank, "tpcp_all_reduce")] == 2 * {0: 2, 1: 0}[RankPlace.of(plan, rank).pp] for rank in range(8))


def test_tp2_cp2_pp2_recurrent_mixers_trade_tokens_for_heads_and_match_one_process(tmp_path):
    """Mamba-2, gated delta-net and lightning attention scan the whole sequence on each CP rank's share of its TP
    rank's heads: one all-to-all there and one back in F, the same two in B; attention gathers as before."""
    plan = hybrid(one_f_one_b([[0, 1, 2, 3], [4, 5, 6]], num_microbatches=2), tp=2, cp=2, sharding="optimizer")
    result = run_and_verify(tmp_path, plan, spec=SSM_CP_KINDS, optimizer="adamw")
    counts = collectives(result)
    recurrent = {0: 2, 1: 2}   # per pipeline rank: Mamba-2 and gated delta-net, then Mamba-2 and lightning
    for rank in range(8):
        pp = RankPlace.of(plan, rank).pp
        assert counts[(rank, "cp_all_to_all")] == 2 * 2 * 2 * recurrent[pp]   # micro-batches x (F, B) x (there, back)
        assert counts[(rank, "cp_all_gather")] == 2 * 2 * (pp == 0)           # attention's keys and values
        assert counts[(rank, "dp_all_reduce")] == 1


def test_tp2_pp2_dp2_on_eight_ranks_matches_one_process_and_folds_the_replicas(tmp_path):
    plan = hybrid(one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7, 8]], num_microbatches=2), tp=2, dp=2,
                  sharding="optimizer")
    result = run_and_verify(tmp_path, plan)
    events = [event for event in result.events if event["type"] in ("action", "collective")]
    assert {event["rank"] for event in events} == set(range(8))
    for event in events:
        place = RankPlace.of(plan, event["rank"])
        assert event["coordinate"] == place.coordinate and event["device"] == place.pp
    # each pipeline rank's figures are folded over its 4 replicas: the median of their busy times
    for device in result.summary["per_device"]:
        replicas = [rank for rank in range(8) if RankPlace.of(plan, rank).pp == device["device"]]
        busy = sorted(sum(e["end_ms"] - e["start_ms"] for e in events if e["type"] == "action" and e["rank"] == rank)
                      for rank in replicas)
        assert device["replicas"] == 4
        assert device["busy_ms"] == pytest.approx((busy[1] + busy[2]) / 2)
        assert device["busy_spread_ms"] == pytest.approx(busy[-1] - busy[0])
        assert set(device["collective_ms"]) >= {"tp_all_gather", "tp_reduce_scatter", "dp_all_reduce"}


def test_dp2_pp2_fully_sharded_matches_one_process_with_its_gathers_and_reductions(tmp_path):
    """ZeRO-3 (``executor.running.sharding``): each layer's weights gathered just before its forward and its
    backward and freed after each, the step's gradients reduce-scattered into the shards once, the optimizer on the
    shards; the tied embedding's gradient still summed across the pipeline first."""
    plan = hybrid(one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7, 8]], num_microbatches=3), dp=2, sharding="full")
    result = run_and_verify(tmp_path, plan, steps=2, optimizer="adamw")
    counts = collectives(result)
    parameters = layer_parameter_counts(TP_KINDS)
    for rank in range(4):
        layers = plan.stages[RankPlace.of(plan, rank).pp].layers
        # a collective a layer: 2 steps x 3 micro-batches x (F, B) gathers (the embedding's in F only: its backward
        # needs the tokens), one reduction a step
        backward_gathers = len(layers) - (TP_KINDS.layers[layers[0]].kind == "embedding")
        assert counts[(rank, "dp_all_gather")] == 2 * 3 * (len(layers) + backward_gathers), rank
        assert counts[(rank, "dp_reduce_scatter")] == 2 * len(layers)
        assert counts[(rank, "dp_optimizer_step")] == 2
        assert counts[(rank, "dp_all_reduce")] == 0 and counts[(rank, "pp_tied_all_reduce")] == 2
    # each gather moves its layer's whole parameters in float64 (padded to a multiple of the group's 2 ranks)
    gathered = Counter(event["bytes"] for event in result.events
                       if event["type"] == "collective" and event["op"] == "dp_all_gather" and event["rank"] == 0)
    assert gathered == Counter({8 * (parameters[layer] + parameters[layer] % 2): 2 * 3 * (1 + (layer > 0))
                                for layer in plan.stages[0].layers})


def test_ep2_dp4_pp2_fully_sharded_shards_experts_over_expert_dp_and_matches_one_process(tmp_path):
    """With four DP replicas and EP2 each expert lives on two ranks (expert DP 2): its weights are sharded over those
    two, the rest over all four; both gathered around F and B (the embedding around F), both reduced once a step."""
    plan = hybrid(one_f_one_b([[0, 1, 2], [3, 4]], num_microbatches=2), dp=4, ep=2, sharding="full")
    result = run_and_verify(tmp_path, plan, spec=MOE_KINDS, optimizer="adamw")
    counts = collectives(result)
    for rank in range(8):
        layers = plan.stages[RankPlace.of(plan, rank).pp].layers
        moe = sum(1 for layer in layers if layer in (1, 2, 3))
        assert counts[(rank, "edp_all_gather")] == 2 * 2 * moe and counts[(rank, "edp_reduce_scatter")] == moe
        backward_gathers = len(layers) - (MOE_KINDS.layers[layers[0]].kind == "embedding")   # its F only
        assert counts[(rank, "dp_all_gather")] == 2 * (len(layers) + backward_gathers)
        assert counts[(rank, "dp_reduce_scatter")] == len(layers)
        assert counts[(rank, "edp_optimizer_step")] == counts[(rank, "dp_optimizer_step")] == 1


def test_a_fully_sharded_zero_bubble_v_with_both_ends_of_the_tied_table_on_one_rank_matches_one_process(tmp_path):
    """DP2 x PP2, fully sharded, on a zero-bubble V whose first rank holds the embedding and the head it is tied to,
    each stage recomputing as planned: a layer is gathered for its forward and for its backward (I), the
    embedding's prologue for its forward only (its weight gradient needs the tokens), W for nothing; the tied table
    is one unit on that rank, gathered for both ends (the head's final norm is a unit of its own)."""
    recompute = ("full", "selective", "none", "full")
    plan = hybrid(list_schedule([[0, 1], [2], [3, 4], [5, 6, 7, 8]], [0, 1, 1, 0], num_microbatches=3,
                                split_backward=True), dp=2, sharding="full", recompute=recompute)
    result = run_and_verify(tmp_path, plan, steps=2, optimizer="adamw")
    counts = collectives(result)
    units = {8: 2}   # a unit a layer, the head's two: the tied table and its norm
    for rank in range(4):
        layers = [layer for stage in plan.stages_on(RankPlace.of(plan, rank).pp) for layer in plan.stages[stage].layers]
        forward = sum(units.get(layer, 1) for layer in layers)
        backward = forward - (0 in layers)
        assert counts[(rank, "dp_all_gather")] == 2 * 3 * (forward + backward), rank
        assert counts[(rank, "dp_reduce_scatter")] == 2 * len(layers), rank
        assert counts[(rank, "pp_tied_all_reduce")] == 0, "both ends on one rank: nothing to sum across the pipeline"


def test_selective_recomputation_by_megatron_cores_modules_on_a_tp2_v_shape_matches_one_process(tmp_path):
    """Every stage recomputes the modules the plan was made with (``meta.recompute_modules``): latent attention's
    up-projections, the norms before it and before the MoE, the experts' activation, the shared experts and the
    dense MLPs, each re-run inside I. The dense MLPs' re-runs gather their sequence again (a module under checkpoint
    holds its collectives); their last scatter is not re-run (torch's checkpoint stops once it has every tensor the
    backward needs)."""
    modules = "core_attn,mla_up_proj,moe_act,mlp,layernorm,shared_experts"
    plan = hybrid(list_schedule([[0, 1], [2], [3, 4], [5, 6, 7, 8]], [0, 1, 1, 0], num_microbatches=3,
                                split_backward=True), tp=2, sharding="none", recompute="selective")
    plan = dataclasses.replace(plan, meta={**plan.meta, "recompute_modules": modules})
    result = run_and_verify(tmp_path, plan, steps=2, optimizer="adamw")
    counts = collectives(result)
    dense = {1, 3}   # TP_KINDS' layers with a dense MLP
    for rank in range(4):
        layers = [layer for stage in plan.stages_on(RankPlace.of(plan, rank).pp) for layer in plan.stages[stage].layers]
        gathers = sum(GATHERS[layer] for layer in layers)
        assert counts[(rank, "tp_all_gather")] == 2 * 3 * (gathers + len(dense.intersection(layers)))
        assert counts[(rank, "tp_reduce_scatter")] == 2 * 3 * gathers


def test_selective_recomputation_of_whole_moe_layers_under_ep2_dp2_pp2_matches_one_process(tmp_path):
    """``moe`` re-runs each MoE layer but its input in the backward, its tokens' dispatch and return too, with
    ``layernorm`` freeing the norm before it; the balancing loss is reported once."""
    plan = hybrid(list_schedule([[0, 1], [2], [3], [4]], [0, 1, 1, 0], num_microbatches=3, split_backward=True),
                  dp=2, ep=2, sharding="optimizer", recompute="selective")
    plan = dataclasses.replace(plan, meta={**plan.meta, "recompute_modules": "moe,layernorm"})
    result = run_and_verify(tmp_path, plan, spec=MOE_KINDS, optimizer="adamw")
    assert all(loss is not None for loss in result.balancing_losses)
    counts = collectives(result)
    for rank in range(4):
        moe_blocks = sum(1 for stage in plan.stages_on(RankPlace.of(plan, rank).pp)
                         for layer in plan.stages[stage].layers if layer in (1, 2, 3))
        # dispatch and combine run again in the backward (the module holds them), as under full recomputation
        for op, times in (("ep_dispatch", 2), ("ep_combine", 2), ("ep_dispatch_backward", 1),
                          ("ep_combine_backward", 1)):
            assert counts[(rank, op)] == 3 * moe_blocks * times, (rank, op)


# More experts than one step's tokens: top-1 of 16 experts over 16 tokens a step leaves some expert unchosen
SPARSE_MOE = load_model_spec({
    "format": "adaptis.model/v1", "name": "sparse-moe", "hidden_size": 16, "vocab_size": 32, "seq_len": 4,
    "micro_batch_size": 1,
    "layers": [
        {"kind": "embedding"},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 2, "num_kv_heads": 2, "head_dim": 8},
         "mlp": {"type": "moe", "num_experts": 16, "top_k": 1, "expert_intermediate_size": 8, "aux_loss_coeff": 0.01}},
        {"kind": "head"},
    ],
})


def test_an_expert_no_token_chose_is_stepped_by_adamw_on_its_zero_gradient_in_every_layout(tmp_path):
    """An expert a step's tokens never reached has a zero gradient (Megatron-LM's gradient buffers hold one for every
    parameter), so AdamW decays it: in one process, where nothing reduces its gradient, and under DP, where the
    all-reduce makes it zero either way. (The reference used to skip such an expert while DP stepped it: a verify
    failure on any MoE run that left an expert idle.)"""
    from executor.running.reference import initial_state, reference_training

    plan = hybrid(one_f_one_b([[0, 1], [2]], num_microbatches=2), dp=2)
    before = initial_state(SPARSE_MOE, seed=SEED)
    after, _, _ = reference_training(SPARSE_MOE, num_microbatches=2, data_parallel=2, steps=1, seed=SEED, lr=LR,
                                     optimizer="adamw")
    decay = 1 - LR * torch.optim.AdamW([torch.zeros(1)]).defaults["weight_decay"]
    weights = {expert: [name for name in before[1] if name.startswith(f"mlp.experts.{expert}.")]
               for expert in range(16)}
    # unchosen: no gradient moved it (at most AdamW's weight decay did)
    idle = [expert for expert, names in weights.items() if all(
        torch.equal(after[1][name], before[1][name]) or torch.equal(after[1][name], before[1][name] * decay)
        for name in names)]
    assert idle and len(idle) < 16
    assert all(torch.equal(after[1][name], before[1][name] * decay) for expert in idle for name in weights[expert])
    run_and_verify(tmp_path, plan, spec=SPARSE_MOE, optimizer="adamw")
