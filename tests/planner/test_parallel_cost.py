"""The hybrid cost model: compute split over TP x CP, TP/SP, EP and DP communication on the links the rank
mapping puts them on, recomputation, and the published Megatron-LM runs it must reproduce."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.cluster import load_cluster_preset
from planner.errors import SpecError
from planner.parallel.config import ParallelConfig
from planner.cost.analytic import layer_cost, recompute_modules_of
from planner.cost.work import AttentionShape, Gemm, per_op_checkpoint
from planner.parallel.cost import (CostOptions, all_to_all_ms, all_to_all_terms, Software, layer_comm_ms,
                                   kernel_split, layer_comm_parts, layer_times, layer_work,
                                   ring_collective_ms)
from planner.parallel.evaluate import Job, backward_workspace_bytes
from planner.parallel.search import candidates
from planner.parallel.mapping import RankMapping
from planner.spec.model import (AttentionMixer, DenseMLP, LayerSpec, LinearAttentionMixer, Mamba2Mixer, ModelSpec,
                                MoEMLP)
from planner.spec.presets import load_model_preset

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import published_runs  # noqa: E402

H100 = load_cluster_preset("h100-sxm-16x8")


def gpt(hidden=4096, heads=32, layers=4):
    block = LayerSpec("decoder", AttentionMixer(heads, heads, hidden // heads), DenseMLP(4 * hidden, gated=False))
    return ModelSpec("gpt", hidden, 51200, 2048, (LayerSpec("embedding"),) + (block,) * layers + (LayerSpec("head"),))


def times_of(model, config, mode="none", options=CostOptions()):
    return layer_times(model, H100, config, RankMapping(config, H100), 2048, [mode] * model.num_layers, options)


def test_compute_splits_over_tp_and_cp_and_the_kernel_overhead_does_not():
    """At one rate for every shape (a GPU without multiprocessors) TP x CP divides the compute exactly; with the shape
    model the smaller GEMMs of the split run no faster per FLOP, so a GPU's share takes at least its 1/8."""
    model = gpt()
    flat = replace(H100, device=replace(H100.device, multiprocessors=0))
    config = ParallelConfig(tp=4, cp=2)
    overhead = layer_work(model, H100, 1, 2048)[1].forward.kernels * H100.device.kernel_overhead_us * 1e-3
    computes = []
    for cluster in (flat, H100):
        alone = layer_times(model, cluster, ParallelConfig(), RankMapping(ParallelConfig(), cluster), 2048,
                            ["none"] * model.num_layers)[1]
        split = layer_times(model, cluster, config, RankMapping(config, cluster), 2048, ["none"] * model.num_layers)[1]
        work = layer_work(model, cluster, 1, 2048)[1]
        comm_forward, _ = layer_comm_ms(model.layers[1], work, model, config, RankMapping(config, cluster), 2048)
        computes.append((split.forward - comm_forward - overhead, (alone.forward - overhead) / 8))
    (flat_split, flat_share), (shaped_split, shaped_share) = computes
    assert flat_split == pytest.approx(flat_share)
    assert shaped_split > shaped_share


def test_tensor_parallel_layers_pay_two_all_gathers_and_two_reduce_scatters_per_pass_on_nvlink():
    model = gpt()
    config = ParallelConfig(tp=8)
    work = layer_work(model, H100, 1, 2048)[1]
    forward, backward = layer_comm_ms(model.layers[1], work, model, config, RankMapping(config, H100), 2048)
    buffer = 2048 * 4096 * 2                                   # s·b·h bf16
    one = 7 / 8 * buffer / 450e9 * 1e3 + 7 * 3e-3              # ring over NVLink at 450 GB/s, 3 us a hop
    assert forward == pytest.approx(4 * one) and backward == pytest.approx(4 * one)


def test_full_recomputation_adds_the_forward_to_the_backward_and_its_flops():
    model = gpt()
    plain, recomputed = times_of(model, ParallelConfig(tp=2))[1], times_of(model, ParallelConfig(tp=2), "full")[1]
    assert recomputed.backward_input == pytest.approx(plain.backward_input + plain.forward)
    work = layer_work(model, H100, 1, 2048)[1]
    assert recomputed.executed_flops - plain.executed_flops == pytest.approx(work.forward_flops / 2)


def llama_block_model(hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, layers=2):
    block = LayerSpec("decoder", AttentionMixer(heads, kv_heads, 128), DenseMLP(ffn, gated=True))
    return ModelSpec("llama", hidden, vocab, 8192, (LayerSpec("embedding"),) + (block,) * layers + (LayerSpec("head"),))


TITAN = Software("dp", "torchtitan").options()


def test_per_op_checkpointing_keeps_every_other_matmul_and_attention_and_reruns_the_rest():
    """torchtitan's per-op policy on a Llama block (q, k, v, o, w1, w3, w2 in that order): it keeps q, v, w1 and w2's
    outputs and attention's output with its fp32 log-sum-exp, and re-runs k, o and w3 with every norm and pointwise
    kernel; under TP the kept row-parallel output (w2's partial sum) is whole on every rank."""
    model, tokens = llama_block_model(), 2 * 8192
    h, kv, ffn, heads = 4096, 8 * 128, 14336, 32
    cost = layer_cost(model.layers[1], replace(model, micro_batch_size=2, seq_len=8192))
    kept, rerun = per_op_checkpoint(cost.forward)
    assert kept == pytest.approx(2 * tokens * (h + kv + ffn + h) + 2 * tokens * h + 4 * tokens * heads)
    gemms = [kernel for kernel in rerun if isinstance(kernel.shape, Gemm)]
    assert sum(kernel.flops for kernel in gemms) == pytest.approx(2 * tokens * h * (kv + h + ffn))
    assert sorted(kernel.shape.n for kernel in gemms) == [kv, h, ffn]
    assert [kernel for kernel in rerun if kernel.shape is None] == [k for k in cost.forward if k.shape is None]
    assert not any(isinstance(kernel.shape, AttentionShape) for kernel in rerun)
    kept_tp8, _ = per_op_checkpoint(cost.forward, tp=8)
    assert kept_tp8 - kept == pytest.approx(7 * 2 * tokens * h)


