"""The knobs of today's training runs in the cost model: FP8 GEMMs, full sharding (FSDP), expert TP apart from TP;
each checked against a computation of its own from the datasheet figures and the collectives' ring formula."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.cluster import load_cluster_preset
from planner.cost.analytic import layer_cost
from planner.errors import SpecError
from planner.parallel import planning as hybrid
from planner.parallel.config import ParallelConfig
from planner.parallel.cost import CostOptions, layer_comm_parts, layer_times, layer_work
from planner.parallel.evaluate import Job, estimate, uniform_stages
from planner.parallel.mapping import RankMapping
from planner.plan import load_plan
from planner.spec.presets import load_model_preset

H100 = load_cluster_preset("h100-sxm-16x8")
# the same GPU with every GEMM at its large-GEMM efficiency (no multiprocessors: no shape model), where a test checks
# the FP8 mechanics apart from the kernels' shapes (tests/planner/test_kernel_rates.py checks those)
FLAT_H100 = replace(H100, device=replace(H100.device, multiprocessors=0))
LLAMA = load_model_preset("llama-3-8b")


def roofline_ms(kernels, peak_tflops, bandwidth_gb_s, efficiency=0.72):
    return sum(max((k.flops + k.recomputed_flops) / (peak_tflops * 1e9 * efficiency), k.bytes / (bandwidth_gb_s * 1e6))
               for k in kernels)


def test_fp8_runs_the_linear_layers_gemms_at_the_fp8_peak_after_their_casts_and_keeps_the_rest_in_bf16():
    block, head = LLAMA.layers[1], LLAMA.layers[-1]
    sized = replace(LLAMA, seq_len=4096, micro_batch_size=1)
    bf16, fp8 = (layer_work(LLAMA, FLAT_H100, 1, 4096, True, precision) for precision in ("bf16", "fp8"))
    forward = layer_cost(block, sized).forward
    gemms = [k for k in forward if k.fp8]
    others = [k for k in forward if not k.fp8]
    # q/k/v (one fused), output, gate/up (fused) and down projections: TE's linear layers
    assert len(gemms) == 4 and all(k.flops > 0 for k in gemms)
    cast_ms = sum(k.fp8_cast_bytes for k in gemms) / (3350 * 1e6)   # cast-transpose: 4 bytes per input element
    assert sum(k.fp8_cast_bytes for k in gemms) == pytest.approx(4 * 4096 * (4096 + 4096 + 4096 + 14336))
    expected = roofline_ms(gemms, 1979, 3350) + roofline_ms(others, 989, 3350) + cast_ms
    assert fp8[1].forward.roofline_ms == pytest.approx(expected)
    assert bf16[1].forward.roofline_ms == pytest.approx(roofline_ms(forward, 989, 3350))
    assert fp8[1].forward.kernels == bf16[1].forward.kernels + 4      # one cast kernel per GEMM
    # the output layer and the loss stay in BF16
    assert fp8[-1].forward == bf16[-1].forward and head.kind == "head"
    assert fp8[1].model_flops == bf16[1].model_flops                  # the same model FLOPs, sooner


def test_fp8_keeps_the_fp8_gemms_inputs_as_their_fp8_casts_where_transformer_engine_does():
    h, ffn, tokens = LLAMA.hidden_size, 14336, 2 * 4096
    block = LLAMA.layers[1]
    assert block.mlp.intermediate_size == ffn and block.mixer.num_heads * block.mixer.value_dim == h
    work = layer_work(LLAMA, H100, 2, 4096, True, "fp8")
    te, torchao = CostOptions(), CostOptions(fp8_saved_inputs=False)
    bf16_bytes = work[1].held_bytes("bf16", H100, te)
    assert bf16_bytes == work[1].activation_bytes
    # per token, one byte instead of two for the QKV input (h), the MLP's input (h) and its down projection's input
    # (ffn); one byte more for the output projection's FP8 copy of the attention output, which the attention core
    # keeps in BF16 for its own backward (h): h + ffn bytes fewer in all
    assert bf16_bytes - work[1].held_bytes("fp8", H100, te) == tokens * (h + ffn)
    # torchao (torchtitan) keeps the BF16 inputs; an A100 has no FP8 GEMMs; the head stays BF16
    assert work[1].held_bytes("fp8", H100, torchao) == bf16_bytes
    a100 = load_cluster_preset("a100-80gb-sxm-2x8")
    assert work[1].held_bytes("fp8", a100, te) == bf16_bytes
    assert work[-1].held_bytes("fp8", H100, te) == work[-1].activation_bytes

    # the plan's memory: each in-flight micro-batch holds that much less per layer, the same step otherwise
    config = ParallelConfig(tp=1, pp=2, dp=8, microbatch_size=2, num_microbatches=8, precision="fp8")
    estimates = [estimate(Job(LLAMA, H100, 16, 4096, 8 * 2 * 8, options), config) for options in (te, torchao)]
    saved, kept = (e.memory[0].activations for e in estimates)
    blocks_on_rank_0 = sum(LLAMA.layers[index].kind == "decoder" for index in uniform_stages(LLAMA, 2)[0])
    assert blocks_on_rank_0 >= 15 and estimates[0].pipeline_ms == estimates[1].pipeline_ms
    in_flight = 2   # 1F1B's first rank of two holds two micro-batches
    assert kept - saved == tokens * (h + ffn) * blocks_on_rank_0 * in_flight


def test_fp8_needs_fp8_tensor_cores_and_is_never_chosen_unpinned():
    with pytest.raises(SpecError) as error:
        hybrid.check(LLAMA, "a100-80gb-sxm-2x8", 16, 4096, 64, {"precision": "fp8"})
    assert error.value.field == "precision" and "A100-SXM-80GB has none" in error.value.reason
    result = hybrid.search(LLAMA, "h100-sxm-2x8", 16, 4096, 64, {"tp": 2, "pp": 2}, refine=False)
    assert all(score.config.precision == "bf16" for score in [result.best, *result.runners_up])


def ring_ms(nbytes, size, bandwidth_gb_s, latency_us):
    return (size - 1) / size * nbytes / (bandwidth_gb_s * 1e6) + (size - 1) * latency_us * 1e-3


def test_full_sharding_gathers_each_layer_in_f_and_b_and_reduces_its_gradients_behind_its_compute():
    config = ParallelConfig(tp=8, dp=16, num_microbatches=4, sharding="full")   # DP over 16 nodes' NICs
    mapping = RankMapping(config, H100)
    work = layer_work(LLAMA, H100, 1, 4096)[1]
    held = work.params.tp_sharded / 8 + work.params.replicated
    gather, reduce = ring_ms(2 * held, 16, 50, 8), ring_ms(4 * held, 16, 50, 8)
    forward_compute = work.forward.roofline_ms / 8
    backward_compute = (work.backward_input.roofline_ms + work.backward_weight.roofline_ms) / 8
    forward, backward = layer_comm_parts(LLAMA.layers[1], work, LLAMA, config, mapping, 4096)["dp"]
    assert forward == pytest.approx(max(0.0, gather - forward_compute))
    assert backward == pytest.approx(max(0.0, gather + reduce - backward_compute))
    assert forward > 0   # 16 nodes' NICs do not hide a layer's gather behind one micro-batch of it
    optimizer = ParallelConfig(tp=8, dp=16, num_microbatches=4)
    assert layer_comm_parts(LLAMA.layers[1], work, LLAMA, optimizer, RankMapping(optimizer, H100), 4096)["dp"] == (
        0.0, 0.0)


def test_full_sharding_without_dp_overlap_pays_each_gather_and_reduces_once_at_the_step_end_as_the_executor_does():
    """``overlap_dp`` off (``EXECUTOR_OPTIONS``; ``executor/running/sharding.py``): a layer's gathers in full in F
    and B, no reduction per micro-batch, and the gradients' one reduce-scatter at the step's end, exposed."""
    config = ParallelConfig(tp=8, dp=16, num_microbatches=4, sharding="full")
    mapping = RankMapping(config, H100)
    work = layer_work(LLAMA, H100, 1, 4096)[1]
    held = work.params.tp_sharded / 8 + work.params.replicated
    gather = ring_ms(2 * held, 16, 50, 8)
    options = CostOptions(overlap_dp=False)
    assert layer_comm_parts(LLAMA.layers[1], work, LLAMA, config, mapping, 4096, options)["dp"] == (
        pytest.approx(gather), pytest.approx(gather))
    # the embedding's backward needs the tokens, not its table: gathered for F only
    table = layer_work(LLAMA, H100, 1, 4096)[0]
    assert LLAMA.layers[0].kind == "embedding" and table.params.tp_sharded > 0
    assert layer_comm_parts(LLAMA.layers[0], table, LLAMA, config, mapping, 4096, options)["dp"] == (
        pytest.approx(ring_ms(2 * table.params.tp_sharded / 8, 16, 50, 8)), 0.0)
    job = Job(LLAMA, H100, 128, 4096, 64, options)
    full, overlapped = estimate(job, config), estimate(Job(LLAMA, H100, 128, 4096, 64), config)
    assert overlapped.data_parallel_ms == 0.0
    # the slowest pipeline rank's (one here) gradients, fp32, one ring reduce-scatter over the 16 ranks
    held_all = sum(layer.params.tp_sharded / 8 + layer.params.replicated for layer in layer_work(LLAMA, H100, 1, 4096))
    assert full.data_parallel_ms == pytest.approx(ring_ms(4 * held_all, 16, 50, 8))
    layers = layer_times(LLAMA, H100, config, mapping, 4096, ["none"] * LLAMA.num_layers, options)
    per_layer = 4 * sum(dict(time.comm_ms)["dp"] for time in layers)
    assert full.breakdown_ms["dp"] == pytest.approx(per_layer + full.data_parallel_ms)
    assert sum(full.breakdown_ms.values()) == pytest.approx(full.iteration_ms)


def test_full_sharding_leaves_nothing_to_the_step_end_but_the_optimizer_and_its_step_adds_up():
    job = Job(LLAMA, H100, 128, 4096, 64)
    full = estimate(job, ParallelConfig(tp=8, dp=16, num_microbatches=4, sharding="full"))
    zero1 = estimate(job, ParallelConfig(tp=8, dp=16, num_microbatches=4))
    assert full.data_parallel_ms == 0.0 and zero1.data_parallel_ms > 0
    layers = layer_times(LLAMA, H100, full.config, RankMapping(full.config, H100), 4096, ["none"] * LLAMA.num_layers)
    per_layer = 4 * sum(dict(time.comm_ms)["dp"] for time in layers)
    assert full.breakdown_ms["dp"] == pytest.approx(per_layer)
    assert sum(full.breakdown_ms.values()) == pytest.approx(full.iteration_ms)
    assert full.peak_memory_bytes < zero1.peak_memory_bytes


def test_the_search_shards_fully_where_only_that_fits():
    # Qwen3-Next's 80 B parameters on 16 H100s: 16 bytes each over the shards fit, ZeRO-1's 6 unsharded do not
    result = hybrid.search("qwen3-next-80b-a3b", "h100-sxm-2x8", 16, 4096, 512, refine=False, runners_up=2)
    assert result.best.config.sharding == "full" and result.best.fits


def test_expert_tp_apart_from_tp_holds_the_experts_over_etp_x_ep_and_routes_over_ep():
    model = load_model_preset("mixtral-8x7b")
    job = Job(model, H100, 16, 4096, 32)
    folded = ParallelConfig(tp=2, dp=8, ep=8, etp=1, num_microbatches=4)
    assert folded.expert_dp == 2 and folded.short() == "TP2 CP1 PP1 DP8 EP8 ETP1 mbs1 m4 none ZeRO-1"
    mapping = RankMapping(folded, H100)
    assert [folded.coordinate(rank)["ep"] for rank in range(10)] == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]
    assert (mapping.span("ep").size, mapping.span("edp").size) == (8, 2)
    # every GPU holds one of the 8 experts whole: the routed experts' 3 x 4096 x 14336 per layer, 32 layers
    memory = estimate(job, folded).memory[0]
    usual = estimate(job, ParallelConfig(tp=2, dp=8, ep=4, num_microbatches=4)).memory[0]
    assert memory.params == pytest.approx(usual.params)   # 1/(1 x 8) of the experts = 1/(2 x 4)
    with pytest.raises(SpecError) as error:
        ParallelConfig(tp=2, dp=2, ep=8, etp=1)
    assert error.value.field == "parallel.etp"


def test_fsdp_is_skipped_only_where_its_zero_1_twin_fits_and_is_no_slower():
    from planner.parallel.search import _fsdp_dominated, candidates

    job = Job(load_model_preset("mixtral-8x7b"), H100, 64, 4096, 256)
    checked = 0
    for config, chunks in candidates(job, {"sharding": "optimizer", "recompute": "full"}):
        zero_1 = estimate(job, config, chunks)
        if _fsdp_dominated(zero_1):
            full = estimate(job, replace(config, sharding="full"), chunks)
            assert full.iteration_ms >= zero_1.iteration_ms - 1e-9, config.short()
            checked += 1
    assert checked > 10


def test_the_overlaps_are_options_and_ep_hides_behind_the_layers_compute_only_as_far_as_it_lasts():
    from planner.parallel.cost import CostOptions, overlap_options

    assert overlap_options("dp") == CostOptions()
    assert overlap_options("tp, ep") == CostOptions(overlap_tp=True, overlap_dp=False, overlap_ep=True)
    assert overlap_options("none") == CostOptions(overlap_dp=False)
    with pytest.raises(SpecError) as error:
        overlap_options("tp,pp")
    assert error.value.field == "overlap" and "pp is no overlap" in error.value.reason
    model = load_model_preset("mixtral-8x7b")
    config = ParallelConfig(tp=2, dp=8, ep=8, etp=1)
    mapping = RankMapping(config, H100)
    work = layer_work(model, H100, 1, 4096)[1]
    exposed = layer_comm_parts(model.layers[1], work, model, config, mapping, 4096)["ep"]
    hidden = layer_comm_parts(model.layers[1], work, model, config, mapping, 4096, CostOptions(overlap_ep=True))["ep"]
    compute = (work.forward.roofline_ms / 2, (work.backward_input.roofline_ms + work.backward_weight.roofline_ms) / 2)
    assert hidden == pytest.approx(tuple(max(0.0, e - c) for e, c in zip(exposed, compute)))
    assert exposed[0] > 0


def test_a_plan_searched_with_overlaps_is_re_predicted_with_them():
    from planner.parallel.cost import CostOptions

    model = load_model_preset("mixtral-8x7b")
    pins = {"tp": 2, "pp": 2, "ep": 8, "etp": 1}
    hidden = hybrid.search(model, "h100-sxm-2x8", 16, 4096, 64, pins, refine=False,
                           options=CostOptions(overlap_ep=True))
    doc = hidden.plan_document()
    assert doc["meta"]["overlap"] == "dp,ep"
    plan = load_plan(doc)
    assert hybrid.predict(plan, model, "h100-sxm-2x8", 4096)["predicted"]["iteration_ms"] == pytest.approx(
        hidden.best.iteration_ms)
    exposed = hybrid.predict(plan, model, "h100-sxm-2x8", 4096, CostOptions())["predicted"]["iteration_ms"]
    assert exposed > hidden.best.iteration_ms
    assert "overlap" not in hybrid.search(model, "h100-sxm-2x8", 16, 4096, 64, pins, refine=False).plan_document()[
        "meta"]
    with pytest.raises(SpecError) as error:
        hybrid.predict(load_plan({**doc, "meta": {**doc["meta"], "overlap": 3}}), model, "h100-sxm-2x8", 4096)
    assert error.value.field == "meta.overlap"


def test_the_framework_sets_the_attention_kernel_and_the_fp8_inputs_held_and_a_plan_keeps_it():
    """A torchtitan job runs SDPA's FlashAttention-2 and torchao's Float8 (BF16 inputs held): its FP8 plan is slower
    (FlashAttention-2 runs at about half cuDNN's rate on Hopper) and holds more activations than the same
    configuration on Megatron's kernels, by exactly the options the framework names; the plan document says which,
    and a re-prediction uses it."""
    from planner.parallel.cost import Software, framework_of

    assert Software().options() == CostOptions() and framework_of(CostOptions()) == "megatron"
    assert Software("tp", "torchtitan").options() == CostOptions(overlap_tp=True, overlap_dp=False,
                                                                 attention_kernel="flash2", fp8_saved_inputs=False,
                                                                 selective="per_op", cross_entropy="pytorch")
    assert framework_of(CostOptions(attention_kernel="flash2")) is None   # a mix no job can name
    for bad in ("deepspeed", 3, ["torchtitan"]):
        with pytest.raises(SpecError) as error:
            Software("dp", bad).options()
        assert error.value.field == "framework" and "megatron, torchtitan" in error.value.reason
    model = load_model_preset("llama-3-8b")
    pins = {"tp": 1, "pp": 1, "cp": 1, "microbatch_size": 1, "recompute": "none", "sharding": "full",
            "precision": "fp8"}
    config = ParallelConfig(dp=8, microbatch_size=1, recompute="none", sharding="full", precision="fp8")
    scores = {framework: estimate(Job(model, H100, 8, 4096, 8, Software("dp", framework).options()), config, 1)
              for framework in ("megatron", "torchtitan")}
    by_hand = {framework: estimate(Job(model, H100, 8, 4096, 8, CostOptions(**settings)), config, 1)
               for framework, settings in (("megatron", {}),
                                           ("torchtitan", {"attention_kernel": "flash2", "fp8_saved_inputs": False,
                                                           "selective": "per_op", "cross_entropy": "pytorch"}))}
    for framework, score in scores.items():
        assert score.iteration_ms == by_hand[framework].iteration_ms
    assert scores["torchtitan"].iteration_ms > scores["megatron"].iteration_ms
    assert scores["torchtitan"].memory[0].activations > scores["megatron"].memory[0].activations
    titan = hybrid.search(model, H100, 8, 4096, 8, pins, refine=False, options=Software("dp", "torchtitan").options())
    doc = titan.plan_document()
    assert doc["meta"]["framework"] == "torchtitan"
    plan = load_plan(doc)
    assert hybrid.predict(plan, model, H100, 4096)["predicted"]["iteration_ms"] == pytest.approx(
        titan.best.iteration_ms)
    assert hybrid.predict(plan, model, H100, 4096, CostOptions())["predicted"]["iteration_ms"] < titan.best.iteration_ms
    assert "framework" not in hybrid.search(model, H100, 8, 4096, 8, pins, refine=False).plan_document()["meta"]
    with pytest.raises(SpecError) as error:
        hybrid.predict(load_plan({**doc, "meta": {**doc["meta"], "framework": "jax"}}), model, H100, 4096)
    assert error.value.field == "meta.framework"


def test_an_fp8_plan_is_refused_on_gpus_without_fp8_instead_of_predicted_in_bf16():
    result = hybrid.search(LLAMA, "h100-sxm-2x8", 16, 4096, 64, {"tp": 2, "pp": 2, "precision": "fp8"}, refine=False)
    plan = load_plan(result.plan_document())
    assert hybrid.predict(plan, LLAMA, "h100-sxm-2x8", 4096)["predicted"]["iteration_ms"] == pytest.approx(
        result.best.iteration_ms)
    with pytest.raises(SpecError) as error:
        hybrid.predict(plan, LLAMA, "a100-80gb-sxm-2x8", 4096)
    assert error.value.field == "precision" and "A100-SXM-80GB has none" in error.value.reason
