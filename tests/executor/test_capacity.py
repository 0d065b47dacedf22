"""The executor's memory guard: model state plus the activations a rank's own order keeps in flight."""

from __future__ import annotations

import pytest
import torch

from executor.running import capacity
from executor.running.capacity import ACTIVATION_TENSORS_PER_LAYER, check_capacity, rank_bytes
from executor.model import layer_parameter_counts
from executor_plans import every_kind_spec, gpipe, one_f_one_b
from planner.errors import SpecError
from planner.spec.model import load_model_spec
from planner.spec.presets import load_model_preset

SPEC = load_model_preset("tiny-llama")
STAGES = [list(range(SPEC.num_layers // 2)), list(range(SPEC.num_layers // 2, SPEC.num_layers))]


def _layer_activation_bytes(element=4):
    return SPEC.micro_batch_size * SPEC.seq_len * SPEC.hidden_size * element * ACTIVATION_TENSORS_PER_LAYER


def _state_bytes(layers, element=4, copies=4):
    counts = layer_parameter_counts(SPEC)
    return sum(counts[layer] for layer in layers) * element * copies


def test_a_gpipe_rank_holds_every_micro_batch_and_a_1f1b_rank_one_per_stage_to_the_end():
    microbatches = 8
    first = STAGES[0]
    held_gpipe = rank_bytes(gpipe(STAGES, [0, 1], microbatches), SPEC, 0, torch.float32, "adamw") - _state_bytes(first)
    held_1f1b = rank_bytes(one_f_one_b(STAGES, microbatches), SPEC, 0, torch.float32, "adamw") - _state_bytes(first)
    assert held_gpipe == microbatches * len(first) * _layer_activation_bytes()
    assert held_1f1b == 2 * len(first) * _layer_activation_bytes()


def test_the_last_rank_of_1f1b_holds_one_micro_batch_with_its_logits():
    last = STAGES[1]
    held = rank_bytes(one_f_one_b(STAGES, 8), SPEC, 1, torch.float32, "sgd") - _state_bytes(last, copies=2)
    logits = SPEC.micro_batch_size * SPEC.seq_len * SPEC.vocab_size * 4 * 2
    assert SPEC.layers[-1].kind == "head"
    assert held == len(last) * _layer_activation_bytes() + logits


def test_a_schedule_that_keeps_too_many_micro_batches_in_flight_is_refused_where_1f1b_fits(monkeypatch):
    plans = {"1f1b": one_f_one_b(STAGES, 16), "gpipe": gpipe(STAGES, [0, 1], 16)}
    need = {name: sum(rank_bytes(plan, SPEC, rank, torch.float32, "adamw") for rank in (0, 1))
            for name, plan in plans.items()}
    host_bytes = (need["1f1b"] + need["gpipe"]) / 2 / capacity.USABLE_FRACTION   # a host between the two
    monkeypatch.setattr(capacity, "device_capacity_bytes", lambda device: host_bytes)
    check_capacity(plans["1f1b"], SPEC, device=torch.device("cpu"), dtype=torch.float32, optimizer="adamw")
    with pytest.raises(SpecError, match="needs ~.* GiB across 2 CPU ranks"):
        check_capacity(plans["gpipe"], SPEC, device=torch.device("cpu"), dtype=torch.float32, optimizer="adamw")


@pytest.mark.parametrize("degrees, expected", [
    ({"cp": 4}, "layer 3 is linear_attention with 2 and 2 heads, which CP4 splits on each of TP1's shares, so 1 x 4 "
                "must divide them"),
    ({"tp": 2, "cp": 2, "dp": 2, "ep": 4, "recompute": "full"}, "layer 2 has 4 query heads and 1 key/value heads")])
def test_a_hybrid_plan_the_executor_cannot_run_is_refused_with_the_reason_before_any_rank_starts(
        degrees, expected, monkeypatch):
    from executor.running import launch
    from executor.running.scope import execution_refusal
    from planner.parallel.config import ParallelConfig

    spec = every_kind_spec(seq_len=16)
    plan = one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7]], 4)
    plan.parallel = ParallelConfig(pp=2, num_microbatches=4, microbatch_size=spec.micro_batch_size, **degrees)
    refusal = execution_refusal(plan, spec)
    assert refusal.field == "plan" and expected in refusal.reason
    assert plan.parallel.short() in refusal.reason and "Megatron-LM or torchtitan" in refusal.reason
    started = []
    monkeypatch.setattr(launch, "_start_ranks", lambda *args, **kwargs: started.append(args) or [])
    with pytest.raises(SpecError) as caught:
        launch.run_plan(plan, spec, backend="gloo", steps=1)
    assert caught.value.reason == refusal.reason and not started


