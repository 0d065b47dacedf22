"""The analytic cost model: FLOPs against hand counts, roofline times, scaling with sequence length, MoE
sparsity, the heavy vocabulary head, and the profile it produces."""

import dataclasses
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from planner.cluster import load_cluster_preset
from planner.cost import analytic_profile, count_parameters, layer_cost
from planner.cost.attention import attention_core, mean_keys_per_query
from planner.cost.linear_attention import linear_attention_core
from planner.cost.mlp import moe_cost
from planner.cost.primitives import linear
from planner.cost.roofline import kernel_ms, pass_ms
from planner.cost.ssm import mamba_cost, selective_scan, ssd_scan
from planner.cost.vocab import cross_entropy, loss_backward_bytes
from planner.cost.work import Kernel
from planner.profile import load_profile
from planner.spec.model import (AttentionMixer, DenseMLP, LayerSpec, LinearAttentionMixer, Mamba2Mixer, MambaMixer,
                                ModelSpec, MoEMLP)
from planner.spec.presets import load_model_preset

H100 = load_cluster_preset("h100-sxm-1x8")


def small_dense_spec(**changes) -> ModelSpec:
    block = LayerSpec(kind="decoder", mixer=AttentionMixer(num_heads=4, num_kv_heads=2, head_dim=16),
                      mlp=DenseMLP(intermediate_size=128))
    spec = ModelSpec(name="small", hidden_size=64, vocab_size=1000, seq_len=32, micro_batch_size=2,
                     layers=(LayerSpec(kind="embedding"), block, block, LayerSpec(kind="head")))
    return dataclasses.replace(spec, **changes)


def flops(kernels) -> float:
    return sum(kernel.flops for kernel in kernels)


def test_mean_keys_per_query_counts_causal_pairs():
    for seq_len, window in [(32, None), (32, 8), (7, 3), (5, 100)]:
        pairs = sum(min(i + 1, window or seq_len) for i in range(seq_len))
        assert mean_keys_per_query(seq_len, window) == pytest.approx(pairs / seq_len)


def test_mean_keys_per_query_counts_the_causal_pairs_inside_each_chunk():
    for seq_len, chunk in [(32, 8), (30, 8), (7, 3), (5, 100), (8192, 8192), (20000, 8192)]:
        pairs = sum(i % chunk + 1 for i in range(seq_len))   # query i sees its chunk's keys up to itself
        assert mean_keys_per_query(seq_len, None, chunk) == pytest.approx(pairs / seq_len)


def test_small_dense_layer_weight_gradient_flops_equal_the_hand_count():
    spec = small_dense_spec()
    tokens, h = 2 * 32, 64
    projection_weights = h * (4 * 16 + 2 * 2 * 16) + 4 * 16 * h + h * 2 * 128 + 128 * h
    assert flops(layer_cost(spec.layers[1], spec).backward_weight) == 2 * tokens * projection_weights


def test_small_dense_layer_forward_flops_equal_matmuls_plus_causal_attention():
    spec = small_dense_spec()
    batch, seq, h, heads, head_dim = 2, 32, 64, 4, 16
    tokens = batch * seq
    matmul = 2 * tokens * (h * (4 * 16 + 2 * 2 * 16) + 4 * 16 * h + h * 2 * 128 + 128 * h)
    causal_pairs = batch * sum(i + 1 for i in range(seq))
    attention = 4 * causal_pairs * heads * head_dim
    forward = flops(layer_cost(spec.layers[1], spec).forward)
    # The rest are pointwise kernels (norms, rotary, activation, residuals): a few FLOPs per element.
    assert matmul + attention < forward < 1.05 * (matmul + attention)


def test_attention_backward_is_twice_the_forward_plus_flash_recompute_of_the_scores():
    core = attention_core(batch=1, seq_len=1024, heads=8, kv_heads=2, qk_dim=64, v_dim=64, window=None,
                          dtype_bytes=2)
    (forward,), (backward,) = core.forward, core.backward_input
    assert backward.flops == 2 * forward.flops
    assert backward.recomputed_flops == forward.flops / 2     # Q·Kᵀ is half the forward when d_qk == d_v
    assert core.backward_weight == ()


def test_projection_flops_are_the_same_in_all_three_passes():
    cost = linear(100, 64, 32, 2)
    assert flops(cost.forward) == flops(cost.backward_input) == flops(cost.backward_weight) == 2 * 100 * 64 * 32
    assert cost.params == 64 * 32