def test_selective_recomputation_is_the_frameworks():
    """Megatron-Core's selective (the core attention, already recomputed under FlashAttention) is none; torchtitan's
    keeps the block's input and the per-op outputs, and its backward re-runs the rest (more FLOPs than none by the
    re-run matmuls, fewer than full)."""
    model, tokens = llama_block_model(), 2048   # times_of's sequence
    config = ParallelConfig(tp=2)
    megatron = {mode: times_of(model, config, mode)[1] for mode in ("none", "selective")}
    assert megatron["selective"] == megatron["none"]
    titan = {mode: times_of(model, config, mode, TITAN)[1] for mode in ("none", "selective", "full")}
    cost = layer_cost(model.layers[1], replace(model, micro_batch_size=1, seq_len=tokens))
    kept, _ = per_op_checkpoint(cost.forward, tp=2)
    assert titan["selective"].activation_bytes == pytest.approx((2 * tokens * 4096 + kept) / 2)
    assert titan["full"].activation_bytes < titan["selective"].activation_bytes < titan["none"].activation_bytes
    assert 0 < titan["selective"].recompute_ms < titan["full"].recompute_ms
    assert titan["selective"].backward_input == pytest.approx(titan["none"].backward_input
                                                              + titan["selective"].recompute_ms)
    matmuls = 2 * tokens * 4096 * (8 * 128 + 4096 + 14336)   # k, o and w3 again
    assert titan["selective"].executed_flops - titan["none"].executed_flops == pytest.approx(matmuls / 2, rel=2e-3)