def test_tensor_parallelism_is_refused_for_the_layers_it_cannot_split_naming_the_layer():
    from executor.running.scope import (context_parallel_refusal, execution_refusal, expert_parallel_refusal,
                                        tensor_parallel_refusal)
    from planner.parallel.config import ParallelConfig

    plan = one_f_one_b(STAGES, 4)
    plan.parallel = ParallelConfig(tp=2, pp=2, num_microbatches=4)
    assert execution_refusal(plan, SPEC) is None   # tiny-llama: attention and dense MLPs
    refusal = execution_refusal(plan, every_kind_spec())
    assert refusal.field == "plan" and "layer 2 has 4 query heads and 1 key/value heads" in refusal.reason
    assert plan.parallel.short() in refusal.reason
    attention = {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8}
    dense = {"type": "dense", "intermediate_size": 48}

    def spec(layer, seq_len=12):
        return load_model_spec({"format": "adaptis.model/v1", "name": "t", "hidden_size": 32, "vocab_size": 64,
                                "seq_len": seq_len, "layers": [{"kind": "embedding"}, layer, {"kind": "head"}]})
    assert tensor_parallel_refusal(spec({"kind": "decoder", "mixer": attention, "mlp": dense}), 2) is None
    assert "2 key/value heads" in tensor_parallel_refusal(spec({"kind": "decoder", "mixer": attention}), 4)
    assert "must divide it" in tensor_parallel_refusal(spec({"kind": "decoder", "mixer": attention}, 10), 4)
    assert "vocabulary (64 tokens) is split over TP128" in tensor_parallel_refusal(
        spec({"kind": "decoder", "mixer": attention}, 128), 128)
    mamba = {"type": "mamba2", "num_heads": 4, "head_dim": 8, "state_size": 8, "conv_kernel": 3, "n_groups": 2}
    assert tensor_parallel_refusal(spec({"kind": "decoder", "mixer": mamba}), 2) is None
    assert "Mamba-2 with 4 heads in 2 groups; TP4 splits both" in tensor_parallel_refusal(
        spec({"kind": "decoder", "mixer": mamba}), 4)
    linear = {"type": "linear_attention", "num_heads": 4, "num_key_heads": 2, "head_dim": 8, "variant": "gated_delta"}
    assert tensor_parallel_refusal(spec({"kind": "decoder", "mixer": linear}), 2) is None
    assert "linear attention with 4 heads and 2 key heads; TP4 splits both" in tensor_parallel_refusal(
        spec({"kind": "decoder", "mixer": linear}), 4)
    selective = {"type": "mamba", "inner_size": 48, "state_size": 4, "dt_rank": 3, "conv_kernel": 3}
    assert tensor_parallel_refusal(spec({"kind": "decoder", "mixer": selective}), 2) is None
    assert "layer 1 is Mamba with 48 channels, which TP32 must divide" in (
        tensor_parallel_refusal(spec({"kind": "decoder", "mixer": selective}, 96), 32))
    moe = {"type": "moe", "num_experts": 4, "top_k": 2, "expert_intermediate_size": 16}
    assert tensor_parallel_refusal(spec({"kind": "mlp", "mlp": moe}), 2) is None
    assert "layer 1's MLP is 16 wide, which TP32 must divide" in tensor_parallel_refusal(
        spec({"kind": "mlp", "mlp": moe}, 96), 32)
    moe_layer = spec({"kind": "mlp", "mlp": moe})
    assert "layer 1 has 4 experts, which EP8 must divide" in expert_parallel_refusal(moe_layer, 8)
    assert expert_parallel_refusal(moe_layer, 4) is None
    latent = {**attention, "num_kv_heads": 4, "kv_lora_rank": 16, "rope_head_dim": 4}
    assert tensor_parallel_refusal(spec({"kind": "decoder", "mixer": latent}), 2) is None
    assert "4 query heads and 4 key/value heads; TP8" in tensor_parallel_refusal(
        spec({"kind": "decoder", "mixer": latent}, 16), 8)
    assert "48 wide" in tensor_parallel_refusal(spec({"kind": "mlp", "mlp": dense}, 96), 32)
    assert context_parallel_refusal(spec({"kind": "decoder", "mixer": attention}, 16), 2, 2) is None
    assert "2 x 2 x 2 must divide it" in context_parallel_refusal(spec({"kind": "decoder", "mixer": attention}), 2, 2)
    # Mamba-2 and linear attention trade tokens for heads: each TP rank's heads split over CP, B and C's groups split
    # or repeated over it (Megatron-Core's MambaContextParallel); Mamba-1 has no CP form
    assert context_parallel_refusal(spec({"kind": "decoder", "mixer": mamba}, 16), 2, 1) is None
    assert context_parallel_refusal(spec({"kind": "decoder", "mixer": mamba}, 16), 4, 1) is None   # groups repeated
    assert context_parallel_refusal(spec({"kind": "decoder", "mixer": mamba}, 16), 2, 2) is None
    assert "mamba2 with 4 heads, which CP8 splits on each of TP1's shares, so 1 x 8 must divide them" in (
        context_parallel_refusal(spec({"kind": "decoder", "mixer": mamba}, 16), 8, 1))
    odd_groups = {**mamba, "num_heads": 12, "n_groups": 3}
    assert "Mamba-2 with 3 groups, 3 on each TP1 rank, which CP2 must divide or be a multiple of" in (
        context_parallel_refusal(spec({"kind": "decoder", "mixer": odd_groups}, 16), 2, 1))
    assert context_parallel_refusal(spec({"kind": "decoder", "mixer": linear}, 16), 2, 1) is None
    assert "linear_attention with 4 and 2 heads, which CP2 splits on each of TP2's shares" in (
        context_parallel_refusal(spec({"kind": "decoder", "mixer": linear}, 16), 2, 2))
    assert "layer 1 is a Mamba-1 layer: Mamba-1 has no context-parallel form" in context_parallel_refusal(
        spec({"kind": "decoder", "mixer": selective}, 16), 2, 1)