def test_llama_total_flops_match_six_n_t_plus_attention():
    spec = load_model_preset("llama-3-8b")
    tokens, s = spec.micro_batch_size * spec.seq_len, spec.seq_len
    matmul_params = count_parameters(spec) - spec.vocab_size * spec.hidden_size   # the embedding is a gather
    attention = 3 * 4 * spec.micro_batch_size * s * (s + 1) / 2 * 32 * 128 * 32   # fwd + 2x bwd, 32 layers
    expected = 6 * tokens * matmul_params + attention
    assert analytic_profile(spec, H100).flops_per_microbatch == pytest.approx(expected, rel=0.02)


KERNEL_OVERHEAD_MS = 0.005   # what a GPU preset charges per kernel (DeviceType's default, 5 us)


def test_roofline_takes_the_slower_of_compute_and_memory():
    device = H100.device
    assert device.kernel_overhead_us == 5.0
    rate = device.peak_tflops * 1e12 * device.efficiency
    compute_bound = Kernel(flops=1e12, bytes=1e6)
    memory_bound = Kernel(flops=1e6, bytes=1e10)
    assert kernel_ms(compute_bound, device) == pytest.approx(1e12 / rate * 1e3 + KERNEL_OVERHEAD_MS)
    # memory-bound kernels stream 0.91 of the datasheet's bandwidth on a GPU (measured: benchmarks/gpu_kernels.py)
    assert kernel_ms(memory_bound, device) == pytest.approx(
        1e10 / (0.91 * device.memory_bandwidth_gb_s * 1e9) * 1e3 + KERNEL_OVERHEAD_MS)
    assert kernel_ms(Kernel(flops=1e12, recomputed_flops=1e12), device) == pytest.approx(
        2e12 / rate * 1e3 + KERNEL_OVERHEAD_MS)
    assert pass_ms((compute_bound, memory_bound), device) == pytest.approx(
        kernel_ms(compute_bound, device) + kernel_ms(memory_bound, device))


def core_forward_flops(seq_len, window=None, chunk=None):
    return flops(attention_core(batch=1, seq_len=seq_len, heads=8, kv_heads=8, qk_dim=128, v_dim=128,
                                window=window, dtype_bytes=2, chunk=chunk).forward)


def test_chunked_attention_is_causal_up_to_its_chunk_and_grows_linearly_beyond():
    assert core_forward_flops(8192, chunk=8192) == core_forward_flops(8192)
    assert core_forward_flops(65536, chunk=8192) / core_forward_flops(32768, chunk=8192) == pytest.approx(2)
    # a chunk's query sees (c + 1) / 2 keys on average, a window's up to w: half the work at long sequences
    assert core_forward_flops(65536, chunk=8192) / core_forward_flops(65536, window=8192) == pytest.approx(
        0.5, rel=0.07)


def test_attention_grows_quadratically_and_a_window_caps_it():
    assert core_forward_flops(8192) / core_forward_flops(4096) == pytest.approx(4, rel=0.001)
    assert core_forward_flops(65536, window=1024) / core_forward_flops(32768, window=1024) == pytest.approx(
        2, rel=0.02)
    assert core_forward_flops(4096, window=1024) < core_forward_flops(4096) / 1.5


def test_linear_attention_and_mamba_grow_linearly():
    for mixer in (LinearAttentionMixer(num_heads=16, head_dim=128, variant="gated_delta", num_key_heads=8),
                  LinearAttentionMixer(num_heads=16, head_dim=128, variant="lightning")):
        short, long = (flops(linear_attention_core(mixer, batch=1, seq_len=s, dtype_bytes=2).forward)
                       for s in (4096, 8192))
        assert long / short == pytest.approx(2)
    mamba = Mamba2Mixer(num_heads=128, head_dim=64, state_size=128, n_groups=8)
    short, long = (flops(ssd_scan(mamba, batch=1, seq_len=s, dtype_bytes=2).forward) for s in (4096, 8192))
    assert long / short == pytest.approx(2)
    mamba1 = MambaMixer(inner_size=8192, state_size=16, dt_rank=256)
    short, long = (flops(selective_scan(mamba1, tokens=s, dtype_bytes=2).forward) for s in (4096, 8192))
    assert long / short == pytest.approx(2)


