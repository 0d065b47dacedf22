"""Per-GPU memory under TP / EP / PP / ZeRO-1 checked against Megatron-LM's own formulas, written out here.

The reference is ``compute_weight_and_optimizer_memory`` of Megatron-LM's
``megatron/training/theoretical_memory_usage.py`` for pp = 1 (the most loaded shard is the whole model)
and Korthikanti et al. 2022's per-layer activation counts.
"""

import pytest

from planner.cluster import load_cluster_preset
from planner.parallel.config import ParallelConfig
from planner.parallel.cost import CostOptions, layer_times
from planner.parallel.evaluate import Job, estimate
from planner.parallel.mapping import RankMapping
from planner.spec.model import AttentionMixer, DenseMLP, LayerSpec, ModelSpec
from planner.spec.presets import load_model_preset

H100 = load_cluster_preset("h100-sxm-16x8")


def megatron_weight_and_optimizer_bytes(*, hidden, heads, query_groups, kv_channels, ffn, layers, vocab, tp, dp,
                                        experts=None, moe_ffn=0, ep=1, etp=None, world, sharding="optimizer"):
    """Megatron-LM's formula, swiglu, RMSNorm, untied embeddings, pp = 1; ``full`` sharding as FSDP2's 16 bytes
    per parameter of the shard (fp32 parameters, fp32 gradients, two fp32 moments)."""
    etp = tp if etp is None else etp
    gated = 3 / 2
    query_projection = kv_channels * heads
    attention = 2 * hidden * hidden * ((1 + query_groups / heads) * query_projection / hidden)
    dense_mlp = 2 * hidden * ffn * gated
    routed = 2 * hidden * moe_ffn * (experts or 1) * gated if experts else 0
    layernorm = 2 * hidden
    router = hidden * experts if experts else 0
    embedding = hidden * vocab
    if experts:
        tp_sharded = attention * layers
        replicated = (layernorm + router) * layers + hidden
        expert_sharded = routed * layers
    else:
        tp_sharded = (attention + dense_mlp) * layers
        replicated = layernorm * layers + hidden
        expert_sharded = 0
    tp_sharded_shard = (tp_sharded + embedding) / tp + embedding / tp   # untied output layer at pp = 1
    expert_shard = expert_sharded / (etp * ep)
    expert_dp = world // (etp * ep)

    def per_parameter(data_parallel):
        return {"none": 18, "optimizer": 6 + 12 / data_parallel, "full": 16 / data_parallel}[sharding]
    return (tp_sharded_shard + replicated) * per_parameter(dp) + expert_shard * per_parameter(expert_dp)


def model_state(score):
    memory = score.memory[0]
    return memory.params + memory.gradients + memory.optimizer