def test_a_pipeline_plan_v1_or_v2_with_only_the_pipeline_axis_is_run():
    from executor.running.scope import execution_refusal
    from planner.parallel.config import ParallelConfig

    plan = one_f_one_b(STAGES, 4)
    assert plan.parallel is None and execution_refusal(plan) is None
    plan.parallel = ParallelConfig(pp=2, num_microbatches=4, microbatch_size=2)
    assert execution_refusal(plan) is None


def _hybrid(plan, **degrees):
    from planner.parallel.config import ParallelConfig

    plan.parallel = ParallelConfig(pp=2, num_microbatches=plan.num_microbatches,
                                   microbatch_size=SPEC.micro_batch_size, **degrees)
    return plan


def _first_stage_held_on_a_tp2_gpu():
    """By hand, each layer of the first stage: TP2 splits the embedding's vocabulary and each decoder's projections;
    a decoder's two norms stay whole on both ranks (Megatron's theoretical_memory_usage)."""
    counts, hidden = layer_parameter_counts(SPEC), SPEC.hidden_size
    first = STAGES[0]
    assert SPEC.layers[first[0]].kind == "embedding" and all(SPEC.layers[i].kind == "decoder" for i in first[1:])
    return [counts[first[0]] / 2] + [(counts[i] - 2 * hidden) / 2 + 2 * hidden for i in first[1:]]


@pytest.mark.parametrize("sharding, bytes_per_held, bytes_per_largest_layer", [
    ("none", 4 + 4 + 8, 0),           # float32 weights, gradients and AdamW's two moments, all whole
    ("optimizer", 4 + 4 + 8 / 2, 0),  # ZeRO-1 over DP2: half the moments
    ("full", 4 / 2 + 4 + 8 / 2, 4)])  # the weights' shard, whole gradients, and one layer's weights while it runs
def test_a_gpu_of_a_hybrid_plan_holds_its_tp_share_and_a_data_parallel_shard_of_what_its_sharding_shards(
        sharding, bytes_per_held, bytes_per_largest_layer):
    plan = _hybrid(one_f_one_b(STAGES, 8), tp=2, dp=2, sharding=sharding)
    # 1F1B's first pipeline rank keeps 2 micro-batches in flight; TP2 makes them sequence-parallel (half each)
    activations = 2 * len(STAGES[0]) * _layer_activation_bytes() / 2
    state = rank_bytes(plan, SPEC, 0, torch.float32, "adamw") - activations
    held = _first_stage_held_on_a_tp2_gpu()
    assert state == pytest.approx(bytes_per_held * sum(held) + bytes_per_largest_layer * max(held), abs=1)


