"""The layer kinds of the 2025-26 HuggingFace families compute what their definitions say: Mamba-1 as
``transformers``' own ``MambaMixer`` (an independent implementation, given the same weights), attention sinks as a
rescaled softmax, QK-norm, LayerNorm blocks and learned positions; every such block is causal; and every imported
HF fixture builds with the planner's parameter count, layer by layer, at full size and scaled down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import MambaConfig
from transformers.models.mamba.modeling_mamba import MambaMixer as HFMambaMixer

from executor.model import build_layers, layer_parameter_counts, scale_spec
from executor.model.attention import apply_rotary, causal_attention, local_attention_mask, merge_heads, split_heads
from executor_plans import modern_kinds_spec
from planner.cost import layer_parameters
from planner.spec.hf import import_hf_config
from planner.spec.model import load_model_spec

SPEC = modern_kinds_spec()
FIXTURES = Path(__file__).parents[1] / "planner" / "fixtures" / "hf"


def layer(index, spec=SPEC):
    return build_layers(spec, [index], seed=0, dtype=torch.float64)[index]


def hidden(seed=0, batch=2):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, SPEC.seq_len, SPEC.hidden_size, dtype=torch.float64, generator=generator)


@pytest.mark.parametrize("index", range(1, SPEC.num_layers - 1))
def test_every_modern_block_is_causal(index):
    module = layer(index)
    x = hidden()
    changed = x.clone()
    changed[:, 7] += 1.0
    before, after = module(x), module(changed)
    torch.testing.assert_close(before[:, :7], after[:, :7], rtol=0, atol=1e-12)
    assert (before[:, 7:] - after[:, 7:]).abs().max() > 1e-6


@pytest.mark.parametrize("index", [3, 4])
def test_mamba1_mixer_equals_transformers_mamba_mixer_with_the_same_weights(index):
    ours = layer(index).mixer
    mixer = SPEC.layers[index].mixer
    config = MambaConfig(hidden_size=SPEC.hidden_size, intermediate_size=mixer.inner_size, state_size=mixer.state_size,
                         time_step_rank=mixer.dt_rank, conv_kernel=mixer.conv_kernel, use_conv_bias=mixer.conv_bias,
                         use_bias=mixer.proj_bias, hidden_act="silu")
    theirs = HFMambaMixer(config, layer_idx=0).double()
    assert theirs.intermediate_size == mixer.inner_size
    renamed = {"conv1d." + key.removeprefix("conv."): value for key, value in ours.state_dict().items()
               if key.startswith("conv.")}
    renamed.update({key: value for key, value in ours.state_dict().items() if not key.startswith("conv.")})
    theirs.load_state_dict(renamed, strict=True)
    x = hidden(seed=3)
    torch.testing.assert_close(ours(x), theirs.eval()(x), rtol=1e-10, atol=1e-12)


def test_attention_sinks_rescale_each_row_by_its_share_of_the_softmax_mass():
    """With a sink logit s per head, softmax over [scores, s] then dropping s equals the sink-free attention times
    Z / (Z + e^s), Z the row's sum of exponentiated scores (window 4 here)."""
    attention = layer(1).mixer
    x = hidden()
    query = apply_rotary(split_heads(attention.q_proj(x), 4))
    key = apply_rotary(split_heads(attention.k_proj(x), 2)).repeat_interleave(2, dim=1)
    value = split_heads(attention.v_proj(x), 2).repeat_interleave(2, dim=1)
    plain = causal_attention(query, key, value, window=4)
    scores = (query @ key.transpose(-1, -2)) / 8 ** 0.5
    i, j = torch.meshgrid(torch.arange(SPEC.seq_len), torch.arange(SPEC.seq_len), indexing="ij")
    log_mass = scores.masked_fill(~((j <= i) & (i - j < 4)), float("-inf")).logsumexp(-1, keepdim=True)
    kept = torch.sigmoid(log_mass - attention.sinks.view(1, 4, 1, 1))   # Z / (Z + e^s)
    assert attention.sinks.abs().max() > 0.1
    torch.testing.assert_close(attention(x), attention.o_proj(merge_heads(plain * kept)), rtol=1e-10, atol=1e-12)


