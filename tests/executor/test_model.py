"""Layer modules compute what their papers define, are causal, and initialise identically on any rank."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from executor.running.capacity import check_capacity
from executor.model import build_layers, layer_parameter_counts, scale_spec
from executor.model.attention import apply_rotary
from executor.model.mlp import GatedMLP, load_balancing_loss
from executor_plans import every_kind_spec, one_f_one_b
from planner.spec.presets import load_model_preset, model_preset_names

SPEC = every_kind_spec()


def layer(index, dtype=torch.float64):
    return build_layers(SPEC, [index], seed=0, dtype=dtype)[index]


def hidden(seed=0, batch=2):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, SPEC.seq_len, SPEC.hidden_size, dtype=torch.float64, generator=generator)


def test_a_layer_gets_the_same_weights_whichever_layers_are_built_beside_it():
    alone = build_layers(SPEC, [4], seed=7)[4].state_dict()
    together = build_layers(SPEC, range(SPEC.num_layers), seed=7)[4].state_dict()
    other_seed = build_layers(SPEC, [4], seed=8)[4].state_dict()
    assert all(torch.equal(alone[name], together[name]) for name in alone)
    assert not all(torch.equal(alone[name], other_seed[name]) for name in alone)


@pytest.mark.parametrize("index", range(1, 7))
def test_every_block_is_causal(index):
    module = layer(index)
    x = hidden()
    changed = x.clone()
    changed[:, 7] += 1.0
    before, after = module(x), module(changed)
    torch.testing.assert_close(before[:, :7], after[:, :7], rtol=0, atol=1e-12)
    assert (before[:, 7:] - after[:, 7:]).abs().max() > 1e-6


@pytest.mark.parametrize("placement", ["pre", "post", "sandwich"])
def test_a_decoders_norms_sit_where_the_models_block_norms_puts_them(placement):
    """x + f(norm(x)), x + norm(f(x)) or x + norm(f(norm(x))) for each sublayer, computed here from the block's own
    mixer, MLP and norms (their weights moved off 1 so that a norm left out or put twice shows); the weights a
    pre-norm block had are the same, and a sandwich holds two norms more a sublayer."""
    spec = dataclasses.replace(SPEC, block_norms=placement)
    block = build_layers(spec, [1], seed=0, dtype=torch.float64)[1]
    with torch.no_grad():
        for module in block.modules():
            if module.__class__.__name__ in ("RMSNorm", "LayerNorm"):
                module.weight.uniform_(0.5, 1.5)
    names = {name for name, _ in block.named_parameters()}
    pre_names = {name for name, _ in layer(1).named_parameters()}
    if placement == "pre":
        assert names == pre_names
    norms = [block.mixer_norm, block.mixer_post_norm, block.mlp_norm, block.mlp_post_norm]
    before, after = placement in ("pre", "sandwich"), placement in ("post", "sandwich")
    assert [not isinstance(norm, torch.nn.Identity) and norm is not None for norm in norms] == [before, after] * 2
    x = hidden()

    def sublayer(pre, function, post, value):
        out = function(pre(value) if before else value)
        return post(out) if after else out

    x1 = x + sublayer(block.mixer_norm, block.mixer, block.mixer_post_norm, x)
    expected = x1 + sublayer(block.mlp_norm, block.mlp, block.mlp_post_norm, x1)
    torch.testing.assert_close(block(x), expected, rtol=1e-12, atol=1e-12)
    if placement == "sandwich":
        assert len(names - pre_names) == 2 and all("post_norm" in name for name in names - pre_names)


@pytest.mark.parametrize("after", [False, True])
def test_qk_normed_attention_computes_as_transformers_qwen3_and_hunyuan_do(after):
    """A QK-normed attention with the norm before the rotary embedding against ``Qwen3Attention``, and after it
    (``qk_norm_after_rotary``) against ``HunYuanDenseV1Attention``, each with the same weights (the norms' moved off
    1, so that their order shows) and their default rotary table: the same output, to the float32 their norms
    compute in."""
    from planner.spec.model import AttentionMixer
    from executor.model.attention import Attention
    from executor.model.norm import RMSNorm
    if after:
        from transformers import HunYuanDenseV1Config as Config
        from transformers.models.hunyuan_v1_dense import modeling_hunyuan_v1_dense as family
        theirs_class, rotary_class, norms = (family.HunYuanDenseV1Attention, family.HunYuanDenseV1RotaryEmbedding,
                                             ("query_layernorm", "key_layernorm"))
    else:
        from transformers import Qwen3Config as Config
        from transformers.models.qwen3 import modeling_qwen3 as family
        theirs_class, rotary_class, norms = family.Qwen3Attention, family.Qwen3RotaryEmbedding, ("q_norm", "k_norm")
    ours_eps = RMSNorm(8).eps
    config = Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=64,
                    num_hidden_layers=1, vocab_size=64, rope_theta=10_000.0, rms_norm_eps=ours_eps,
                    attn_implementation="eager")
    theirs = theirs_class(config, 0).double().eval()
    ours = Attention(32, AttentionMixer(num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True,
                                        qk_norm_after_rotary=after)).double()
    ours.init_weights(torch.Generator().manual_seed(1))
    with torch.no_grad():
        for norm in (ours.q_norm, ours.k_norm):
            norm.weight.uniform_(0.5, 1.5)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(theirs, name).weight.copy_(getattr(ours, name).weight)
        getattr(theirs, norms[0]).weight.copy_(ours.q_norm.weight)
        getattr(theirs, norms[1]).weight.copy_(ours.k_norm.weight)
    x = hidden()[:, :, :32] * 3
    # the default rotary table of ``rotary_class``, in float64 (its forward rounds it to float32)
    inv_freq = 1.0 / (10_000.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    angles = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * inv_freq[None, :]
    table = torch.cat([angles, angles], dim=-1)
    reference = rotary_class(config)(x, torch.arange(x.shape[1])[None])
    torch.testing.assert_close(reference[0][0].double(), table.cos(), rtol=0, atol=1e-6)
    causal = torch.full((x.shape[1], x.shape[1]), float("-inf"), dtype=torch.float64).triu(1)
    expected = theirs(x, (table.cos()[None], table.sin()[None]), causal[None, None])[0]
    # their RMSNorm computes in float32 whatever the input: 1e-8 here
    torch.testing.assert_close(ours(x), expected, rtol=1e-6, atol=1e-7)
    ours.qk_norm_after_rotary = not after   # the other order is another function, far outside that
    assert (ours(x) - expected).abs().max() > 1e-3 * expected.abs().max()


@pytest.mark.parametrize("family", ["gemma2", "granite"])
def test_scaled_and_soft_capped_attention_computes_as_transformers_gemma2_and_granite_do(family):
    """Gemma 2's attention (scores scaled by ``query_pre_attn_scalar ** -0.5`` and soft-capped) against
    ``Gemma2Attention``, Granite's (scaled by ``attention_multiplier``) against ``GraniteAttention``, with the same
    weights and their default rotary table: the same output; without the scalars, another one."""
    from planner.spec.model import AttentionMixer
    from executor.model.attention import Attention
    shape = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=64,
                 num_hidden_layers=1, vocab_size=64, rope_theta=10_000.0, attn_implementation="eager")
    if family == "gemma2":
        from transformers import Gemma2Config
        from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention
        theirs = Gemma2Attention(Gemma2Config(**shape, query_pre_attn_scalar=20, attn_logit_softcapping=2.0), 0)
        scalars = {"softmax_scale": 20 ** -0.5, "softcap": 2.0}
    else:
        from transformers import GraniteConfig
        from transformers.models.granite.modeling_granite import GraniteAttention
        theirs = GraniteAttention(GraniteConfig(**shape, attention_multiplier=0.3), 0)
        scalars = {"softmax_scale": 0.3}
    theirs = theirs.double().eval()
    ours = Attention(32, AttentionMixer(num_heads=4, num_kv_heads=2, head_dim=8, **scalars)).double()
    plain = Attention(32, AttentionMixer(num_heads=4, num_kv_heads=2, head_dim=8)).double()
    ours.init_weights(torch.Generator().manual_seed(1))
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(theirs, name).weight.copy_(getattr(ours, name).weight)
            getattr(plain, name).weight.copy_(getattr(ours, name).weight)
    x = hidden()[:, :, :32] * 3
    inv_freq = 1.0 / (10_000.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    angles = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * inv_freq[None, :]
    table = torch.cat([angles, angles], dim=-1)
    causal = torch.full((x.shape[1], x.shape[1]), float("-inf"), dtype=torch.float64).triu(1)
    expected = theirs(x, (table.cos()[None], table.sin()[None]), causal[None, None])[0]
    # their eager attention's softmax runs in float32 whatever the input: a few 1e-9 here
    torch.testing.assert_close(ours(x), expected, rtol=1e-6, atol=1e-7)
    assert (plain(x) - expected).abs().max() > 1e-3 * expected.abs().max()


def test_the_models_scalars_scale_the_embedding_each_sublayer_and_the_logits_and_cap_them():
    """By hand: the embedding's rows times ``embedding_multiplier``; a block's x + r * f(x) with f the pre-norm
    sublayer; the head's loss the cross-entropy of ``c * tanh(m * z / c)`` over its logits ``z``."""
    spec = dataclasses.replace(SPEC, embedding_multiplier=3.0, residual_multiplier=0.25, logits_multiplier=0.5,
                               logits_softcap=2.0)
    built = build_layers(spec, range(spec.num_layers), seed=0, dtype=torch.float64)
    plain = build_layers(SPEC, range(SPEC.num_layers), seed=0, dtype=torch.float64)
    tokens = torch.randint(0, SPEC.vocab_size, (2, SPEC.seq_len), generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(built[0](tokens), 3.0 * plain[0](tokens), rtol=1e-12, atol=1e-12)
    block, reference, x = built[1], plain[1], hidden()
    x1 = x + 0.25 * reference.mixer(reference.mixer_norm(x))
    expected = x1 + 0.25 * reference.mlp(reference.mlp_norm(x1))
    torch.testing.assert_close(block(x), expected, rtol=1e-12, atol=1e-12)
    last = spec.num_layers - 1
    head = built[last]
    logits = head.norm(x) @ head.weight.T
    capped = 2.0 * torch.tanh(0.5 * logits / 2.0)
    expected_loss = F.cross_entropy(capped.reshape(-1, SPEC.vocab_size), tokens.reshape(-1))
    torch.testing.assert_close(head(x, tokens), expected_loss, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(plain[last](x, tokens), expected_loss)


def test_sliding_window_gqa_attention_matches_an_explicit_softmax():
    block = layer(2)                     # 4 query heads, 1 kv head, window 4
    attention = block.mixer
    x = block.mixer_norm(hidden())
    q = apply_rotary(attention.q_proj(x).view(2, -1, 4, 8).transpose(1, 2))
    k = apply_rotary(attention.k_proj(x).view(2, -1, 1, 8).transpose(1, 2))
    v = attention.v_proj(x).view(2, -1, 1, 8).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    i, j = torch.meshgrid(torch.arange(SPEC.seq_len), torch.arange(SPEC.seq_len), indexing="ij")
    scores = scores.masked_fill(~((j <= i) & (i - j < 4)), float("-inf"))
    expected = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, SPEC.seq_len, 32)
    torch.testing.assert_close(attention(x), attention.o_proj(expected), rtol=1e-10, atol=1e-12)


def test_gated_delta_rule_matches_its_textbook_form():
    mixer = layer(3).mixer
    x = hidden()
    raw_q, raw_k, v = (projection(x).view(2, -1, 2, 8) for projection in (mixer.q_proj, mixer.k_proj, mixer.v_proj))
    q = F.normalize(raw_q, dim=-1) / math.sqrt(8)
    k = F.normalize(raw_k, dim=-1)
    beta = torch.sigmoid(mixer.beta_proj(x))
    alpha = torch.exp(-torch.exp(mixer.A_log) * F.softplus(mixer.decay_proj(x) + mixer.dt_bias))
    state = torch.zeros(2, 2, 8, 8, dtype=torch.float64)
    eye = torch.eye(8, dtype=torch.float64)
    outputs = []
    for t in range(SPEC.seq_len):
        k_t, v_t = k[:, t], v[:, t]
        b_t, a_t = beta[:, t, :, None, None], alpha[:, t, :, None, None]
        # S_t = S_{t-1} a_t (I - b_t k_t k_t^T) + b_t v_t k_t^T   (Yang et al. 2024, gated delta rule)
        decayed = state @ (a_t * (eye - b_t * k_t[..., :, None] * k_t[..., None, :]))
        state = decayed + b_t * v_t[..., :, None] * k_t[..., None, :]
        outputs.append((state @ q[:, t, ..., None]).squeeze(-1))
    expected = torch.stack(outputs, dim=2)
    heads_first = [t.transpose(1, 2) for t in (raw_q, raw_k, v)]
    torch.testing.assert_close(mixer._gated_delta(*heads_first, mixer.beta_proj(x), mixer.decay_proj(x)), expected,
                               rtol=1e-10, atol=1e-12)


def test_gated_delta_short_conv_is_causal_depthwise_over_q_k_v_then_silu():
    mixer = layer(3).mixer
    x = hidden()
    projected = [projection(x) for projection in (mixer.q_proj, mixer.k_proj, mixer.v_proj)]
    mixed = torch.cat(projected, dim=-1)                                       # (b, s, channels)
    taps = mixer.conv.weight[:, 0, :]                                         # (channels, kernel)
    kernel = taps.shape[1]
    expected = torch.zeros_like(mixed)
    for t in range(SPEC.seq_len):
        for tap in range(kernel):          # the last tap reads token t itself, the first t - (kernel - 1)
            source = t - (kernel - 1) + tap
            if source >= 0:
                expected[:, t] += taps[:, tap] * mixed[:, source]
    assert kernel == 4 and mixer.conv.bias is None
    torch.testing.assert_close(torch.cat(mixer._short_conv(*projected), dim=-1), F.silu(expected),
                               rtol=1e-12, atol=1e-12)


def test_lightning_attention_parallel_form_matches_its_recurrence():
    mixer = layer(6).mixer
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, SPEC.seq_len, 8, dtype=torch.float64, generator=generator) for _ in range(3))
    slopes = [2.0 ** (-8.0 * (h + 1) / 2) for h in range(2)]
    expected = torch.zeros(1, 2, SPEC.seq_len, 8, dtype=torch.float64)
    for h in range(2):
        state = torch.zeros(8, 8, dtype=torch.float64)
        for t in range(SPEC.seq_len):
            state = math.exp(-slopes[h]) * state + F.silu(v[0, h, t])[:, None] * F.silu(k[0, h, t])[None, :]
            expected[0, h, t] = state @ F.silu(q[0, h, t]) / math.sqrt(8)
    torch.testing.assert_close(mixer._lightning(q, k, v), expected, rtol=1e-10, atol=1e-12)


