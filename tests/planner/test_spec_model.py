"""The additive ModelSpec fields: provenance, latent attention (MLA), linear attention's key heads, gated
delta-net's short convolution, MoE's balancing loss weight, and the fields of the 2025-26 HuggingFace
families (attention biases, QK-norm and sinks, Mamba-1, MLP biases, LayerNorm, learned positions)."""

import pytest

from planner.errors import SpecError
from planner.spec.model import AttentionMixer, LinearAttentionMixer, MambaMixer, load_model_spec


def doc_with(mixer: dict, **top) -> dict:
    return {"format": "adaptis.model/v1", "name": "m", "hidden_size": 64, "vocab_size": 100, "seq_len": 16,
            "layers": [{"kind": "embedding"}, {"kind": "decoder", "mixer": mixer}, {"kind": "head"}], **top}


MLA = {"type": "attention", "num_heads": 4, "num_kv_heads": 4, "head_dim": 24, "v_head_dim": 16,
       "q_lora_rank": 32, "kv_lora_rank": 16, "rope_head_dim": 8}


def test_source_round_trips_and_is_omitted_when_unset():
    spec = load_model_spec(doc_with({"type": "attention", "num_heads": 2, "head_dim": 8}, source="hf:x/y"))
    assert spec.source == "hf:x/y" and spec.to_dict()["source"] == "hf:x/y"
    assert "source" not in load_model_spec(doc_with({"type": "attention", "num_heads": 2, "head_dim": 8})).to_dict()


def test_latent_attention_round_trips_with_its_dimensions():
    spec = load_model_spec(doc_with(MLA))
    mixer = spec.layers[1].mixer
    assert mixer == AttentionMixer(4, 4, 24, None, 16, 32, 16, 8)
    assert mixer.is_latent and mixer.value_dim == 16
    assert load_model_spec(spec.to_dict()) == spec


def test_chunked_attention_round_trips_and_is_not_also_windowed():
    spec = load_model_spec(doc_with({"type": "attention", "num_heads": 2, "head_dim": 8, "chunk": 8192}))
    mixer = spec.layers[1].mixer
    assert mixer.chunk == 8192 and mixer.window is None and mixer.to_dict()["chunk"] == 8192
    assert load_model_spec(spec.to_dict()) == spec and spec.layers[1].short == "s"
    with pytest.raises(SpecError) as error:
        load_model_spec(doc_with({"type": "attention", "num_heads": 2, "head_dim": 8, "chunk": 64, "window": 32}))
    assert error.value.field == "layers[1].mixer.chunk" and "sliding-window or chunked" in error.value.reason


def test_plain_attention_values_are_head_dim_wide():
    mixer = load_model_spec(doc_with({"type": "attention", "num_heads": 2, "head_dim": 8})).layers[1].mixer
    assert not mixer.is_latent and mixer.value_dim == 8
    assert set(mixer.to_dict()) == {"type", "num_heads", "num_kv_heads", "head_dim"}


@pytest.mark.parametrize("change, field", [
    ({"rope_head_dim": None}, "layers[1].mixer.rope_head_dim"),
    ({"rope_head_dim": 24}, "layers[1].mixer.rope_head_dim"),
    ({"num_kv_heads": 2}, "layers[1].mixer.num_kv_heads"),
    ({"kv_lora_rank": None}, "layers[1].mixer.q_lora_rank"),
    ({"v_head_dim": 0}, "layers[1].mixer.v_head_dim"),
])
def test_latent_attention_errors_name_the_field(change, field):
    mixer = {key: value for key, value in {**MLA, **change}.items() if value is not None}
    with pytest.raises(SpecError) as error:
        load_model_spec(doc_with(mixer))
    assert error.value.field == field