def rms(t):
    return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)


@pytest.mark.parametrize("chunk, positions", [(3, None), (4, None), (6, (torch.tensor([0, 1, 2, 3, 12, 13, 14, 15]),
                                                                        torch.arange(16)))])
def test_chunked_attention_masks_each_query_to_its_own_chunk_up_to_itself(chunk, positions):
    """Llama 4's chunked attention: query i attends key j exactly when j <= i and both are in one block of ``chunk``
    tokens, checked pair by pair (and at a CP rank's positions, its first and last quarter)."""
    queries, keys = positions if positions is not None else (torch.arange(10),) * 2
    mask = local_attention_mask(len(keys), None, torch.device("cpu"), positions, chunk=chunk)
    for a, i in enumerate(queries.tolist()):
        for b, j in enumerate(keys.tolist()):
            assert bool(mask[a, b]) == (j <= i and i // chunk == j // chunk), (i, j)
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(1, 2, 10, 4, generator=generator, dtype=torch.float64) for _ in range(3))
    chunked = causal_attention(query, key, value, None, chunk=chunk)
    if positions is None:   # each chunk alone is plain causal attention over its own tokens
        for start in range(0, 10, chunk):
            block = slice(start, start + chunk)
            assert torch.allclose(chunked[:, :, block], causal_attention(query[:, :, block], key[:, :, block],
                                                                         value[:, :, block], None))
    assert torch.equal(causal_attention(query, key, value, None, chunk=10), causal_attention(query, key, value, None))


def test_qk_norm_normalises_each_query_and_key_head_and_rotary_false_leaves_them_unrotated():
    attention = layer(2).mixer
    x = hidden()
    query = rms(split_heads(attention.q_proj(x), 4)) * attention.q_norm.weight
    key = (rms(split_heads(attention.k_proj(x), 2)) * attention.k_norm.weight).repeat_interleave(2, dim=1)
    value = split_heads(attention.v_proj(x), 2).repeat_interleave(2, dim=1)
    expected = attention.o_proj(merge_heads(causal_attention(query, key, value, window=None)))
    torch.testing.assert_close(attention(x), expected, rtol=1e-10, atol=1e-12)


def test_qk_norm_comes_before_the_rotary_embedding():
    spec = modern_kinds_spec()
    doc = spec.to_dict()
    del doc["layers"][2]["mixer"]["rotary"]
    attention = layer(2, load_model_spec(doc)).mixer
    x = hidden()
    query = apply_rotary(rms(split_heads(attention.q_proj(x), 4)) * attention.q_norm.weight)
    key = apply_rotary(rms(split_heads(attention.k_proj(x), 2)) * attention.k_norm.weight).repeat_interleave(2, dim=1)
    value = split_heads(attention.v_proj(x), 2).repeat_interleave(2, dim=1)
    expected = attention.o_proj(merge_heads(causal_attention(query, key, value, window=None)))
    torch.testing.assert_close(attention(x), expected, rtol=1e-10, atol=1e-12)


def test_layernorm_block_and_learned_positions_follow_gpt2():
    block, embedding = layer(5), layer(0)
    x = hidden()
    norm = block.mixer_norm
    expected = x + block.mixer(F.layer_norm(x, (SPEC.hidden_size,), norm.weight, norm.bias, 1e-5))
    torch.testing.assert_close(block(x), expected, rtol=1e-12, atol=1e-12)
    tokens = torch.randint(0, SPEC.vocab_size, (2, SPEC.seq_len))
    torch.testing.assert_close(embedding(tokens), embedding.weight[tokens] + embedding.positions[:SPEC.seq_len])


@pytest.mark.parametrize("fixture", sorted(path.stem for path in FIXTURES.glob("*.json")))
def test_every_imported_fixture_builds_with_the_planners_parameter_counts(fixture):
    spec = import_hf_config(json.loads((FIXTURES / f"{fixture}.json").read_text()))
    assert layer_parameter_counts(spec) == layer_parameters(spec)
    scaled = scale_spec(spec)
    assert layer_parameter_counts(scaled) == layer_parameters(scaled)