@pytest.mark.parametrize("sharding", ["none", "optimizer", "full"])
def test_dense_model_state_matches_megatrons_theoretical_memory(sharding):
    model = load_model_preset("llama-3-8b")
    config = ParallelConfig(tp=2, pp=1, dp=8, num_microbatches=4, sharding=sharding)
    job = Job(model, H100, 16, 4096, 32)
    expected = megatron_weight_and_optimizer_bytes(hidden=4096, heads=32, query_groups=8, kv_channels=128,
                                                   ffn=14336, layers=32, vocab=128256, tp=2, dp=8, world=16,
                                                   sharding=sharding)
    assert model_state(estimate(job, config)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("etp, ep, sharding", [(2, 4, "optimizer"), (1, 8, "optimizer"), (1, 8, "full")])
def test_moe_model_state_shards_experts_over_etp_x_ep_and_their_optimizer_over_expert_dp(etp, ep, sharding):
    model = load_model_preset("mixtral-8x7b")
    config = ParallelConfig(tp=2, pp=1, dp=8, ep=ep, etp=etp, num_microbatches=4, sharding=sharding)
    job = Job(model, H100, 16, 4096, 32)
    expected = megatron_weight_and_optimizer_bytes(hidden=4096, heads=32, query_groups=8, kv_channels=128, ffn=0,
                                                   layers=32, vocab=32000, tp=2, dp=8, experts=8, moe_ffn=14336,
                                                   ep=ep, etp=etp, world=16, sharding=sharding)
    assert model_state(estimate(job, config)) == pytest.approx(expected, rel=1e-9)


def test_full_sharding_holds_one_layer_gathered_and_the_next_prefetched_beside_its_shards():
    model = load_model_preset("llama-3-8b")
    job = Job(model, H100, 16, 4096, 32)
    optimizer, full = (estimate(job, ParallelConfig(tp=2, dp=8, num_microbatches=4, sharding=sharding)).memory[0]
                       for sharding in ("optimizer", "full"))
    # the largest unit FSDP gathers at pp 1 is the output layer (128256 x 4096 over TP2) with the final norm (4096,
    # replicated): two bf16 copies and its fp32 gradient
    assert full.buffers - optimizer.buffers == pytest.approx((128256 * 4096 / 2 + 4096) * (2 + 2 + 4))
    assert full.activations == optimizer.activations


def gpt(hidden=4096, heads=32, layers=8, tie=True):
    block = LayerSpec("decoder", AttentionMixer(heads, heads, hidden // heads), DenseMLP(4 * hidden, gated=False))
    return ModelSpec("gpt", hidden, 51200, 2048, (LayerSpec("embedding"),) + (block,) * layers + (LayerSpec("head"),),
                     tie_embeddings=tie)


def test_tied_embeddings_are_held_on_both_pipeline_ends_but_once_on_a_single_stage():
    model = gpt()
    job = Job(model, H100, 16, 2048, 64)
    table = 51200 * 4096 / 8
    one_stage = estimate(job, ParallelConfig(tp=8, pp=1, dp=2, num_microbatches=32)).memory[0].params
    two_stages = estimate(job, ParallelConfig(tp=8, pp=2, dp=1, num_microbatches=64)).memory
    body = 8 * (12 * 4096 * 4096 / 8 + 2 * 4096) + 4096     # 8 blocks of 12h^2 (TP-sharded) + norms, final norm
    assert one_stage == pytest.approx(2 * (table + body), rel=1e-9)
    assert two_stages[0].params == pytest.approx(2 * (table + body / 2 - 4096 / 2), rel=1e-9)
    assert two_stages[1].params == pytest.approx(2 * (table + body / 2 + 4096 / 2), rel=1e-9)


def test_full_recomputation_keeps_only_each_layers_input_sharded_by_sequence_parallelism():
    model = gpt()
    config = ParallelConfig(tp=4, cp=2, pp=1, dp=2, num_microbatches=1, microbatch_size=2)
    times = layer_times(model, H100, config, RankMapping(config, H100), 2048, ["full"] * model.num_layers)
    s, b, h = 2048, 2, 4096
    for layer in times[1:-1]:
        assert layer.activation_bytes == 2 * s * b * h / (4 * 2)   # Korthikanti 2022, Sec. 5: 2sbh / t


@pytest.mark.parametrize("flash", [True, False])
def test_a_gpt_layers_activations_are_korthikantis_count_under_tp_and_sp(flash):
    model = gpt()
    config = ParallelConfig(tp=8, pp=1, dp=2, num_microbatches=1)
    times = layer_times(model, H100, config, RankMapping(config, H100), 2048, ["none"] * model.num_layers,
                        CostOptions(flash_attention=flash))
    s, b, h, a, t = 2048, 1, 4096, 32, 8
    # Table 2: sbh/t·(34 + 5as/h) with tensor and sequence parallelism; FlashAttention keeps no scores, and the
    # cost model saves no dropout masks (2 of the 34), so 32 + its log-sum-exp is the count with flash.
    expected = s * b * h / t * (34 + 5 * a * s / h) if not flash else s * b * h / t * 32
    assert times[1].activation_bytes == pytest.approx(expected, rel=0.06)


def test_schedule_in_flight_microbatches_multiply_the_first_stages_activations():
    model = gpt(layers=8)
    job = Job(model, H100, 32, 2048, 64)
    config = ParallelConfig(tp=8, pp=4, dp=1, num_microbatches=64, recompute="full")
    memory = estimate(job, config).memory
    per_microbatch = 2 * 2048 * 4096 / 8 * 2   # two blocks per stage, each keeps 2sbh/t
    whole_block = layer_times(model, H100, config, RankMapping(config, H100), 2048,
                              ["none"] * model.num_layers)[1].activation_bytes
    # 1F1B: rank r holds p - r micro-batches, plus one block's whole activations while it is recomputed
    for rank in (1, 2):
        assert memory[rank].activations == pytest.approx((4 - rank) * per_microbatch + whole_block)