def test_linear_attention_key_heads_round_trip_and_must_divide_value_heads():
    mixer = {"type": "linear_attention", "num_heads": 8, "head_dim": 16, "num_key_heads": 4}
    spec = load_model_spec(doc_with(mixer))
    assert spec.layers[1].mixer == LinearAttentionMixer(8, 16, "gated_delta", 4)
    assert spec.layers[1].mixer.key_heads == 4
    assert load_model_spec(spec.to_dict()) == spec
    assert LinearAttentionMixer(8, 16).key_heads == 8
    with pytest.raises(SpecError) as error:
        load_model_spec(doc_with({**mixer, "num_key_heads": 3}))
    assert error.value.field == "layers[1].mixer.num_key_heads"


def test_gated_delta_conv_kernel_round_trips_and_only_gated_delta_takes_one():
    mixer = {"type": "linear_attention", "num_heads": 8, "head_dim": 16}
    default = load_model_spec(doc_with(mixer))
    assert default.layers[1].mixer.conv_kernel == 4 and "conv_kernel" not in default.layers[1].mixer.to_dict()
    wider = load_model_spec(doc_with({**mixer, "conv_kernel": 6}))
    assert wider.layers[1].mixer.conv_kernel == 6 and wider.layers[1].mixer.to_dict()["conv_kernel"] == 6
    assert load_model_spec(wider.to_dict()) == wider
    assert "conv_kernel" not in LinearAttentionMixer(8, 16, "lightning", conv_kernel=6).to_dict()
    for bad, reason in (({**mixer, "conv_kernel": 0}, "must be >= 1"),
                        ({**mixer, "variant": "lightning", "conv_kernel": 4}, "only gated_delta")):
        with pytest.raises(SpecError) as error:
            load_model_spec(doc_with(bad))
        assert error.value.field == "layers[1].mixer.conv_kernel" and reason in str(error.value)


def moe_doc(**mlp):
    doc = doc_with({"type": "attention", "num_heads": 2, "head_dim": 8})
    doc["layers"][1]["mlp"] = {"type": "moe", "num_experts": 4, "top_k": 2, "expert_intermediate_size": 16, **mlp}
    return doc


def test_moe_aux_loss_coeff_round_trips_is_written_only_when_set_and_must_not_be_negative():

    plain = load_model_spec(moe_doc())
    assert plain.layers[1].mlp.aux_loss_coeff == 0.0 and "aux_loss_coeff" not in plain.layers[1].mlp.to_dict()
    weighed = load_model_spec(moe_doc(aux_loss_coeff=0.01))
    assert weighed.layers[1].mlp.aux_loss_coeff == 0.01 and load_model_spec(weighed.to_dict()) == weighed
    with pytest.raises(SpecError) as error:
        load_model_spec(moe_doc(aux_loss_coeff=-0.1))
    assert error.value.field == "layers[1].mlp.aux_loss_coeff" and ">= 0" in str(error.value)


def test_moe_experts_without_a_gate_round_trip_with_their_activation():
    doc = moe_doc(gated=False, activation="squared_relu")
    spec = load_model_spec(doc)
    assert (spec.layers[1].mlp.gated, spec.layers[1].mlp.activation) == (False, "squared_relu")
    assert load_model_spec(spec.to_dict()) == spec
    assert {"gated", "activation"}.isdisjoint(load_model_spec(moe_doc()).layers[1].mlp.to_dict())
    with pytest.raises(SpecError) as error:
        load_model_spec(moe_doc(activation="squared_relu"))
    assert error.value.field == "layers[1].mlp.activation"


def test_an_xielu_mlp_holds_its_two_learned_scalars_and_an_moe_refuses_xielu_experts():
    from planner.cost import count_parameters
    from planner.parallel.params import layer_params
    doc = doc_with({"type": "attention", "num_heads": 2, "head_dim": 8})
    doc["layers"][1]["mlp"] = {"type": "dense", "intermediate_size": 64, "gated": False, "activation": "xielu"}
    xielu = load_model_spec(doc)
    doc["layers"][1]["mlp"]["activation"] = "squared_relu"
    plain = load_model_spec(doc)
    assert load_model_spec(xielu.to_dict()) == xielu
    assert count_parameters(xielu) == count_parameters(plain) + 2
    assert layer_params(xielu)[1].replicated == layer_params(plain)[1].replicated + 2   # whole on every TP rank
    with pytest.raises(SpecError) as error:
        load_model_spec(moe_doc(gated=False, activation="xielu"))
    assert error.value.field == "layers[1].mlp.activation" and "dense MLP" in str(error.value)