def test_the_loss_backward_workspace_is_the_frameworks_cross_entropy():
    """The head's backward allocates beside the kept softmax logit-sized gradients: Megatron's fused cross-entropy
    one in bf16 (in place in the softmax, cast back), PyTorch's two in fp32 (nll's and log-softmax's) on whole
    logits, and three under TP (torchtitan's loss_parallel); each rank holds its 1/tp of the vocabulary."""
    model = llama_block_model()
    modes = ["none"] * model.num_layers
    for tp, options, per_logit in ((2, CostOptions(), 2), (1, CostOptions(), 2), (2, TITAN, 12), (1, TITAN, 8),
                                   (2, CostOptions(cross_entropy="eager"), 8)):
        config = ParallelConfig(tp=tp, dp=8 // tp, microbatch_size=2)
        job = Job(model, H100, 8, 8192, 8, options)
        assert backward_workspace_bytes(job, config, list(range(model.num_layers)), modes) == pytest.approx(
            per_logit * 2 * 8192 * 128256 / tp)
        assert backward_workspace_bytes(job, config, [1, 2], modes) == 0.0


def test_megatron_recompute_modules_free_and_rerun_what_each_module_holds():
    """Megatron-Core's ``--recompute-modules`` on DeepSeek-V2-Lite (MLA, a dense first layer, then MoE), each module
    against a count by hand at 2,048 tokens, TP 2: ``mla_up_proj`` frees the queries, keys and values the attention
    kernel keeps (16 heads of 192 + 192 + 128) and re-runs the queries' projection (from the hidden state: this
    model has no query latent), the key-value up-projection and the rotary embedding;
    ``mlp`` frees a dense MLP's gate/up output and activation output and re-runs its three kernels; ``moe_act`` frees
    the experts' activation output (6 routed copies of each token, 1,408 wide). Each layer's backward workspace is
    what its modules rebuild; the core attention alone re-runs nothing."""
    model = load_model_preset("deepseek-v2-lite")
    config, tokens, shards = ParallelConfig(tp=2), 2048, 2
    modes = {name: CostOptions(recompute_modules=name) for name in (("core_attn",), ("mla_up_proj",), ("mlp",),
                                                                     ("moe_act",), ("mla_up_proj", "mlp", "moe_act"))}
    none = times_of(model, config, "none")
    by = {name: times_of(model, config, "selective", options) for name, options in modes.items()}
    dense, moe = 1, 2
    assert by[("core_attn",)] == none
    qkv = 2 * tokens * 16 * (192 + 192 + 128)
    up_flops = 2 * tokens * 2048 * 16 * 192 + 2 * tokens * 512 * 16 * (192 - 64 + 128) + 3 * tokens * 17 * 64
    for layer in (dense, moe):
        freed = none[layer].activation_bytes - by[("mla_up_proj",)][layer].activation_bytes
        assert freed == pytest.approx(qkv / shards)
        extra = by[("mla_up_proj",)][layer].executed_flops - none[layer].executed_flops
        assert extra == pytest.approx(up_flops / shards)
        assert by[("mla_up_proj",)][layer].recompute_ms > 0
    mlp_freed = 2 * tokens * (2 * 10944) + 2 * tokens * 10944
    assert none[dense].activation_bytes - by[("mlp",)][dense].activation_bytes == pytest.approx(mlp_freed / shards)
    assert by[("mlp",)][moe] == none[moe]   # an MoE layer has no dense MLP to re-run
    mlp_flops = 2 * tokens * 2048 * 2 * 10944 + 5 * tokens * 10944 + 2 * tokens * 10944 * 2048
    assert by[("mlp",)][dense].executed_flops - none[dense].executed_flops == pytest.approx(mlp_flops / shards)
    act_freed = 2 * tokens * 6 * 1408
    assert none[moe].activation_bytes - by[("moe_act",)][moe].activation_bytes == pytest.approx(act_freed / shards)
    assert by[("moe_act",)][dense] == none[dense]
    everything = by[("mla_up_proj", "mlp", "moe_act")]
    assert none[moe].activation_bytes - everything[moe].activation_bytes == pytest.approx((qkv + act_freed) / shards)
    job = Job(model, H100, 8, tokens, 8, modes[("mla_up_proj", "mlp", "moe_act")])
    selective = ["selective"] * model.num_layers
    assert backward_workspace_bytes(job, config, [dense], selective) == pytest.approx((qkv + mlp_freed) / shards)
    assert backward_workspace_bytes(job, config, [moe], selective) == pytest.approx((qkv + act_freed) / shards)


def test_the_layernorm_module_frees_the_unfused_norms_outputs_in_bf16_and_fp8():
    """Megatron-Core's ``layernorm`` module on DeepSeek-V2-Lite at 2,048 tokens, TP 2, against a count by hand: the
    norm before MLA (both layers) and the one before the MoE (layer 2) run again in the backward (an RMSNorm's 4
    FLOPs an element over 2,048 tokens x 2,048) and their outputs are not kept. In BF16 that is 2 bytes an element
    for each norm; in FP8 MLA's two down-projections held an FP8 cast each (2 bytes again), and the MoE's router held
    the BF16 output and its 2 shared experts an FP8 cast (3). A dense layer's norms are fused into the next linear
    layer, so a Llama block has nothing for the module to re-run."""
    model = load_model_preset("deepseek-v2-lite")
    tokens, hidden, shards, dense, moe = 2048, 2048, 2, 1, 2
    norms = {dense: 1, moe: 2}
    for precision, freed in (("bf16", {dense: 2, moe: 4}), ("fp8", {dense: 2, moe: 5})):
        config = ParallelConfig(tp=2, precision=precision)
        none = times_of(model, config, "none")
        norm = times_of(model, config, "selective", CostOptions(recompute_modules=("layernorm",)))
        for layer in (dense, moe):
            assert (none[layer].activation_bytes - norm[layer].activation_bytes
                    == pytest.approx(freed[layer] * tokens * hidden / shards))
            assert (norm[layer].executed_flops - none[layer].executed_flops
                    == pytest.approx(norms[layer] * 4 * tokens * hidden / shards))
            assert norm[layer].recompute_ms > 0
    assert "layernorm" not in recompute_modules_of(llama_block_model().layers[1])


def test_the_moe_and_shared_experts_modules_free_each_tensor_once_and_moe_sends_the_tokens_again():
    """Megatron-Core's ``shared_experts`` and ``moe`` on DeepSeek-V2-Lite's MoE layer (64 experts of 1,408, top 6, 2
    shared experts) at 2,048 tokens, TP 2, EP 4, against a count by hand: ``shared_experts`` frees the shared MLP's
    gate/up and activation outputs (2 x 2,816 and 2,816 wide, BF16) and re-runs its three kernels; ``moe`` frees all
    the layer kept but its input (the router's fp32 scores, each routed copy's input, gate/up and activation outputs,
    the outputs kept for the combine, and the shared MLP's) and re-runs its kernels and its dispatch and combine. With
    ``moe_act`` or ``shared_experts`` beside it, nothing is freed twice."""
    model = load_model_preset("deepseek-v2-lite")
    tokens, hidden, shards, moe = 2048, 2048, 2, 2
    config = ParallelConfig(tp=2, dp=4, ep=4)
    shared = tokens * (2 * 2816 * 2 + 2816 * 2)
    routed = tokens * 6 * (hidden * 2 + 2 * 1408 * 2 + 1408 * 2 + hidden * 2) + tokens * 64 * 4
    none = times_of(model, config, "none")
    by = {modules: times_of(model, config, "selective", CostOptions(recompute_modules=modules))
          for modules in (("shared_experts",), ("moe",), ("moe_act", "moe", "shared_experts"))}
    assert none[moe].activation_bytes - by[("shared_experts",)][moe].activation_bytes == pytest.approx(shared / shards)
    shared_flops = 2 * tokens * hidden * 2 * 2816 + 5 * tokens * 2816 + 2 * tokens * 2816 * hidden
    assert (by[("shared_experts",)][moe].executed_flops - none[moe].executed_flops
            == pytest.approx(shared_flops / shards))
    for modules in (("moe",), ("moe_act", "moe", "shared_experts")):
        assert (none[moe].activation_bytes - by[modules][moe].activation_bytes
                == pytest.approx((routed + shared) / shards))
    work = layer_work(model, H100, 1, tokens, split=kernel_split(config))[moe]
    rerun = next(module for module in work.modules if module.name == "moe").rerun
    ep_forward = layer_comm_parts(model.layers[moe], work, model, config, RankMapping(config, H100), tokens)["ep"][0]
    assert ep_forward > 0
    overhead_ms = H100.device.kernel_overhead_us * 1e-3
    assert by[("moe",)][moe].recompute_ms == pytest.approx(rerun.on(shards, overhead_ms) + ep_forward)
    assert by[("moe",)][1] == none[1]   # the dense layer has no MoE to re-run


def test_recompute_modules_are_checked_and_searched():
    """A module Megatron-Core has but the model does not (``mhc``, ``gdn_norm_out``), or none, is refused naming the
    field; with a module beyond the core attention the search tries Megatron's selective recomputation too."""
    for bad in (("mhc",), ("mla_up_proj", "gdn_norm_out"), ()):
        with pytest.raises(SpecError) as error:
            CostOptions(recompute_modules=bad)
        assert error.value.field == "recompute_modules"
    model = load_model_preset("deepseek-v2-lite")
    pins = {"tp": 1, "pp": 1, "cp": 1, "microbatch_size": 1, "sharding": "full"}
    modes = {modules: {config.recompute for config, _ in candidates(
        Job(model, H100, 8, 4096, 8, CostOptions(recompute_modules=modules)), pins)}
        for modules in (("core_attn",), ("mla_up_proj",))}
    assert modes == {("core_attn",): {"none", "full"}, ("mla_up_proj",): {"none", "selective", "full"}}


def test_main_gradients_are_kept_in_the_dtype_they_are_reduced_in():
    """Megatron-Core keeps its main gradients in the reduction's dtype (fp32 with grad_reduce_in_fp32, else bf16):
    each held parameter costs 4 or 2 bytes of gradient; weights and the sharded optimizer state do not change, nor
    does full sharding (FSDP2 reduces in fp32)."""
    from planner.parallel.evaluate import estimate
    from planner.parallel.memory import held_parameters
    from planner.parallel.params import layer_params

    model = llama_block_model()
    for sharding in ("optimizer", "full"):
        config = ParallelConfig(tp=2, dp=4, microbatch_size=1, sharding=sharding)
        fp32, bf16 = (estimate(Job(model, H100, 8, 4096, 8, CostOptions(grad_reduce_bytes=grad)), config).memory[0]
                      for grad in (4, 2))
        assert (bf16.params, bf16.optimizer) == (fp32.params, fp32.optimizer)
        if sharding == "full":
            assert bf16.gradients == fp32.gradients
        else:
            held = sum(held_parameters(layer_params(model), config))
            assert fp32.gradients == pytest.approx(4 * held) and bf16.gradients == pytest.approx(2 * held)


def test_the_search_tries_selective_recomputation_only_where_it_is_a_trade():
    model = llama_block_model()
    pins = {"tp": 1, "pp": 1, "cp": 1, "microbatch_size": 1, "sharding": "full"}
    modes = {framework: {config.recompute for config, _ in
                         candidates(Job(model, H100, 8, 8192, 8, Software("dp", framework).options()), pins)}
             for framework in ("megatron", "torchtitan")}
    assert modes == {"megatron": {"none", "full"}, "torchtitan": {"none", "selective", "full"}}


def test_full_recomputation_under_full_sharding_reruns_no_gather():
    """FSDP2 gathers a layer's weights once for its backward, and the recomputed forward uses them: a fully
    recomputed layer re-runs the same work whether its weights are sharded or not."""
    model = llama_block_model()
    options = CostOptions(overlap_dp=False)
    times = {sharding: times_of(model, ParallelConfig(dp=8, sharding=sharding), "full", options)[1]
             for sharding in ("optimizer", "full")}
    assert times["full"].forward > times["optimizer"].forward   # the gather, exposed
    assert times["full"].recompute_ms == pytest.approx(times["optimizer"].recompute_ms)


def test_expert_all_to_all_goes_over_nvlink_inside_a_node_and_the_nic_outside():
    mapping_inside = RankMapping(ParallelConfig(dp=8, ep=8), H100)
    mapping_across = RankMapping(ParallelConfig(dp=64, ep=64), H100)
    nbytes = 1e9
    inside = all_to_all_ms(nbytes, mapping_inside.span("ep"))
    across = all_to_all_ms(nbytes, mapping_across.span("ep"))
    assert inside == pytest.approx(7 / 8 * nbytes / 450e9 * 1e3 + 3e-3)
    # 56 of 64 shares leave the node on the GPU's own 50 GB/s NIC (the 7 in-node shares overlap on NVLink)
    assert across == pytest.approx(56 / 64 * nbytes / 50e9 * 1e3 + 8e-3)


def test_moe_layers_charge_dispatch_and_combine_for_top_k_copies_of_the_local_tokens():
    model = load_model_preset("mixtral-8x7b")
    layer = model.layers[1]
    work = layer_work(model, H100, 1, 4096)[1]
    routed_bytes = 4096 / 2 * 2 * 4096 * 2              # tokens per GPU (SP over TP2) x top-2 x hidden x bf16
    hidden_bytes = 4096 * 4096 * 2                      # the micro-batch's hidden states, gathered whole

    def parts(**degrees):
        config = ParallelConfig(tp=2, dp=8, **degrees)
        mapping = RankMapping(config, H100)
        return layer_comm_parts(layer, work, model, config, mapping, 4096), mapping

    tp_only = ring_collective_ms(hidden_bytes, RankMapping(ParallelConfig(tp=2, dp=8), H100).span("tp"))
    # EP8 with expert TP = TP2: all-to-all dispatch and combine, then the expert-TP group gathers what it received
    # (x2) and reduce-scatters the output; the attention's SP gathers stay on TP (Mixtral has no shared experts)
    with_ep, mapping = parts(ep=8)
    assert mapping.span("etp").size == 2 and mapping.span("ep").size == 8
    assert with_ep["ep"][0] == pytest.approx(2 * all_to_all_ms(routed_bytes, mapping.span("ep"))
                                            + 2 * ring_collective_ms(2 * routed_bytes, mapping.span("etp")))
    assert with_ep["tp"][0] == pytest.approx(2 * tp_only)
    # MoE parallel folding: expert TP 1, so EP8 runs over 8 GPUs one apart and nothing is gathered after it
    folded, mapping = parts(ep=8, etp=1)
    assert mapping.span("ep").per_domain == 8
    assert folded["ep"][0] == pytest.approx(2 * all_to_all_ms(routed_bytes, mapping.span("ep")))
    # no EP: the all-gather dispatcher gathers the hidden states over expert TP, as a dense MLP's SP
    plain, mapping = parts()
    assert plain["ep"][0] == pytest.approx(2 * tp_only)


def test_a_latent_moe_sends_latent_tokens_runs_its_experts_at_that_width_and_adds_its_two_projections():
    """Mixtral with its experts behind a 1,024-wide latent (Nemotron 3's LatentMoE): dispatch, combine and the expert
    TP gathers move a quarter of the bytes, the experts' FLOPs and weights shrink by the same quarter, and the two
    projections (hidden x latent each, on every token, duplicated over TP as the router) are added."""
    from planner.cost.mlp import moe_parts
    from planner.parallel.params import layer_params
    model = load_model_preset("mixtral-8x7b")
    latent = replace(model, layers=tuple(replace(layer, mlp=replace(layer.mlp, latent_size=1024))
                                         if isinstance(layer.mlp, MoEMLP) else layer for layer in model.layers))
    config = ParallelConfig(tp=2, dp=8, ep=8)
    mapping = RankMapping(config, H100)
    routed_bytes = 4096 / 2 * 2 * 1024 * 2               # tokens per GPU (SP over TP2) x top-2 x latent x bf16
    work = layer_work(latent, H100, 1, 4096)[1]
    ep = layer_comm_parts(latent.layers[1], work, latent, config, mapping, 4096)["ep"][0]
    assert ep == pytest.approx(2 * all_to_all_ms(routed_bytes, mapping.span("ep"))
                               + 2 * ring_collective_ms(2 * routed_bytes, mapping.span("etp")))
    tokens, hidden, inner = 4096, 4096, 14336
    plain_parts = moe_parts(model.layers[1].mlp, hidden=hidden, tokens=tokens, dtype_bytes=2)
    latent_parts = moe_parts(latent.layers[1].mlp, hidden=hidden, tokens=tokens, dtype_bytes=2)
    flops = lambda part: sum(kernel.flops for kernel in part.forward)   # noqa: E731
    assert flops(latent_parts["routed"]) == pytest.approx(flops(plain_parts["routed"]) / 4)
    assert flops(latent_parts["routed"]) == pytest.approx(2 * tokens * 2 * 1024 * 3 * inner)   # gate, up, down
    assert flops(latent_parts["latent"]) == pytest.approx(2 * 2 * tokens * hidden * 1024)
    assert "latent" not in plain_parts
    plain_held, latent_held = layer_params(model)[1], layer_params(latent)[1]
    assert latent_held.expert == plain_held.expert / 4
    assert latent_held.replicated == plain_held.replicated + 2 * hidden * 1024   # duplicated on every TP rank


@pytest.mark.parametrize("run", published_runs.MEGATRON_A100, ids=lambda run: run.name)
def test_megatron_sc21_table_1_and_the_readme_gpt3_run_are_predicted_within_15_percent_as_published(run):
    result = published_runs.plan_published(run)
    best = result.best
    assert (best.config.tp, best.config.pp, best.config.num_gpus) == (run.tp, run.pp, run.gpus)
    assert best.config.microbatch_size * best.config.num_microbatches * best.config.dp == run.batch
    assert not best.estimated and best.fits
    predicted = published_runs.predicted_tflops_per_gpu(run, best.iteration_ms)
    assert predicted == pytest.approx(run.tflops_per_gpu, rel=0.15)


# Nemotron-340B is the exception the README reports: this accounting needs full recomputation to fit it (-26 %)
NEMO_2024_RUNS = tuple(run for run in published_runs.NEMO_H100_FP8 if run.model != "Nemotron-340B") \
    + published_runs.long_context_runs()


@pytest.mark.parametrize("run", NEMO_2024_RUNS, ids=lambda run: f"{run.model}-{run.gpus}-{run.seq_len}")
def test_the_2024_nemo_runs_are_predicted_within_15_percent_with_that_stacks_attention(run):
    """NeMo 24.07's H100 FP8 summary and NeMo 24.03's long-sequence rows, as published, with Transformer Engine's
    fused attention as those stacks ran it (planner.cost.roofline.TE_2024_ATTENTION, set on the 1 M-token row)."""
    best = published_runs.plan_nemo(run, False).best
    assert (best.config.tp, best.config.pp, best.config.cp, best.config.num_gpus) == (run.tp, run.pp, run.cp,
                                                                                      run.gpus)
    assert best.config.microbatch_size * best.config.num_microbatches * best.config.dp == run.batch
    assert not best.estimated and best.fits
    assert published_runs.tokens_per_gpu_s(best) == pytest.approx(run.tokens_per_gpu_s, rel=0.15)


@pytest.mark.parametrize("name", sorted(published_runs.NEMO_NEMOTRON))
def test_the_nemotron_rows_shapes_are_nemos(name):
    """The summary's FLOP/token (TFLOP/s over tokens/s) is NeMo's Nemotron count (nemo/utils/flops_formulas.py's
    ``nemotron``, the whole attention square) for the shape taken here, so the shape is the one NeMo ran."""
    run = next(run for run in published_runs.NEMO_H100_FP8 if run.model == name)
    model = published_runs.nemo_model(run)
    block = next(layer for layer in model.layers if layer.kind == "decoder")
    l, h, s = sum(layer.kind == "decoder" for layer in model.layers), model.hidden_size, run.seq_len
    groups = block.mixer.num_kv_heads / block.mixer.num_heads
    nemo = l * h * h * (12 + 12 * groups + 12 * block.mlp.intermediate_size / h + 12 * s / h
                        + 6 * model.vocab_size / (l * h))
    assert run.tflops_per_gpu * 1e12 / run.tokens_per_gpu_s == pytest.approx(nemo, rel=0.005)
    assert model.norm == "layernorm" and not block.mlp.gated and not model.tie_embeddings


def test_the_2024_attention_rate_is_what_the_million_token_row_ran_at():
    from planner.cost.roofline import TE_2024_ATTENTION

    million = published_runs.long_context_runs()[-1]
    assert million.seq_len == 1 << 20
    best = published_runs.plan_nemo(million, False).best
    assert published_runs.tokens_per_gpu_s(best) == pytest.approx(million.tokens_per_gpu_s, rel=0.01)
    # at the 2026 rate the same row is 60-70 % fast: the constant is what moves it
    today = published_runs.plan_nemo(million, False, "cudnn").best
    assert published_runs.tokens_per_gpu_s(today) / million.tokens_per_gpu_s - 1 == pytest.approx(0.65, abs=0.05)
    assert 0.5 < TE_2024_ATTENTION < 0.8   # a fraction of the 2026 rate (TE's standalone 2024 benchmark: 0.68-0.80)


def test_nemos_llama_flop_count_is_six_per_parameter_a_token_passes_through_and_the_whole_attention_square():
    from planner.cost.analytic import count_parameters

    model = published_runs.llama("Llama 2 7B")
    embedding = model.vocab_size * model.hidden_size
    for seq in (4096, 1 << 20):
        square = 12 * seq * model.hidden_size * 32   # 4·s·h a layer forward for Q·Kᵀ and P·V, three passes, 32 layers
        assert published_runs.nemo_llama_flops_per_token(model, seq, published_runs.LLAMA2_VOCAB) == pytest.approx(
            6 * (count_parameters(model) - embedding) + square, rel=1e-4)   # NeMo's count leaves out the norms


@pytest.mark.parametrize("run", published_runs.MEGATRON_A100, ids=lambda run: run.name)
def test_the_benchmarks_gpt_models_have_the_published_parameter_counts(run):
    from planner.cost.analytic import count_parameters

    l, h, vocab, s = run.layers, run.hidden, 51200, 2048
    paper = 12 * l * h * h * (1 + 13 / (12 * h) + (vocab + s) / (12 * l * h))   # Narayanan et al. 2021, eq. 2
    # the paper counts biases, LayerNorm's shift and learned positions (under 0.5 %); our GPT has none
    assert count_parameters(published_runs.gpt_model(run)) == pytest.approx(paper, rel=0.005)


@pytest.mark.parametrize("run", published_runs.MEGATRON_CORE_H100, ids=lambda run: run.name)
def test_the_h100_tables_models_have_the_published_sizes_and_flop_count(run):
    from planner.cost.analytic import count_parameters

    params = count_parameters(published_runs.core_model(run))
    assert params / 1e9 == pytest.approx(float(run.name.rstrip("B")), rel=0.03)
    # Megatron-Core r0.8.0's count is 6 FLOPs per parameter a token passes through (the input embedding is a lookup)
    # plus the whole attention square, 12·l·h·s a token
    l, h, s, vocab = run.layers, run.hidden, published_runs.CORE_SEQ_LEN, published_runs.CORE_VOCAB
    assert published_runs.core_flops_per_token(run) == pytest.approx(6 * (params - vocab * h) + 12 * l * h * s,
                                                                     rel=1e-3)


def test_data_parallel_reduce_scatter_and_gather_cross_the_nics_and_hide_behind_compute_when_overlapped():
    from planner.parallel.cost import data_parallel_ms, exposed_data_parallel_ms

    config = ParallelConfig(tp=8, dp=16)
    mapping = RankMapping(config, H100)
    grad_ms, param_ms = data_parallel_ms(1e9, 0.0, config, mapping, CostOptions())
    # one GPU per node in each DP group: the ring runs at the NIC's 50 GB/s, 8 us a hop
    assert grad_ms == pytest.approx(15 / 16 * 4e9 / 50e9 * 1e3 + 15 * 8e-3)
    assert param_ms == pytest.approx(15 / 16 * 2e9 / 50e9 * 1e3 + 15 * 8e-3)
    without_zero = data_parallel_ms(1e9, 0.0, ParallelConfig(tp=8, dp=16, sharding="none"), mapping,
                                    CostOptions())
    assert without_zero == (pytest.approx(2 * grad_ms), 0.0)   # all-reduce, nothing to gather
    assert exposed_data_parallel_ms(grad_ms, param_ms, 50.0, 20.0, CostOptions()) == pytest.approx(
        (grad_ms - 50.0) + (param_ms - 20.0))
    assert exposed_data_parallel_ms(grad_ms, param_ms, 500.0, 500.0, CostOptions()) == 0.0
    assert exposed_data_parallel_ms(grad_ms, param_ms, 500.0, 500.0, CostOptions(overlap_dp=False)) == \
        pytest.approx(grad_ms + param_ms)


def test_context_parallel_ring_is_charged_only_where_it_outlasts_the_attention_kernel():
    model = gpt()
    config = ParallelConfig(cp=8, dp=2)
    mapping = RankMapping(config, H100)
    work = layer_work(model, H100, 1, 2048)[1]
    forward, _ = layer_comm_ms(model.layers[1], work, model, config, mapping, 2048)
    chunk = 2048 / 8 * 32 * (128 + 128) * 2                   # local K and V, bf16
    ring = 7 * (chunk / 450e9 * 1e3 + 3e-3)
    assert forward == pytest.approx(max(0.0, ring - work.attention_core_ms / 8))


@pytest.mark.parametrize("tp, cp", [(2, 4), (8, 4), (1, 16)])
def test_recurrent_mixers_under_cp_are_charged_megatron_cores_head_all_to_alls(tp, cp):
    """Mamba-2 (Nemotron-H's: 128 heads of 64, state 128, 8 groups) and gated delta-net (Qwen3-Next's: 32 value heads,
    16 key heads of 128) trade tokens for heads and back in F and again in B (Megatron-Core's MambaContextParallel
    and GDN), each an all-to-all of what a GPU holds of the micro-batch's tokens; with more CP ranks than a TP rank's
    groups, B and C go to each rank of a group's heads (TP 8: one group a TP rank, repeated 4 times)."""
    seq_len, tokens = 8192, 8192 * 1
    mamba = Mamba2Mixer(num_heads=128, head_dim=64, state_size=128, n_groups=8)
    delta = LinearAttentionMixer(num_heads=32, head_dim=128, num_key_heads=16)
    model = ModelSpec(name="recurrent", hidden_size=4096, vocab_size=131072, seq_len=seq_len, micro_batch_size=1,
                      layers=(LayerSpec(kind="embedding"), LayerSpec(kind="decoder", mixer=mamba),
                              LayerSpec(kind="decoder", mixer=delta), LayerSpec(kind="head")))
    config = ParallelConfig(tp=tp, cp=cp, dp=128 // (tp * cp), microbatch_size=1)
    mapping = RankMapping(config, H100)
    works = layer_work(model, H100, 1, seq_len)
    groups = 8 / tp
    repeat = max(1, cp / groups)
    # per token on one GPU: z, x (64 x 128 / tp each), B and C (groups x repeat x 128 each), dt (128 / tp) there;
    # y and z back. Gated delta-net: q, k (16 x 128 / tp each), v, z (32 x 128 / tp each), beta, alpha (32 / tp) there;
    # the gated norm's output back.
    widths = {1: (2 * 8192 / tp + 2 * groups * repeat * 128 + 128 / tp, 2 * 8192 / tp),
              2: (2 * 2048 / tp + 2 * 4096 / tp + 2 * 32 / tp, 4096 / tp)}
    for index, (there, back) in widths.items():
        expected = sum(all_to_all_ms(tokens / cp * width * 2, mapping.span("cp")) for width in (there, back))
        forward, backward = layer_comm_parts(model.layers[index], works[index], model, config, mapping, seq_len)["cp"]
        assert forward == backward == pytest.approx(expected)
    assert repeat == {2: 1, 8: 4, 1: 2}[tp]


def test_tp_overlap_hides_a_blocks_collectives_behind_its_gemms_and_no_more():
    model = gpt(hidden=8192, heads=64)
    config = ParallelConfig(tp=8, microbatch_size=1)
    mapping = RankMapping(config, H100)
    works = layer_work(model, H100, 1, 2048)
    block, head = model.layers[1], model.layers[-1]
    exposed = layer_comm_parts(block, works[1], model, config, mapping, 2048)["tp"]
    hidden = layer_comm_parts(block, works[1], model, config, mapping, 2048, CostOptions(overlap_tp=True))["tp"]
    forward_gemms = works[1].forward.roofline_ms / 8
    backward_gemms = (works[1].backward_input.roofline_ms + works[1].backward_weight.roofline_ms) / 8
    assert exposed[0] > 0 and hidden == (max(0.0, exposed[0] - forward_gemms), max(0.0, exposed[1] - backward_gemms))
    # on NVLink a large block's GEMMs outlast its collectives; the head's all-gather is never overlapped
    assert hidden == (0.0, 0.0)
    assert (layer_comm_parts(head, works[-1], model, config, mapping, 2048, CostOptions(overlap_tp=True))["tp"]
            == layer_comm_parts(head, works[-1], model, config, mapping, 2048)["tp"])
    # over a slow link the overlap hides the GEMMs' length of it and the rest stays exposed
    slow = replace(H100, intra_node=replace(H100.intra_node, bandwidth_gb_s=1.0))
    slow_mapping = RankMapping(config, slow)
    slow_exposed = layer_comm_parts(block, works[1], model, config, slow_mapping, 2048)["tp"]
    slow_hidden = layer_comm_parts(block, works[1], model, config, slow_mapping, 2048,
                                   CostOptions(overlap_tp=True))["tp"]
    assert slow_hidden[0] == pytest.approx(slow_exposed[0] - forward_gemms) and slow_hidden[0] > 0
    assert sum(time.total_ms for time in times_of(model, config, options=CostOptions(overlap_tp=True))) < sum(
        time.total_ms for time in times_of(model, config))


def test_recompute_modules_are_read_as_megatron_cores_names_each_once_and_every_one_is_described():
    from planner.cost.analytic import RECOMPUTE_MODULES
    from planner.parallel.cost import RECOMPUTE_MODULE_WORDS, recompute_modules_named
    assert tuple(RECOMPUTE_MODULE_WORDS) == RECOMPUTE_MODULES
    assert recompute_modules_named("mlp, core_attn,mlp") == ("core_attn", "mlp")
    assert Software(recompute_modules="mla_up_proj").options().recompute_modules == ("mla_up_proj",)
    assert Software().options().recompute_modules == ("core_attn",)
    for text, said in (("", "must name"), ("mhc,gdn_norm_out", "gdn_norm_out, mhc is no recompute module"),
                       (["mlp"], "must name")):
        with pytest.raises(SpecError) as caught:
            recompute_modules_named(text)
        assert caught.value.field == "recompute_modules" and said in caught.value.reason
    with pytest.raises(SpecError) as caught:
        Software(framework="torchtitan", recompute_modules="mlp").options(prefix="meta.")
    assert caught.value.field == "meta.recompute_modules"
    assert Software(framework="torchtitan", recompute_modules="core_attn").options().selective == "per_op"


def test_deepeps_dispatch_sends_a_token_once_per_other_node_holding_one_of_its_experts():
    """The expected remote nodes a token reaches, against a simulation of balanced routing (k experts drawn at random
    without replacement, experts laid out node by node); DeepEP's NIC bytes are that many hidden states a token,
    Megatron's all-to-all sends every routed copy bound elsewhere; inside one node both are the same all-to-all."""
    import random
    from planner.parallel.cost import dispatch_ms, remote_nodes_per_token
    cluster = load_cluster_preset("h100-sxm-128x8")
    rng = random.Random(7)
    for experts, top_k, ep in ((256, 8, 64), (128, 8, 32), (128, 4, 16)):
        mlp = MoEMLP(num_experts=experts, top_k=top_k, expert_intermediate_size=2048)
        group = ep_group(cluster, ep)
        nodes = ep // group.per_domain
        per_node = experts // nodes
        samples = [len({expert // per_node for expert in rng.sample(range(experts), top_k)} - {0})
                   for _ in range(20000)]
        assert remote_nodes_per_token(mlp, group) == pytest.approx(sum(samples) / len(samples), rel=0.02)
        token_bytes, tokens = 7168 * 2, 4096
        _, outside = all_to_all_terms(tokens * top_k * token_bytes, group)
        deepep = dispatch_ms(token_bytes, tokens, mlp, group, "deepep")
        alltoall = dispatch_ms(token_bytes, tokens, mlp, group, "alltoall")
        assert alltoall == pytest.approx(all_to_all_ms(tokens * top_k * token_bytes, group))
        nic = tokens * token_bytes * remote_nodes_per_token(mlp, group) / (group.inter.bandwidth_gb_s * 1e6)
        assert deepep == pytest.approx(nic + group.latency_us() * 1e-3) and deepep < alltoall
        assert outside / (group.inter.bandwidth_gb_s * 1e6) > nic
        assert dispatch_ms(token_bytes, tokens, mlp, group, "hybridep") == deepep   # hierarchical as DeepEP
    inside = ep_group(cluster, 8)
    mlp = MoEMLP(num_experts=256, top_k=8, expert_intermediate_size=2048)
    assert remote_nodes_per_token(mlp, inside) == 0
    assert dispatch_ms(14336, 4096, mlp, inside, "deepep") == dispatch_ms(14336, 4096, mlp, inside, "alltoall")


def test_node_limited_routing_reaches_the_nodes_deepseeks_router_reaches():
    """DeepSeek-V3's router (transformers' DeepseekV3TopkRouter, Megatron-Core's group_limited_topk): each group scored
    by its two best experts, the 4 best of 8 groups kept, the token's 8 experts the best of theirs; simulated on
    balanced (i.i.d.) scores, the other nodes a token reaches are what ``remote_nodes_per_token`` charges, for EP
    over 2, 4 and 8 nodes (whole groups on a node) and 16 (a group over two nodes). DeepEP then sends less than under
    free routing."""
    import numpy as np
    from planner.parallel.cost import dispatch_ms, remote_nodes_per_token
    cluster = load_cluster_preset("h100-sxm-128x8")
    limited = MoEMLP(num_experts=256, top_k=8, expert_intermediate_size=2048, router_groups=8, router_group_topk=4)
    free = MoEMLP(num_experts=256, top_k=8, expert_intermediate_size=2048)
    rng = np.random.default_rng(11)
    tokens = 20000
    scores = rng.random((tokens, 256))
    group_scores = np.sort(scores.reshape(tokens, 8, 32), axis=-1)[..., -2:].sum(-1)
    kept = np.argsort(group_scores, axis=-1)[:, -4:]
    allowed = np.zeros((tokens, 8), bool)
    np.put_along_axis(allowed, kept, True, axis=-1)
    chosen = np.argsort(np.where(np.repeat(allowed, 32, axis=-1), scores, -1.0), axis=-1)[:, -8:]
    for ep in (16, 32, 64, 128):
        group = ep_group(cluster, ep)
        nodes = ep // group.per_domain
        reached = np.zeros((tokens, nodes), bool)
        np.put_along_axis(reached, chosen // (256 // nodes), True, axis=-1)
        own = rng.integers(0, nodes, tokens)
        simulated = (reached.sum(-1) - reached[np.arange(tokens), own]).mean()
        assert remote_nodes_per_token(limited, group) == pytest.approx(simulated, rel=0.02), nodes
        assert remote_nodes_per_token(limited, group) < remote_nodes_per_token(free, group)
        assert dispatch_ms(14336, 4096, limited, group, "deepep") < dispatch_ms(14336, 4096, free, group, "deepep")
        # Megatron's all-to-all sends every routed copy, wherever the groups lie
        assert dispatch_ms(14336, 4096, limited, group, "alltoall") == dispatch_ms(14336, 4096, free, group, "alltoall")
    assert remote_nodes_per_token(limited, ep_group(cluster, 64)) == pytest.approx(3.5)

def test_a_jobs_software_is_read_once_with_defaults_for_what_is_not_given_and_reads_back_from_its_options():
    """``Software.named`` is what every entry point (web job, CLI, plan meta) reads the four settings with: a missing,
    None or blank one takes its default, the text comes back as the planner writes it, a bad one is a SpecError on
    the field (with the caller's prefix), and ``of`` recovers the settings from the options they made."""
    assert Software.named({}) == Software() == Software.named({name: None for name in vars(Software())})
    assert Software.named({"overlap": ""}, default_overlap="none").overlap == "none"
    read = Software.named({"overlap": " ep, tp ", "framework": "megatron", "recompute_modules": "mlp, core_attn",
                           "ep_dispatcher": "deepep", "mode": "hybrid"})   # other keys of the request are not read
    assert read == Software("tp,ep", "megatron", "core_attn,mlp", "deepep")
    assert read.changed() == {"overlap": "tp,ep", "recompute_modules": "core_attn,mlp", "ep_dispatcher": "deepep"}
    assert Software.of(read.options()) == read and Software().changed() == {}
    assert Software.of(CostOptions(attention_kernel="flash2")).framework is None   # a mix no job can name
    assert Software.of(CostOptions(attention_kernel="flash2")).changed() == {}
    for values, field in (({"overlap": "pp"}, "meta.overlap"), ({"framework": "jax"}, "meta.framework"),
                          ({"ep_dispatcher": 3}, "meta.ep_dispatcher"),
                          ({"framework": "torchtitan", "recompute_modules": "mlp"}, "meta.recompute_modules")):
        with pytest.raises(SpecError) as caught:
            Software.named(values, prefix="meta.")
        assert caught.value.field == field


def ep_group(cluster, ep: int):
    return RankMapping(ParallelConfig(tp=1, cp=1, pp=1, dp=ep, ep=ep, microbatch_size=1, num_microbatches=1),
                       cluster).span("ep")


def test_the_ep_dispatcher_is_one_of_the_modelled_ones():
    with pytest.raises(SpecError) as caught:
        Software(ep_dispatcher="nccl").options()
    assert caught.value.field == "ep_dispatcher" and "alltoall, deepep, hybridep" in caught.value.reason