def test_moe_equals_a_per_token_weighted_sum_of_its_top_k_experts_plus_shared():
    moe = layer(3).mlp
    tokens = hidden(seed=2, batch=1)[0]
    probabilities = torch.softmax(moe.router(tokens), dim=-1)
    expected = torch.zeros_like(tokens)
    for position in range(tokens.shape[0]):
        top = torch.topk(probabilities[position], 2)
        weights = top.values / top.values.sum()
        for weight, expert in zip(weights, top.indices):
            expected[position] += weight * moe.experts[int(expert)](tokens[position:position + 1])[0]
        expected[position] += moe.shared(tokens[position:position + 1])[0]
    torch.testing.assert_close(moe(tokens[None])[0], expected, rtol=1e-10, atol=1e-12)


def test_group_limited_routing_chooses_the_best_experts_of_the_best_groups():
    """Megatron-Core's group_limited_topk, token by token: groups of consecutive experts scored by their best
    top_k / group_topk probabilities, the best groups kept, the top_k best experts of theirs chosen."""
    from executor.model.mlp import choose_experts
    generator = torch.Generator().manual_seed(3)
    probabilities = torch.softmax(torch.randn(64, 16, dtype=torch.float64, generator=generator), dim=-1)
    weights, chosen = choose_experts(probabilities, 4, groups=4, group_topk=2)
    differs = 0
    for row, (token_weights, token_experts) in enumerate(zip(weights, chosen)):
        scores = [sorted(probabilities[row, 4 * g:4 * g + 4].tolist())[-2:] for g in range(4)]
        kept = sorted(range(4), key=lambda g: sum(scores[g]))[-2:]
        allowed = [e for e in range(16) if e // 4 in kept]
        best = sorted(allowed, key=lambda e: probabilities[row, e].item())[-4:]
        assert sorted(token_experts.tolist()) == sorted(best)
        torch.testing.assert_close(token_weights, probabilities[row, token_experts])
        differs += sorted(best) != sorted(torch.topk(probabilities[row], 4).indices.tolist())
    assert differs > 0   # the limit changed some tokens' choice
    free = choose_experts(probabilities, 4)
    torch.testing.assert_close(free.values, torch.topk(probabilities, 4, dim=-1).values)


def test_load_balancing_loss_is_experts_times_routed_share_times_mean_probability():
    generator = torch.Generator().manual_seed(5)
    probabilities = torch.softmax(torch.randn(10, 4, generator=generator, dtype=torch.float64), dim=-1)
    chosen = torch.topk(probabilities, 2, dim=-1).indices
    expected = 0.0
    for expert in range(4):
        routed_share = sum(int(expert in row) for row in chosen.tolist()) / (10 * 2)
        mean_probability = sum(float(probabilities[token, expert]) for token in range(10)) / 10
        expected += 4 * routed_share * mean_probability
    assert float(load_balancing_loss(probabilities, chosen, 2)) == pytest.approx(expected, rel=1e-12)
    uniform = torch.full((8, 4), 0.25, dtype=torch.float64)
    evenly = torch.tensor([[0, 1], [2, 3]] * 4)
    assert float(load_balancing_loss(uniform, evenly, 2)) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("scale", [1.0, 0.25])
def test_moe_balancing_loss_reaches_the_router_times_its_coefficient_and_the_loss_scale(scale):
    moe = layer(3).mlp
    assert moe.aux_loss_coeff == 0.05
    moe.loss_scale = scale
    tokens = hidden(seed=4, batch=1)[0]
    out = moe(tokens[None])
    out.backward(torch.zeros_like(out))   # no gradient from the output: only the balancing loss's remains
    got = moe.router.weight.grad.clone()
    moe.router.weight.grad = None
    # Independently: the same loss written out from the router, differentiated by autograd.
    probabilities = torch.softmax(moe.router(tokens), dim=-1)
    chosen = torch.topk(probabilities, 2, dim=-1).indices.tolist()
    share = torch.tensor([sum(expert in row for row in chosen) / (len(chosen) * 2) for expert in range(4)],
                         dtype=torch.float64)
    (scale * 0.05 * 4 * (share * probabilities.mean(dim=0)).sum()).backward()
    assert got.abs().max() > 0
    torch.testing.assert_close(got, moe.router.weight.grad, rtol=1e-10, atol=1e-14)
    assert all(p.grad is None or p.grad.abs().max() == 0 for p in moe.experts.parameters())


def test_head_loss_is_token_mean_cross_entropy_times_the_scale():
    head = layer(SPEC.num_layers - 1)
    x = hidden()
    labels = torch.randint(0, SPEC.vocab_size, (2, SPEC.seq_len))
    logits = head.norm(x) @ head.weight.T
    expected = -torch.log_softmax(logits, -1).gather(-1, labels[..., None]).mean() * 0.25
    torch.testing.assert_close(head(x, labels, 0.25), expected)


@pytest.mark.parametrize("name", model_preset_names())
def test_scaled_presets_keep_their_layer_pattern_and_fit_a_cpu_run(name):
    spec = load_model_preset(name)
    scaled = scale_spec(spec)
    assert [layer.short for layer in scaled.layers] == [layer.short for layer in spec.layers]
    assert scaled.hidden_size == 64 and scaled.seq_len == 32
    for original, small in zip(spec.layers, scaled.layers):
        if small.mixer is not None and small.mixer.type == "attention" and not getattr(small.mixer, "kv_lora_rank", None):
            assert small.mixer.num_heads % small.mixer.num_kv_heads == 0
        if small.mlp is not None and small.mlp.type == "moe":
            assert small.mlp.num_shared_experts == original.mlp.num_shared_experts
    assert sum(layer_parameter_counts(scaled)) < 20e6
    half = scaled.num_layers // 2
    plan = one_f_one_b([list(range(half)), list(range(half, scaled.num_layers))], num_microbatches=2)
    check_capacity(plan, scaled, device=torch.device("cpu"), dtype=torch.float32, optimizer="adamw")


@pytest.mark.parametrize("name, degrees", [("llama-3-8b", {"tp": 8}),
                                           ("qwen3-30b-a3b", {"tp": 4, "cp": 2, "dp": 2, "ep": 4}),
                                           ("gemma-2-9b", {"tp": 2, "cp": 4}),
                                           ("deepseek-v3", {"tp": 8, "dp": 2, "ep": 2})])
def test_a_model_scaled_for_a_hybrid_plan_splits_over_its_axes_and_keeps_its_query_groups(name, degrees):
    """Llama 3 8B scaled alone has one key/value head, which TP8 cannot split: scaled for the plan it has eight."""
    from executor.running.scope import execution_refusal
    from planner.parallel.config import ParallelConfig

    spec = load_model_preset(name)
    parallel = ParallelConfig(pp=2, num_microbatches=2, **degrees)
    scaled = scale_spec(spec, parallel=parallel)
    half = scaled.num_layers // 2
    plan = one_f_one_b([list(range(half)), list(range(half, scaled.num_layers))], num_microbatches=2)
    plan.parallel = parallel
    assert execution_refusal(plan, scaled) is None
    # scaled alone, what the plan's axes could not split: the heads (Gemma 2's 4 key/value heads split over TP 2, and
    # its odd vocabulary of 4,571 is padded as Megatron-LM pads it)
    naive = execution_refusal(plan, scale_spec(spec))
    assert (naive is None) if name == "gemma-2-9b" else ("key/value heads" in naive.reason)
    for original, small in zip(spec.layers, scaled.layers):
        if small.mixer is not None and small.mixer.type == "attention":
            assert small.mixer.num_kv_heads % parallel.tp == 0
            assert (small.mixer.num_heads // small.mixer.num_kv_heads
                    == min(original.mixer.num_heads // original.mixer.num_kv_heads, 64 // 16))


@pytest.mark.parametrize("name, degrees", [("qwen3-next-80b-a3b", {"tp": 2, "cp": 2, "ep": 2}),
                                           ("nemotron-h-8b", {"tp": 2, "cp": 4}),
                                           ("minimax-text-01", {"tp": 2, "cp": 2})])
def test_recurrent_mixers_scaled_for_a_plan_with_cp_keep_heads_that_tp_x_cp_splits(name, degrees):
    """Under CP the recurrent mixers trade tokens for heads: scaled for the plan, gated delta-net's key heads, lightning
    attention's heads and Mamba-2's heads split over TP x CP (Mamba-2's B/C groups over TP, then over CP or repeated
    across it); scaled alone (4 heads, 2 key heads) they are refused."""
    from executor.running.scope import execution_refusal
    from planner.parallel.config import ParallelConfig

    spec = load_model_preset(name)
    parallel = ParallelConfig(pp=2, num_microbatches=2, **degrees)
    shards = parallel.tp * parallel.cp
    scaled = scale_spec(spec, parallel=parallel)
    half = scaled.num_layers // 2
    plan = one_f_one_b([list(range(half)), list(range(half, scaled.num_layers))], num_microbatches=2)
    plan.parallel = parallel
    assert execution_refusal(plan, scaled) is None
    assert "CP" in execution_refusal(plan, scale_spec(spec)).reason
    for small in scaled.layers:
        if small.mixer is not None and small.mixer.type in ("linear_attention", "mamba2"):
            heads = getattr(small.mixer, "num_key_heads", None) or small.mixer.num_heads
            assert heads % shards == 0 and small.mixer.num_heads % shards == 0
        if small.mixer is not None and small.mixer.type == "mamba2":
            per_rank = small.mixer.n_groups // parallel.tp
            assert small.mixer.n_groups % parallel.tp == 0 and (per_rank % parallel.cp == 0
                                                                 or parallel.cp % per_rank == 0)


HF_FIXTURES = Path(__file__).parents[1] / "planner" / "fixtures" / "hf"


@pytest.mark.parametrize("name", sorted(model_preset_names())
                         + sorted(path.stem for path in HF_FIXTURES.glob("*.json")))
def test_every_split_the_hybrid_search_offers_is_one_the_executor_runs_scaled(name):
    """The planner's rules for what TP, CP, EP and expert TP may split and the executor's (with the model scaled for
    the plan, as a local run scales it) agree: each (tp, cp, ep, etp) the search considers on 128 GPUs at 8,192
    tokens passes the executor's refusal check. (tiny-hybrid mixes MoE layers of 8 and 4 experts: EP 8 was offered.)"""
    from executor.running.scope import execution_refusal
    from planner.cluster import load_cluster_preset
    from planner.parallel.evaluate import Job
    from planner.parallel.search import candidates
    from planner.spec.hf import import_hf_config

    path = HF_FIXTURES / f"{name}.json"
    spec = import_hf_config(json.loads(path.read_text())) if path.exists() else load_model_preset(name)
    splits = {}
    for config, _ in candidates(Job(spec, load_cluster_preset("h100-sxm-16x8"), 128, 8192, 1024), {}):
        splits.setdefault((config.tp, config.cp, config.ep, config.etp), config)
    assert splits
    for key, config in splits.items():
        parallel = dataclasses.replace(config, pp=2, num_microbatches=2, microbatch_size=1)
        scaled = scale_spec(spec, parallel=parallel)
        half = scaled.num_layers // 2
        plan = one_f_one_b([list(range(half)), list(range(half, scaled.num_layers))], num_microbatches=2)
        plan.parallel = parallel
        assert execution_refusal(plan, scaled) is None, key


def test_parameter_counts_match_published_model_sizes():
    assert sum(layer_parameter_counts(load_model_preset("llama-3-8b"))) == pytest.approx(8.03e9, rel=0.01)
    assert sum(layer_parameter_counts(load_model_preset("mixtral-8x7b"))) == pytest.approx(46.7e9, rel=0.01)


def test_what_the_executor_cannot_run_it_refuses_by_name():
    from executor.running.scope import execution_refusal
    from planner.plan import load_plan

    doc = {"format": "adaptis.plan/v2", "strategy": "1f1b", "num_devices": 1, "num_microbatches": 1,
           "stages": [{"layers": [0], "device": 0}], "actions": [["0F0", "0B0"]],
           "parallel": {"pp": 1, "dp": 2, "num_microbatches": 1}}
    assert execution_refusal(load_plan(doc)) is None
    assert execution_refusal(load_plan({**doc, "parallel": {**doc["parallel"], "sharding": "full"}})) is None
    # MoE parallel folding (expert TP 1 under TP) is run; an expert TP between the two is not
    assert execution_refusal(load_plan({**doc, "parallel": {**doc["parallel"], "tp": 2, "etp": 1}})) is None
    for knob, words in (({"precision": "fp8"}, "Transformer Engine"),
                        ({"tp": 4, "etp": 2}, "expert TP 2 is neither TP 4 nor 1")):
        refusal = execution_refusal(load_plan({**doc, "parallel": {**doc["parallel"], **knob}}))
        assert refusal is not None and refusal.field == "plan" and words in refusal.reason


def test_a_plain_mlp_runs_its_activation_squared_relu_or_gelu():
    """down(act(up(x))), act = relu(x)² (Nemotron's) or GELU, computed here from the projections' weights."""
    torch.manual_seed(0)
    x = torch.randn(5, 8, dtype=torch.float64)
    outputs = {}
    for activation, reference in (("squared_relu", lambda h: torch.relu(h) ** 2), ("gelu", F.gelu)):
        mlp = GatedMLP(8, 16, gated=False, bias=True, activation=activation).double()
        mlp.init_weights(torch.Generator().manual_seed(1))
        up, down = mlp.up_proj, mlp.down_proj
        expected = reference(x @ up.weight.T + up.bias) @ down.weight.T + down.bias
        outputs[activation] = mlp(x)
        torch.testing.assert_close(outputs[activation], expected, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(outputs["squared_relu"], outputs["gelu"])


def _same_values_and_gradients(ours, theirs, inputs: tuple[torch.Tensor, ...], parameters=()) -> None:
    """``ours(*inputs)`` equals ``theirs(*inputs)``, and so do the gradients of a random weighting of it for the
    inputs and ``parameters`` (pairs of ours and theirs)."""
    got, expected = ours(*inputs), theirs(*inputs)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    weights = torch.randn_like(expected)
    mine = torch.autograd.grad((got * weights).sum(), (*inputs, *(pair[0] for pair in parameters)))
    other = torch.autograd.grad((expected * weights).sum(), (*inputs, *(pair[1] for pair in parameters)))
    for a, b in zip(mine, other):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_gated_mlps_compute_and_learn_as_transformers_llama_gemma_and_gpt_oss_ones():
    """SwiGLU against ``LlamaMLP``, GeGLU (exact and tanh) against ``Gemma2MLP`` with its ``hidden_activation``, each
    with the same weights: the same output and the same gradients for the input and every weight. gpt-oss's clamped
    SwiGLU against ``GptOssExperts._apply_gate`` (which reads gate and up interleaved), on values beyond the clamp on
    both sides, where its gradients are cut."""
    from transformers import Gemma2Config, GptOssConfig, LlamaConfig
    from transformers.models.gemma2.modeling_gemma2 import Gemma2MLP
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    from transformers.models.llama.modeling_llama import LlamaMLP
    torch.manual_seed(0)
    x = (torch.randn(5, 8, dtype=torch.float64) * 50).requires_grad_()   # pre-activations of order 1
    outputs = {}
    shape = dict(hidden_size=8, intermediate_size=16, num_attention_heads=2)
    for activation, theirs in (("silu", LlamaMLP(LlamaConfig(**shape))),
                               ("gelu", Gemma2MLP(Gemma2Config(**shape, hidden_activation="gelu"))),
                               ("gelu_tanh", Gemma2MLP(Gemma2Config(**shape)))):
        ours = GatedMLP(8, 16, activation=activation).double()
        ours.init_weights(torch.Generator().manual_seed(1))
        theirs = theirs.double()
        with torch.no_grad():
            for name in ("gate_proj", "up_proj", "down_proj"):
                getattr(theirs, name).weight.copy_(getattr(ours, name).weight)
        pairs = [(getattr(ours, name).weight, getattr(theirs, name).weight) for name in ("gate_proj", "up_proj",
                                                                                        "down_proj")]
        _same_values_and_gradients(ours, theirs, (x,), pairs)
        outputs[activation] = ours(x)
    for one, other in (("gelu", "gelu_tanh"), ("silu", "gelu")):   # three functions, not one three times
        assert not torch.allclose(outputs[one], outputs[other], rtol=1e-6, atol=0)
    ours = GatedMLP(8, 16, activation="clamped_swiglu").activation
    experts = GptOssExperts(GptOssConfig(**shape, num_local_experts=1))

    def theirs(gate, up):   # gpt-oss's fused projection holds gate and up interleaved
        return experts._apply_gate(torch.stack((gate, up), dim=-1).flatten(-2))

    gate = (torch.randn(64, 16, dtype=torch.float64) * 6).requires_grad_()
    up = (torch.randn(64, 16, dtype=torch.float64) * 6).requires_grad_()
    assert (gate > 7).any() and (up > 7).any() and (up < -7).any()
    _same_values_and_gradients(ours, theirs, (gate, up))


def test_plain_mlp_activations_are_transformers_ones():
    """The tanh GELU of a plain MLP against both of HF's spellings (``gelu_new``, GPT-2's, written out as a formula;
    ``gelu_pytorch_tanh``, StarCoder's), SiLU against ``silu``, exact GELU against ``gelu``."""
    from transformers.activations import ACT2FN
    torch.manual_seed(0)
    h = (torch.randn(64, 16, dtype=torch.float64) * 3).requires_grad_()
    for ours, hf in (("gelu_tanh", "gelu_new"), ("gelu_tanh", "gelu_pytorch_tanh"), ("silu", "silu"),
                     ("gelu", "gelu")):
        _same_values_and_gradients(GatedMLP(8, 16, gated=False, activation=ours).activation, ACT2FN[hf], (h,))


def test_an_xielu_mlp_computes_and_learns_as_transformers_xielu():
    """Apertus's xIELU against ``transformers``' own ``XIELUActivation`` (its Python path): the same output and the
    same gradients for the input and for both learned scalars, on both sides of zero."""
    from transformers.activations import XIELUActivation
    torch.manual_seed(0)
    h = (torch.randn(64, 16, dtype=torch.float64) * 3).requires_grad_()
    ours = GatedMLP(8, 16, gated=False, activation="xielu").double()
    ours.init_weights(torch.Generator().manual_seed(1))
    theirs = XIELUActivation(dtype=torch.float64)
    with torch.no_grad():   # the same starting values (both from 0.8; ours drawn in float32), then moved from them
        torch.testing.assert_close(ours.activation.alpha_p, theirs.alpha_p, rtol=1e-6, atol=0)
        torch.testing.assert_close(ours.activation.alpha_n, theirs.alpha_n, rtol=1e-6, atol=0)
        for module in (ours.activation, theirs):
            module.alpha_p.copy_(theirs.alpha_p + 0.3)
            module.alpha_n.copy_(theirs.alpha_n - 0.2)
    expected = theirs._xielu_python(h)
    got = ours.activation(h)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    weights = torch.randn_like(expected)
    grads = torch.autograd.grad((got * weights).sum(), (h, ours.activation.alpha_p, ours.activation.alpha_n))
    reference = torch.autograd.grad((expected * weights).sum(), (h, theirs.alpha_p, theirs.alpha_n))
    for mine, other in zip(grads, reference):
        torch.testing.assert_close(mine, other, rtol=1e-12, atol=1e-12)
    assert (h < 0).any() and (h > 0).any()
    # in the MLP: down(xielu(up(x))), its two scalars the MLP's parameters
    x = torch.randn(5, 8, dtype=torch.float64)
    up, down = ours.up_proj, ours.down_proj
    torch.testing.assert_close(ours(x), ours.activation(x @ up.weight.T) @ down.weight.T, rtol=1e-12, atol=1e-12)
    assert {"activation.alpha_p", "activation.alpha_n"} <= dict(ours.named_parameters()).keys()