def test_a_latent_moe_round_trips_its_latent_size_and_refuses_a_bad_one():
    spec = load_model_spec(moe_doc(latent_size=16))
    assert spec.layers[1].mlp.latent_size == 16 and spec.layers[1].mlp.expert_width(spec.hidden_size) == 16
    assert load_model_spec(spec.to_dict()) == spec
    plain = load_model_spec(moe_doc()).layers[1].mlp
    assert "latent_size" not in plain.to_dict() and plain.expert_width(64) == 64
    for bad, reason in ((0, ">= 1"), (1 << 18, "<= 131,072"), ("16", "must be an integer")):
        with pytest.raises(SpecError) as error:
            load_model_spec(moe_doc(latent_size=bad))
        assert error.value.field == "layers[1].mlp.latent_size" and reason in str(error.value)


def test_an_mlps_activation_round_trips_and_is_written_only_when_not_the_default_for_its_gate():
    doc = doc_with({"type": "attention", "num_heads": 2, "head_dim": 8})

    def with_mlp(mlp: dict) -> dict:
        return {**doc, "layers": [*doc["layers"][:2], {"kind": "mlp", "mlp": mlp}, *doc["layers"][2:]]}

    for gated, activation in ((False, "squared_relu"), (False, "gelu_tanh"), (False, "silu"), (True, "gelu_tanh"),
                              (True, "gelu"), (True, "clamped_swiglu")):
        spec = load_model_spec(with_mlp({"type": "dense", "intermediate_size": 64, "gated": gated,
                                         "activation": activation}))
        assert (spec.layers[2].mlp.gated, spec.layers[2].mlp.activation) == (gated, activation)
        assert load_model_spec(spec.to_dict()) == spec
        assert spec.to_dict()["layers"][2]["mlp"]["activation"] == activation
    # none named: SwiGLU's SiLU with a gate, GELU without, and neither written back
    for gated, default in ((True, "silu"), (False, "gelu")):
        mlp = load_model_spec(with_mlp({"type": "dense", "intermediate_size": 64, "gated": gated})).layers[2].mlp
        assert mlp.activation == default and "activation" not in mlp.to_dict()
        assert load_model_spec(with_mlp({"type": "dense", "intermediate_size": 64, "gated": gated,
                                         "activation": default})).layers[2].mlp == mlp
    plain = {"type": "dense", "intermediate_size": 64, "gated": False}
    for mlp, reason in (({**plain, "activation": "swish"}, "must be one of silu, gelu, gelu_tanh"),
                        ({**plain, "activation": "clamped_swiglu"}, "does not apply to an MLP without a gate"),
                        ({**plain, "gated": True, "activation": "squared_relu"}, "does not apply to a gated MLP"),
                        ({**plain, "gated": True, "activation": "xielu"},
                         "takes silu, gelu, gelu_tanh, clamped_swiglu")):
        with pytest.raises(SpecError) as error:
            load_model_spec(with_mlp(mlp))
        assert error.value.field == "layers[2].mlp.activation" and reason in str(error.value)


GPT_LIKE = {"type": "attention", "num_heads": 4, "num_kv_heads": 1, "head_dim": 16, "qkv_bias": True,
            "output_bias": True, "qk_norm": True, "sinks": True}
MAMBA1 = {"type": "mamba", "inner_size": 128, "state_size": 16, "dt_rank": 4, "conv_kernel": 4, "conv_bias": False,
          "proj_bias": True}


