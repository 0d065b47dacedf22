"""Parameter counts against published model sizes and against hand counts of single layers."""

from dataclasses import replace

import pytest

from planner.cost import active_parameters, count_parameters, layer_parameters
from planner.spec.presets import load_model_preset

# Published totals (model cards / papers); the specs leave out parts under 1 % (see planner.spec.hf).
PUBLISHED_TOTALS = {
    "llama-3-8b": 8.03e9,
    "mixtral-8x7b": 46.7e9,
    "deepseek-v3": 671e9,
    "deepseek-v2-lite": 15.7e9,
    "gemma-2-9b": 9.24e9,
    "gemma-3-27b": 27.0e9,        # the text model; the vision tower is not pipelined with it
    "nemotron-h-8b": 8.1e9,
    "qwen3-next-80b-a3b": 80e9,
    "minimax-text-01": 456e9,
    "qwen3-30b-a3b": 30.5e9,
    "phi-3.5-moe": 41.9e9,
    "gpt-oss-20b": 20.9e9,
    "glm-4.5-air": 106e9,
    "falcon-mamba-7b": 7.27e9,
    "jamba-v0.1": 52e9,
    "granite-4.0-h-small": 32e9,
    "gpt2": 124e6,
}


@pytest.mark.parametrize("name, published", sorted(PUBLISHED_TOTALS.items()))
def test_total_parameters_match_the_published_size(name, published):
    assert count_parameters(load_model_preset(name)) == pytest.approx(published, rel=0.02)


def vocabulary_parameters(spec) -> int:
    return spec.vocab_size * spec.hidden_size * (1 if spec.tie_embeddings else 2)


@pytest.mark.parametrize("name, published, counts_vocabulary", [
    ("deepseek-v3", 37e9, True),          # DeepSeek counts embedding and head in its 37B activated
    ("mixtral-8x7b", 12.9e9, True),
    ("minimax-text-01", 45.9e9, False),   # MiniMax's 45.9B leaves the vocabulary out
    ("qwen3-next-80b-a3b", 3.0e9, False),
    ("qwen3-30b-a3b", 3.3e9, True),
    ("phi-3.5-moe", 6.6e9, True),
    ("jamba-v0.1", 12e9, True),
    ("granite-4.0-h-small", 9e9, True),
    ("glm-4.5-air", 12e9, False),
])
def test_active_parameters_match_the_published_activated_size(name, published, counts_vocabulary):
    spec = load_model_preset(name)
    active = active_parameters(spec) - (0 if counts_vocabulary else vocabulary_parameters(spec))
    assert active == pytest.approx(published, rel=0.06)


def test_dense_models_activate_every_parameter():
    for name in ("llama-3-8b", "gemma-2-9b", "nemotron-h-8b"):
        spec = load_model_preset(name)
        assert active_parameters(spec) == count_parameters(spec)


def test_llama_layer_parameters_by_hand():
    spec = load_model_preset("llama-3-8b")
    h, kv_width, inner = 4096, 8 * 128, 14336
    attention = h * (h + 2 * kv_width) + h * h
    mlp = 3 * h * inner
    per_layer = layer_parameters(spec)
    assert per_layer[1] == attention + mlp + 2 * h
    assert per_layer[0] == 128256 * h and per_layer[-1] == 128256 * h + h


def test_tied_embedding_table_is_counted_once_but_held_by_both_ends():
    spec = load_model_preset("gemma-2-9b")
    per_layer = layer_parameters(spec)
    table = 256000 * 3584
    assert per_layer[0] == table and per_layer[-1] == table + 3584
    assert count_parameters(spec) == sum(per_layer) - table


def test_mla_layer_parameters_by_hand():
    spec = load_model_preset("deepseek-v3")
    h, heads = 7168, 128
    mla = (h * 1536 + 1536 + 1536 * heads * 192          # query down-projection, its norm, up-projection
           + h * (512 + 64) + 512 + 512 * heads * (128 + 128)   # kv down-projection (+ rotary key), norm, up
           + heads * 128 * h)                                # output projection
    dense_layer = mla + 3 * h * 18432 + 2 * h
    moe_layer = mla + h * 256 + 256 * 3 * h * 2048 + 3 * h * 2048 + 2 * h
    per_layer = layer_parameters(spec)
    assert per_layer[1] == dense_layer and per_layer[4] == moe_layer


def test_mamba2_layer_parameters_by_hand():
    spec = load_model_preset("nemotron-h-8b")
    h, heads, head_dim, state, groups = 4096, 128, 64, 128, 8
    inner = heads * head_dim
    conv_channels = inner + 2 * groups * state
    expected = (h * (2 * inner + 2 * groups * state + heads)   # in_proj: z, x, B, C, dt
                + conv_channels * (4 + 1)                      # depthwise conv weights and bias
                + 3 * heads                                    # A_log, D, dt_bias
                + inner                                        # gated norm
                + inner * h                                    # out_proj
                + h)                                           # the block's pre-norm
    assert layer_parameters(spec)[1] == expected