def test_mamba1_forward_flops_are_its_projections_conv_and_mamba_ssm_selective_scan_count():
    """Falcon-Mamba-7B's mixer per token: 2 FLOPs per projection weight (in, x, dt, out), 2 per conv tap and
    channel, and mamba_ssm's selective_scan_flop_jit: 9·d_inner·N plus d_inner each for the D skip and z gate."""
    hidden, inner, state, rank, kernel, tokens = 4096, 8192, 16, 256, 4, 2 * 1024
    mixer = MambaMixer(inner_size=inner, state_size=state, dt_rank=rank, conv_kernel=kernel)
    cost = mamba_cost(mixer, hidden=hidden, batch=2, seq_len=1024, dtype_bytes=2)
    projections = hidden * 2 * inner + inner * (rank + 2 * state) + rank * inner + inner * hidden
    expected = tokens * (2 * projections + 2 * kernel * inner + inner * (9 * state + 2))
    assert flops(cost.forward) == pytest.approx(expected, rel=1e-12)
    # The fused scan re-runs its forward in the backward instead of storing the states.
    assert sum(kernel.recomputed_flops for kernel in cost.backward_input) == pytest.approx(
        tokens * inner * (9 * state + 2), rel=1e-12)
    assert cost.params == projections + inner + inner * (kernel + 1) + inner * state + inner   # + dt bias, conv, A, D


def decoder_forward_ms(mixer, seq_len):
    spec = ModelSpec(name="m", hidden_size=4096, vocab_size=1000, seq_len=seq_len,
                     layers=(LayerSpec(kind="decoder", mixer=mixer),))
    return analytic_profile(spec, H100).layers[0].forward


def test_long_sequences_make_full_attention_layers_dearer_than_linear_and_mamba_layers():
    attention = AttentionMixer(num_heads=32, num_kv_heads=8, head_dim=128)
    mamba = Mamba2Mixer(num_heads=128, head_dim=64, state_size=128, n_groups=8)
    growth = {name: decoder_forward_ms(mixer, 32768) / decoder_forward_ms(mixer, 4096)
              for name, mixer in (("attention", attention), ("mamba", mamba))}
    assert growth["attention"] > 2 * 8        # 8x the tokens: the quadratic core makes it super-linear
    assert growth["mamba"] == pytest.approx(8, rel=0.15)


def test_moe_flops_follow_top_k_while_parameters_follow_the_expert_count():
    def moe(experts, top_k):
        return moe_cost(MoEMLP(num_experts=experts, top_k=top_k, expert_intermediate_size=512),
                        hidden=1024, tokens=4096, dtype_bytes=2)
    expert_flops = {k: flops(moe(64, k).forward) for k in (2, 4)}
    per_routed_copy = 2 * 4096 * 3 * 1024 * 512   # gate/up and down for every token's copy
    assert expert_flops[4] - expert_flops[2] == pytest.approx(2 * per_routed_copy, rel=0.01)
    # More experts at the same top_k only widen the router projection (plus its softmax over the logits).
    extra_router = 2 * 4096 * 1024 * (256 - 64)
    assert flops(moe(256, 2).forward) - flops(moe(64, 2).forward) == pytest.approx(extra_router, rel=0.01)
    assert moe(256, 2).params == pytest.approx(4 * moe(64, 2).params, rel=0.01)
    assert moe(64, 2).active_params == 1024 * 64 + 2 * 3 * 1024 * 512


def test_moe_layers_compute_like_their_active_parameters_not_their_total():
    spec = load_model_preset("mixtral-8x7b")
    cost = layer_cost(spec.layers[1], spec)
    tokens = spec.seq_len
    assert flops(cost.backward_weight) == pytest.approx(2 * tokens * cost.active_params, rel=0.01)
    assert cost.params > 3.5 * cost.active_params


@pytest.mark.parametrize("name", ["gemma-2-9b", "gemma-3-27b"])
def test_the_big_vocabulary_head_costs_more_than_a_decoder_layer(name):
    profile = analytic_profile(load_model_preset(name), H100)
    head, decoders = profile.layers[-1], profile.layers[1:-1]
    heaviest = max(decoders, key=lambda layer: layer.forward + layer.backward)
    assert head.forward > 2 * heaviest.forward
    assert head.backward > 2 * heaviest.backward
    assert head.activation_bytes > heaviest.activation_bytes