def test_attention_flags_mamba1_biases_norm_and_positions_round_trip_and_are_written_only_when_set():
    doc = doc_with(GPT_LIKE, norm="layernorm", position_embeddings=32)
    doc["layers"].insert(2, {"kind": "decoder", "mixer": MAMBA1,
                             "mlp": {"type": "moe", "num_experts": 4, "top_k": 2, "expert_intermediate_size": 32,
                                     "bias": True}})
    doc["layers"].insert(3, {"kind": "mlp", "mlp": {"type": "dense", "intermediate_size": 64, "gated": False,
                                                    "bias": True}})
    spec = load_model_spec(doc)
    assert (spec.norm, spec.position_embeddings) == ("layernorm", 32)
    assert spec.layers[1].mixer == AttentionMixer(4, 1, 16, qkv_bias=True, output_bias=True, qk_norm=True, sinks=True)
    assert spec.layers[2].mixer == MambaMixer(inner_size=128, state_size=16, dt_rank=4, conv_bias=False, proj_bias=True)
    assert spec.layers[2].mlp.bias and spec.layers[3].mlp.bias
    assert load_model_spec(spec.to_dict()) == spec
    plain = load_model_spec(doc_with({"type": "attention", "num_heads": 2, "head_dim": 8}))
    assert {"norm", "position_embeddings"}.isdisjoint(plain.to_dict())
    assert set(plain.layers[1].mixer.to_dict()) == {"type", "num_heads", "num_kv_heads", "head_dim"}
    positional = load_model_spec(doc_with({**GPT_LIKE, "rotary": False}, position_embeddings=32))
    assert not positional.layers[1].mixer.rotary and positional.layers[1].mixer.to_dict()["rotary"] is False
    with pytest.raises(SpecError) as error:
        load_model_spec(doc_with({**MLA, "rotary": False}))
    assert error.value.field == "layers[1].mixer.rotary"
    assert plain.norm == "rmsnorm" and plain.position_embeddings is None


@pytest.mark.parametrize("top, field", [
    ({"norm": "batchnorm"}, "norm"),
    ({"position_embeddings": 8}, "seq_len"),                  # fewer learned positions than the sequence
    ({"position_embeddings": 0}, "position_embeddings"),
])
def test_norm_and_position_errors_name_the_field(top, field):
    with pytest.raises(SpecError) as error:
        load_model_spec(doc_with(GPT_LIKE, **top))
    assert error.value.field == field


def test_learned_positions_need_an_embedding_layer():
    doc = doc_with(GPT_LIKE, position_embeddings=32)
    doc["layers"] = doc["layers"][1:]
    with pytest.raises(SpecError) as error:
        load_model_spec(doc)
    assert error.value.field == "position_embeddings"


@pytest.mark.parametrize("change, field", [
    ({"dt_rank": 0}, "layers[1].mixer.dt_rank"),
    ({"inner_size": None}, "layers[1].mixer.inner_size"),
    ({"n_groups": 2}, "layers[1].mixer.n_groups"),           # a Mamba-2 field on a Mamba-1 mixer
    ({"conv_bias": "yes"}, "layers[1].mixer.conv_bias"),
])
def test_mamba1_errors_name_the_field(change, field):
    mixer = {key: value for key, value in {**MAMBA1, **change}.items() if value is not None}
    with pytest.raises(SpecError) as error:
        load_model_spec(doc_with(mixer))
    assert error.value.field == field