def test_gated_delta_and_lightning_layer_parameters_by_hand():
    qwen = load_model_preset("qwen3-next-80b-a3b")
    h, value_heads, key_heads, d = 2048, 32, 16, 128
    qkv = 2 * key_heads * d + value_heads * d
    gated_delta = (h * (qkv + value_heads * d) + h * 2 * value_heads + qkv * 4 + 2 * value_heads + d
                   + value_heads * d * h)
    moe = h * 512 + 512 * 3 * h * 512 + 3 * h * 512
    assert layer_parameters(qwen)[1] == gated_delta + moe + 2 * h
    wider = replace(qwen, layers=tuple(replace(layer, mixer=replace(layer.mixer, conv_kernel=6))
                                       if layer.mixer is not None and layer.mixer.type == "linear_attention"
                                       else layer for layer in qwen.layers))
    assert layer_parameters(wider)[1] == layer_parameters(qwen)[1] + 2 * qkv   # two more taps per channel
    minimax = load_model_preset("minimax-text-01")
    h, width = 6144, 64 * 128
    lightning = h * 3 * width + h * width + width + width * h
    assert layer_parameters(minimax)[1] == lightning + h * 32 + 32 * 3 * h * 9216 + 2 * h


def test_a_sandwich_block_costs_two_more_norms_and_a_post_norm_block_as_much_as_a_pre_norm_one():
    """Gemma's four norms a layer against Llama's two (``ModelSpec.block_norms``), by hand: each extra norm is an
    RMSNorm (a LayerNorm with its bias) over the hidden state, its weights, passes and kept input; OLMo 2's norms
    after each sublayer are as many as before it."""
    from planner.cost.analytic import layer_cost
    from planner.cost.primitives import norm
    for preset in ("llama-3-8b", "gpt2"):
        pre = load_model_preset(preset)
        tokens, hidden = pre.micro_batch_size * pre.seq_len, pre.hidden_size
        one = norm(pre.norm, tokens, hidden, 2)
        assert one.params == (2 * hidden if pre.norm == "layernorm" else hidden)
        for index, layer in enumerate(pre.layers):
            if layer.kind != "decoder":
                continue
            base = layer_cost(layer, pre)
            sandwich = layer_cost(layer, replace(pre, block_norms="sandwich"))
            post = layer_cost(layer, replace(pre, block_norms="post"))
            assert post == base
            assert sandwich.params == base.params + 2 * one.params
            assert sandwich.activation_bytes == base.activation_bytes + 2 * one.activation_bytes
            assert len(sandwich.forward) == len(base.forward) + 2 * len(one.forward)
            assert len(sandwich.backward_input) == len(base.backward_input) + 2 * len(one.backward_input)
        sandwich = replace(pre, block_norms="sandwich")
        blocks = sum(layer.kind == "decoder" for layer in pre.layers)
        assert count_parameters(sandwich) == count_parameters(pre) + 2 * blocks * one.params


def test_a_soft_capped_head_pays_a_pass_over_the_logits_and_keeps_its_output():
    """Gemma 2's final logit soft-cap (``ModelSpec.logits_softcap``): one pointwise pass over the logits each way, by
    hand, and their capped copy kept for the backward; multipliers and an attention's cap and scale cost nothing
    (fused into the neighbouring kernels)."""
    from planner.cost.analytic import layer_cost
    spec = load_model_preset("gemma-2-9b")
    logits = spec.micro_batch_size * spec.seq_len * spec.vocab_size
    plain = replace(spec, logits_softcap=None)
    head, capped = layer_cost(plain.layers[-1], plain), layer_cost(spec.layers[-1], spec)
    assert spec.logits_softcap == 30.0 and capped.params == head.params
    assert capped.activation_bytes == head.activation_bytes + 2 * logits
    assert len(capped.forward) == len(head.forward) + 1 and capped.forward[-1].bytes == 2 * 2 * logits
    assert capped.backward_input[-1].bytes == 2 * 3 * logits
    decoder = spec.layers[1]
    scaled = replace(spec, embedding_multiplier=None, residual_multiplier=0.5, logits_multiplier=0.25)
    assert layer_cost(decoder, scaled) == layer_cost(decoder, spec)
    assert layer_cost(scaled.layers[-1], scaled) == capped
    assert layer_cost(spec.layers[0], scaled) == layer_cost(spec.layers[0], spec)