class _LogitTraffic(TorchDispatchMode):
    """Bytes each aten op reads and writes in tensors at least ``numel`` large (the logits and their fp32 copies;
    per-token rows are left out), as the ops are dispatched: a view moves nothing, a gather or scatter by index only
    the rows it picks, an ``out=`` tensor is written, not read."""

    def __init__(self, numel: int):
        super().__init__()
        self.numel, self.bytes = numel, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view or func.__name__.startswith("index"):
            return out
        inputs = (args, {key: value for key, value in kwargs.items() if key != "out"})
        for tensor in tree_leaves(inputs) + tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.numel() >= self.numel:
                self.bytes += tensor.numel() * tensor.element_size()
        return out


def test_the_heads_cross_entropy_moves_what_megatron_cores_own_code_moves():
    """The head's cross-entropy kernels against Megatron-Core's ``vocab_parallel_cross_entropy`` run on BF16 logits
    (one process, TP 1), its memory traffic counted op by op as torch dispatches them."""
    tokens, vocab = 64, 512
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no Transformer Engine or Apex here: Megatron-Core says so
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel.cross_entropy import vocab_parallel_cross_entropy
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        parallel_state.initialize_model_parallel(1, 1)
        logits = torch.randn(tokens, 1, vocab, dtype=torch.bfloat16, requires_grad=True)
        target = torch.randint(vocab, (tokens, 1))
        forward, backward = _LogitTraffic(tokens * vocab), _LogitTraffic(tokens * vocab)
        with forward:
            loss = vocab_parallel_cross_entropy(logits, target)
        with backward:
            loss.sum().backward()
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    cost = cross_entropy(tokens, vocab, dtype_bytes=2)
    assert sum(kernel.bytes for kernel in cost.forward) == forward.bytes
    assert sum(kernel.bytes for kernel in cost.backward_input) == backward.bytes
    assert cost.activation_bytes == 4 * tokens * vocab   # the fp32 softmax it saves (ctx.save_for_backward)