def test_group_limited_routing_round_trips_is_written_only_when_it_limits_and_its_rules_name_the_field():
    free = load_model_spec(moe_doc())
    assert not free.layers[1].mlp.group_limited and "router_groups" not in free.layers[1].mlp.to_dict()
    assert not load_model_spec(moe_doc(router_groups=2)).layers[1].mlp.group_limited   # both groups: no limit
    limited = load_model_spec(moe_doc(num_experts=8, router_groups=4, router_group_topk=2))
    mlp = limited.layers[1].mlp
    assert (mlp.router_groups, mlp.router_group_topk, mlp.group_limited) == (4, 2, True)
    assert mlp.to_dict()["router_groups"] == 4 and load_model_spec(limited.to_dict()) == limited
    for bad, field, reason in (({"router_groups": 3}, "router_groups", "equal groups"),
                               ({"router_groups": 2, "router_group_topk": 3}, "router_group_topk", "<= the 2 groups"),
                               ({"num_experts": 8, "top_k": 1, "router_groups": 4, "router_group_topk": 2},
                                "router_group_topk", "<= top_k (1)"),
                               ({"num_experts": 8, "top_k": 3, "router_groups": 8, "router_group_topk": 2},
                                "router_group_topk", "cannot hold a token's 3 experts"),
                               ({"router_groups": 0}, "router_groups", ">= 1")):
        with pytest.raises(SpecError) as error:
            load_model_spec(moe_doc(**bad))
        assert error.value.field == f"layers[1].mlp.{field}" and reason in str(error.value), (bad, str(error.value))


def test_block_norms_round_trip_and_are_written_only_when_not_pre():
    doc = doc_with({"type": "attention", "num_heads": 2, "head_dim": 8})
    assert load_model_spec(doc).block_norms == "pre" and "block_norms" not in load_model_spec(doc).to_dict()
    for placement in ("post", "sandwich"):
        spec = load_model_spec({**doc, "block_norms": placement})
        assert spec.block_norms == placement and load_model_spec(spec.to_dict()) == spec
        assert spec.architecture() != load_model_spec(doc).architecture()   # another network, the same weights' names
    with pytest.raises(SpecError) as error:
        load_model_spec({**doc, "block_norms": "after"})
    assert error.value.field == "block_norms" and "must be one of pre, post, sandwich" in str(error.value)


def test_a_qk_norm_after_the_rotary_embedding_round_trips_and_needs_both():
    after = {"type": "attention", "num_heads": 2, "head_dim": 8, "qk_norm": True, "qk_norm_after_rotary": True}
    spec = load_model_spec(doc_with(after))
    assert spec.layers[1].mixer.qk_norm_after_rotary and load_model_spec(spec.to_dict()) == spec
    assert "qk_norm_after_rotary" not in load_model_spec(doc_with({**after, "qk_norm_after_rotary": False})).to_dict()
    for bad in ({**after, "qk_norm": False}, {**after, "rotary": False}):
        with pytest.raises(SpecError) as error:
            load_model_spec(doc_with(bad))
        assert error.value.field == "layers[1].mixer.qk_norm_after_rotary" and "needs qk_norm" in str(error.value)


def test_scalars_without_weights_round_trip_and_must_be_positive():
    """Gemma's and Granite's scalars: the model's embedding, residual and logits multipliers and logits soft-cap, an
    attention's softmax scale and soft-cap; written only when set, each refused by name unless above 0."""
    attention = {"type": "attention", "num_heads": 2, "head_dim": 8, "softmax_scale": 0.125, "softcap": 50.0}
    scalars = {"embedding_multiplier": 12.0, "residual_multiplier": 0.22, "logits_multiplier": 0.125,
               "logits_softcap": 30.0}
    spec = load_model_spec(doc_with(attention, **scalars))
    assert (spec.layers[1].mixer.softmax_scale, spec.layers[1].mixer.softcap) == (0.125, 50.0)
    assert {key: getattr(spec, key) for key in scalars} == scalars and load_model_spec(spec.to_dict()) == spec
    plain = load_model_spec(doc_with({"type": "attention", "num_heads": 2, "head_dim": 8}))
    assert not set(scalars) & plain.to_dict().keys() and plain.architecture() != spec.architecture()
    for doc, field in ((doc_with(attention, **{**scalars, "residual_multiplier": 0}), "residual_multiplier"),
                       (doc_with({**attention, "softcap": -1.0}), "layers[1].mixer.softcap")):
        with pytest.raises(SpecError) as error:
            load_model_spec(doc)
        assert error.value.field == field and "must be > 0" in str(error.value)