def test_context_parallelism_splits_the_activations_and_the_logits_by_tokens():
    last = STAGES[1]
    logits = SPEC.micro_batch_size * SPEC.seq_len * SPEC.vocab_size * 4 * 2
    alone = rank_bytes(one_f_one_b(STAGES, 8), SPEC, 1, torch.float32, "sgd")
    split = rank_bytes(_hybrid(one_f_one_b(STAGES, 8), cp=2, sharding="none"), SPEC, 1, torch.float32, "sgd")
    state = _state_bytes(last, copies=2)
    assert alone - state == len(last) * _layer_activation_bytes() + logits
    assert split - state == pytest.approx((len(last) * _layer_activation_bytes() + logits) / 2, abs=1)


def test_a_tensor_parallel_stage_too_big_for_one_gpu_whole_is_run_where_its_share_fits(monkeypatch):
    pipeline = one_f_one_b(STAGES, 8)
    split = _hybrid(one_f_one_b(STAGES, 8), tp=2)
    whole = max(rank_bytes(pipeline, SPEC, rank, torch.float32, "adamw") for rank in (0, 1))
    share = max(rank_bytes(split, SPEC, rank, torch.float32, "adamw") for rank in (0, 1))
    assert share < whole * 0.6
    gpu = torch.device("cuda", 0)
    between = (whole + share) / 2 / capacity.USABLE_FRACTION
    monkeypatch.setattr(capacity, "device_capacity_bytes", lambda device: between)
    check_capacity(split, SPEC, device=gpu, dtype=torch.float32, optimizer="adamw")
    with pytest.raises(SpecError, match=r"needs ~.* GiB on rank \d"):
        check_capacity(pipeline, SPEC, device=gpu, dtype=torch.float32, optimizer="adamw")
    monkeypatch.setattr(capacity, "device_capacity_bytes", lambda device: share / 2 / capacity.USABLE_FRACTION)
    with pytest.raises(SpecError, match=r"on each GPU of pipeline rank \d \(TP2 CP1 PP2 DP1"):
        check_capacity(split, SPEC, device=gpu, dtype=torch.float32, optimizer="adamw")


def test_on_a_cpu_every_gpu_of_each_pipeline_rank_counts_against_the_host(monkeypatch):
    plan = _hybrid(one_f_one_b(STAGES, 8), tp=2, dp=2)
    host = 4 * sum(rank_bytes(plan, SPEC, rank, torch.float32, "adamw") for rank in (0, 1))
    monkeypatch.setattr(capacity, "device_capacity_bytes", lambda device: host * 1.01 / capacity.USABLE_FRACTION)
    check_capacity(plan, SPEC, device=torch.device("cpu"), dtype=torch.float32, optimizer="adamw")
    monkeypatch.setattr(capacity, "device_capacity_bytes", lambda device: host * 0.99 / capacity.USABLE_FRACTION)
    with pytest.raises(SpecError, match="across 8 CPU ranks"):
        check_capacity(plan, SPEC, device=torch.device("cpu"), dtype=torch.float32, optimizer="adamw")


def test_a_fully_recomputed_stage_keeps_each_layers_input_and_rebuilds_one_layer_at_a_time():
    """Full recomputation keeps a layer's input alone (one hidden-sized tensor) per micro-batch in flight, and one
    layer's activations more while its backward rebuilds them; the head, which is not recomputed, keeps all its own."""
    first, last = STAGES
    layer_input = SPEC.micro_batch_size * SPEC.seq_len * SPEC.hidden_size * 4
    logits = SPEC.micro_batch_size * SPEC.seq_len * SPEC.vocab_size * 4 * 2
    plan = _hybrid(one_f_one_b(STAGES, 8), recompute="full", sharding="none")
    kept = {rank: rank_bytes(plan, SPEC, rank, torch.float32, "sgd") - _state_bytes(stage, copies=2)
            for rank, stage in enumerate(STAGES)}
    assert kept[0] == 2 * len(first) * layer_input + _layer_activation_bytes()
    assert SPEC.layers[last[-1]].kind == "head"
    assert kept[1] == ((len(last) - 1) * layer_input + _layer_activation_bytes() + logits
                       + _layer_activation_bytes())
    whole = rank_bytes(_hybrid(one_f_one_b(STAGES, 8), sharding="none"), SPEC, 0, torch.float32, "sgd")
    assert whole - _state_bytes(first, copies=2) == 2 * len(first) * _layer_activation_bytes() > 3 * kept[0]