def _backward_peak_bytes(loss: torch.Tensor) -> int:
    """The most bytes ``loss.backward()`` has allocated and not yet freed at once, from the CPU allocator's events as
    torch's profiler records them (tensors allocated before, such as the kept softmax, are not counted)."""
    with warnings.catch_warnings(), torch.profiler.profile(profile_memory=True) as profiler:
        warnings.simplefilter("ignore")
        loss.backward()
    events = sorted((event for event in profiler.profiler.kineto_results.events() if event.name() == "[memory]"),
                    key=lambda event: event.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def test_the_loss_backward_allocates_what_each_frameworks_cross_entropy_allocates():
    """What the loss's backward allocates beside the kept softmax (``loss_backward_bytes``), measured on each
    framework's own code with BF16 logits (one process, a one-rank group): Megatron-Core's
    ``vocab_parallel_cross_entropy``; PyTorch's ``F.cross_entropy(pred.float(), labels)`` as torchtitan calls it,
    whole and (under TP) on vocabulary-sharded DTensor logits in ``loss_parallel()``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel

    tokens, vocab = 1024, 4096
    logits = torch.randn(tokens, vocab, dtype=torch.bfloat16)
    target = torch.randint(vocab, (tokens,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no Transformer Engine or Apex here: Megatron-Core says so
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel.cross_entropy import vocab_parallel_cross_entropy
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        parallel_state.initialize_model_parallel(1, 1)
        pred = logits[:, None].clone().requires_grad_()
        megatron = _backward_peak_bytes(vocab_parallel_cross_entropy(pred, target[:, None]).sum())
        pred = logits.clone().requires_grad_()
        whole = _backward_peak_bytes(F.cross_entropy(pred.float(), target))
        pred = distribute_tensor(logits, init_device_mesh("cpu", (1,)), [Shard(1)]).requires_grad_()
        with loss_parallel():
            sharded = _backward_peak_bytes(F.cross_entropy(pred.float(), target))
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    measured = {("fused", 1): megatron, ("pytorch", 1): whole, ("eager", 1): whole, ("pytorch", 8): sharded}
    for (name, tp), peak in measured.items():
        assert loss_backward_bytes(name, tp) * tokens * vocab == pytest.approx(peak, rel=0.01), (name, tp)
    assert loss_backward_bytes("fused", 8) == loss_backward_bytes("fused", 1)


def test_profile_lines_up_with_the_spec():
    spec = load_model_preset("tiny-hybrid")
    profile = analytic_profile(spec, load_cluster_preset("cpu-host"))
    assert [layer.name for layer in profile.layers] == spec.layer_names()
    assert [layer.kind for layer in profile.layers] == [layer.kind for layer in spec.layers]
    assert profile.model == "tiny-hybrid" and profile.device == "CPU" and profile.source == "analytic"
    assert (profile.microbatch_size, profile.seq_len) == (1, 32)
    assert load_profile(profile.to_dict()) == profile
    assert all(layer.forward > 0 and layer.activation_bytes > 0 for layer in profile.layers)


def test_profile_boundary_and_parameter_bytes():
    spec = small_dense_spec()
    profile = analytic_profile(spec, H100)
    embed, block, head = profile.layers[0], profile.layers[1], profile.layers[-1]
    assert embed.backward_input == 0 and embed.backward_weight > 0
    assert embed.output_bytes == block.output_bytes == 2 * 32 * 64 * 2
    assert head.output_bytes == 4
    assert block.param_bytes == 2 * layer_cost(spec.layers[1], spec).params
    assert profile.flops_per_microbatch == pytest.approx(
        sum(layer_cost(layer, spec).model_flops() for layer in spec.layers))


def test_small_dense_layer_activation_bytes_by_hand():
    spec = small_dense_spec()
    tokens, h, e = 64, 64, 2
    attention = (e * tokens * h + 4 * tokens       # pre-norm input and its fp32 1/rms
                 + e * tokens * h                 # QKV projection input
                 + e * tokens * (64 + 32 + 32)    # Q, K, V after the rotary embedding
                 + e * tokens * 64                # attention output (the output projection's input)
                 + 4 * tokens * 4)                # fp32 log-sum-exp per query and head
    mlp = (e * tokens * h + 4 * tokens + e * tokens * h
           + e * tokens * 2 * 128                 # gate/up output
           + e * tokens * 128)                    # activation output (the down projection's input)
    assert analytic_profile(spec, H100).layers[1].activation_bytes == attention + mlp


def test_fp32_doubles_the_bytes_but_not_the_flops():
    bf16, fp32 = small_dense_spec(), small_dense_spec(dtype="fp32")
    bf16_cost, fp32_cost = layer_cost(bf16.layers[1], bf16), layer_cost(fp32.layers[1], fp32)
    assert flops(fp32_cost.forward) == flops(bf16_cost.forward)
    assert sum(k.bytes for k in fp32_cost.forward) > 1.9 * sum(k.bytes for k in bf16_cost.forward)
    assert analytic_profile(fp32, H100).layers[1].param_bytes == 4 * fp32_cost.params


def test_micro_batch_scales_work_linearly():
    one, two = small_dense_spec(micro_batch_size=1), small_dense_spec(micro_batch_size=2)
    assert flops(layer_cost(two.layers[1], two).forward) == pytest.approx(
        2 * flops(layer_cost(one.layers[1], one).forward))


def test_every_preset_profiles_on_every_cluster():
    from planner.cluster import preset_names
    from planner.spec.presets import model_preset_names
    for model in model_preset_names():
        spec = load_model_preset(model)
        for cluster in preset_names():
            profile = analytic_profile(spec, load_cluster_preset(cluster))
            assert profile.num_layers == spec.num_layers


def test_every_kernel_pays_the_devices_own_fixed_overhead():
    """On a device with no compute or memory limit to speak of, a pass costs its kernel count times the
    device's per-kernel overhead: the CPU preset's eager-dispatch cost shows up in every layer."""
    spec = load_model_preset("tiny-llama")
    unlimited = dataclasses.replace(H100.device, peak_tflops=1e12, memory_bandwidth_gb_s=1e12)
    for overhead_us in (5.0, 55.0):
        device = dataclasses.replace(unlimited, kernel_overhead_us=overhead_us)
        for layer in spec.layers:
            cost = layer_cost(layer, spec)
            for kernels in (cost.forward, cost.backward_input, cost.backward_weight):
                assert pass_ms(kernels, device) == pytest.approx(len(kernels) * overhead_us * 1e-3, rel=1e-6)
