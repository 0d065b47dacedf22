"""HuggingFace config.json import: each family's layer pattern from its real config, and errors by HF key."""

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from planner.errors import SpecError
from planner.spec.hf import import_hf_config, supported_model_types
from planner.spec.model import (AttentionMixer, DenseMLP, LayerSpec, LinearAttentionMixer, Mamba2Mixer, MambaMixer,
                                 MoEMLP)

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


# Two families' shapes without a fixture (no released config reachable here), checked against transformers' count in
# test_hf_counts: Minitron-8B's (its heads 128 wide, not hidden / heads; transformers' default Nemotron config cannot
# be built, having no key-value heads) and EXAONE 4.0 32B's (TensorRT-LLM's test config of it, with its 64 layers and
# 4,096-token window restored as its comments give them).
MINITRON_8B = {"model_type": "nemotron", "hidden_size": 4096, "num_attention_heads": 48, "num_key_value_heads": 8,
               "head_dim": 128, "intermediate_size": 16384, "num_hidden_layers": 32, "vocab_size": 256000}
EXAONE_4_32B = {"architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4", "head_dim": 128, "hidden_size": 5120,
                "intermediate_size": 27392, "num_attention_heads": 40, "num_hidden_layers": 64,
                "num_key_value_heads": 8, "sliding_window": 4096, "sliding_window_pattern": 4,
                "tie_word_embeddings": False, "vocab_size": 102400}


# A Nemotron-H with MoE layers (Nemotron 3's layer kinds: Mamba-2, MoE, attention), small: checked against
# transformers' count in test_hf_counts
NEMOTRON_H_MOE = {"model_type": "nemotron_h", "hidden_size": 512, "num_hidden_layers": 4,
                  "hybrid_override_pattern": "ME*E", "vocab_size": 1000, "num_attention_heads": 8,
                  "num_key_value_heads": 2, "head_dim": 64, "mamba_num_heads": 16, "mamba_head_dim": 32,
                  "ssm_state_size": 16, "n_groups": 4, "intermediate_size": 1024, "n_routed_experts": 8,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 256, "n_shared_experts": 1,
                  "moe_shared_expert_intermediate_size": 512}

# dots.llm1's shape (142.77 B parameters as transformers builds it, the 142 B its report gives), checked against
# transformers' count in test_hf_counts: no released config reachable here, its sizes from its report
DOTS_LLM1 = {"architectures": ["Dots1ForCausalLM"], "model_type": "dots1", "hidden_size": 4096,
             "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 62,
             "num_attention_heads": 32, "num_key_value_heads": 32, "n_routed_experts": 128, "n_shared_experts": 2,
             "num_experts_per_tok": 6, "first_k_dense_replace": 1, "vocab_size": 152064, "tie_word_embeddings": False}

# transformers' default Ministral with its head width given (MinistralAttention cannot be built without one), and a
# layer_types that mixes sliding and full layers: checked against transformers' count in test_hf_counts
MINISTRAL_MIXED = {"model_type": "ministral", "head_dim": 128, "num_hidden_layers": 4,
                   "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}

# Hunyuan's two families with their head width given (transformers' defaults leave it None, which its attention cannot
# be built with): the MoE one with a per-layer moe_topk, as Hunyuan-A13B's config gives it, and biased attention.
# Checked against transformers' count in test_hf_counts.
HUNYUAN_DENSE = {"model_type": "hunyuan_v1_dense", "head_dim": 128, "num_key_value_heads": 8, "num_hidden_layers": 4}
HUNYUAN_MOE = {"model_type": "hunyuan_v1_moe", "head_dim": 128, "num_key_value_heads": 8, "num_hidden_layers": 4,
               "intermediate_size": 3072, "num_experts": 64, "moe_topk": [8, 8, 4, 8], "attention_bias": True}

# Nemotron 3's LatentMoE: the same with its routed experts working at a latent width of a quarter of the hidden size
NEMOTRON_H_LATENT_MOE = {**NEMOTRON_H_MOE, "moe_latent_size": 128}
# ... with its router choosing among 2 of 4 groups of experts, and a Nemotron-H whose squared-ReLU MLPs are biased
NEMOTRON_H_GROUPED = {**NEMOTRON_H_MOE, "n_group": 4, "topk_group": 2}
NEMOTRON_H_BIASED_MLP = {**NEMOTRON_H_MOE, "hybrid_override_pattern": "M-*-", "mlp_bias": True}


def config(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def blocks(spec):
    assert spec.layers[0].kind == "embedding" and spec.layers[-1].kind == "head"
    return spec.layers[1:-1]


def test_llama_is_uniform_gqa_attention_with_swiglu():
    spec = import_hf_config(config("llama-3-8b"), name="llama")
    assert spec.name == "llama" and spec.hidden_size == 4096 and spec.vocab_size == 128256
    assert spec.seq_len == 4096 and spec.micro_batch_size == 1 and not spec.tie_embeddings
    assert set(blocks(spec)) == {blocks(spec)[0]} and len(blocks(spec)) == 32
    assert blocks(spec)[0].mixer == AttentionMixer(num_heads=32, num_kv_heads=8, head_dim=128)
    assert blocks(spec)[0].mlp == DenseMLP(intermediate_size=14336, gated=True)


def test_seq_len_and_micro_batch_are_taken_from_the_arguments():
    spec = import_hf_config(config("llama-3-8b"), seq_len=8192, micro_batch_size=2)
    assert (spec.seq_len, spec.micro_batch_size) == (8192, 2)


def test_mistral_sliding_window_applies_to_every_layer():
    doc = {**config("llama-3-8b"), "model_type": "mistral", "sliding_window": 4096}
    assert {block.mixer.window for block in blocks(import_hf_config(doc))} == {4096}


def test_mixtral_blocks_are_top2_of_8_experts():
    spec = import_hf_config(config("mixtral-8x7b"))
    assert {block.mlp for block in blocks(spec)} == {MoEMLP(num_experts=8, top_k=2, expert_intermediate_size=14336,
                                                                aux_loss_coeff=0.02)}
    assert blocks(spec)[0].mixer.window is None


def test_each_mlps_activation_is_the_one_its_config_names():
    """Gemma 2 and 3 gate with the tanh-approximated GELU their ``hidden_activation`` names (HF's default where the
    config leaves it out, as Gemma 3 27B's does), Llama with SiLU (``hidden_act``), and a Llama config naming
    ``gelu`` gates with exact GELU; GPT-2's ``activation_function`` (``gelu_new``, its default) is the tanh GELU;
    gpt-oss's experts take its clamped SwiGLU whatever ``hidden_act`` says. An activation we do not hold, or one
    that is not a gated one, is refused by its key; so is a gpt-oss clamp we do not apply."""
    def activations(spec) -> set[str]:
        return {block.mlp.activation for block in blocks(spec)}

    gemma2, gemma3 = config("gemma-2-9b"), config("gemma-3-27b")
    assert "hidden_activation" not in gemma3.get("text_config", gemma3)
    assert activations(import_hf_config(gemma2)) == activations(import_hf_config(gemma3)) == {"gelu_tanh"}
    assert activations(import_hf_config({**gemma2, "hidden_activation": "gelu"})) == {"gelu"}
    llama = config("llama-3-8b")
    assert activations(import_hf_config(llama)) == {"silu"}
    assert activations(import_hf_config({**llama, "hidden_act": "gelu"})) == {"gelu"}
    gpt2 = {key: value for key, value in config("gpt2").items() if key != "activation_function"}
    assert activations(import_hf_config(gpt2)) == {"gelu_tanh"}
    assert activations(import_hf_config({**config("gpt-oss-20b"), "hidden_act": "gelu"})) == {"clamped_swiglu"}
    for doc, field, words in (({**llama, "hidden_act": "relu"}, "hidden_act", "must be one of silu, swish, gelu"),
                              ({**llama, "hidden_act": "relu2"}, "hidden_act", "relu2 is not modelled for an MLP "
                                                                               "with a gate (known: silu, swish"),
                              ({**gemma2, "hidden_activation": "quick_gelu"}, "hidden_activation", "must be one of"),
                              ({**config("gpt-oss-20b"), "swiglu_limit": 10.0}, "swiglu_limit",
                               "only gpt-oss's 7.0 is modelled")):
        with pytest.raises(SpecError) as error:
            import_hf_config(doc)
        assert error.value.field == field and words in str(error.value)


def test_each_familys_norms_sit_where_its_decoder_layer_puts_them():
    """Gemma 2's and 3's four norms a layer (before and after each sublayer), OLMo 2's, OLMo 3's and EXAONE 4's
    after each sublayer, Llama's and GPT-2's before it (``ModelSpec.block_norms``, as each family's
    ``DecoderLayer.forward`` applies them)."""
    assert import_hf_config(config("gemma-2-9b")).block_norms == "sandwich"
    assert import_hf_config(config("gemma-3-27b")).block_norms == "sandwich"
    assert import_hf_config(config("olmo-2-0425-1b")).block_norms == "post"
    assert import_hf_config({**config("olmo-2-0425-1b"), "model_type": "olmo3"}).block_norms == "post"
    assert import_hf_config(EXAONE_4_32B).block_norms == "post"
    for name in ("llama-3-8b", "gpt2", "olmoe-1b-7b-0924", "qwen3-8b"):
        assert import_hf_config(config(name)).block_norms == "pre", name


def test_gemma_and_granite_carry_their_scalars():
    """Gemma 2: the embedding times sqrt(hidden), scores soft-capped at 50 and logits at 30 (its config's, also
    ``Gemma2Config``'s defaults), its query scale the head width's (``query_pre_attn_scalar`` 256); a null cap is no
    cap. Gemma 3 27B: no caps, queries scaled by 168 ** -0.5 where its heads are 128 wide. Granite 4.0-H: the
    embedding times 12, each sublayer's output times 0.22, scores by 1/128, logits divided by 16."""
    gemma2 = import_hf_config(config("gemma-2-9b"))
    attention = blocks(gemma2)[0].mixer
    assert (gemma2.embedding_multiplier, gemma2.logits_softcap) == (3584 ** 0.5, 30.0)
    assert (attention.softcap, attention.softmax_scale) == (50.0, None)
    uncapped = import_hf_config({**config("gemma-2-9b"), "attn_logit_softcapping": None,
                                 "final_logit_softcapping": None})
    assert uncapped.logits_softcap is None and blocks(uncapped)[0].mixer.softcap is None
    gemma3 = import_hf_config(config("gemma-3-27b"))
    assert gemma3.logits_softcap is None and {block.mixer.softcap for block in blocks(gemma3)} == {None}
    assert {block.mixer.softmax_scale for block in blocks(gemma3)} == {168 ** -0.5}
    assert gemma3.embedding_multiplier == 5376 ** 0.5
    granite = import_hf_config(config("granite-4.0-h-small"))
    assert (granite.embedding_multiplier, granite.residual_multiplier,
            granite.logits_multiplier) == (12.0, 0.22, 1 / 16)
    assert {block.mixer.softmax_scale for block in blocks(granite) if block.mixer is not None
            and block.mixer.type == "attention"} == {0.0078125}
    llama = import_hf_config(config("llama-3-8b"))
    assert all(getattr(llama, key) is None for key in ("embedding_multiplier", "residual_multiplier",
                                                       "logits_multiplier", "logits_softcap"))
    with pytest.raises(SpecError) as error:
        import_hf_config({**config("gemma-2-9b"), "final_logit_softcapping": 0})
    assert error.value.field == "final_logit_softcapping" and "must be > 0" in str(error.value)


def test_gemma2_alternates_sliding_and_global_starting_with_sliding():
    spec = import_hf_config(config("gemma-2-9b"))
    windows = [block.mixer.window for block in blocks(spec)]
    assert len(windows) == 42
    assert windows[0::2] == [4096] * 21 and windows[1::2] == [None] * 21
    assert spec.tie_embeddings and spec.vocab_size == 256000
    assert blocks(spec)[0].mixer.head_dim == 256


def test_gemma2_explicit_layer_types_win_over_the_alternation():
    doc = config("gemma-2-9b")
    doc["layer_types"] = ["full_attention"] * 41 + ["sliding_attention"]
    windows = [block.mixer.window for block in blocks(import_hf_config(doc))]
    assert windows == [None] * 41 + [4096]


def test_gemma3_has_a_global_layer_every_sixth_and_the_class_default_vocabulary():
    spec = import_hf_config(config("gemma-3-27b"))
    globals_ = [index for index, block in enumerate(blocks(spec)) if block.mixer.window is None]
    assert len(blocks(spec)) == 62
    assert globals_ == list(range(5, 62, 6))
    assert {block.mixer.window for block in blocks(spec) if block.mixer.window} == {1024}
    assert spec.vocab_size == 262208 and spec.hidden_size == 5376 and spec.tie_embeddings
    assert blocks(spec)[0].mixer == AttentionMixer(num_heads=32, num_kv_heads=16, head_dim=128, window=1024,
                                                   qk_norm=True, softmax_scale=168 ** -0.5)


def test_gemma3_layer_types_and_sliding_window_pattern_are_honoured():
    doc = config("gemma-3-27b")
    doc["text_config"]["sliding_window_pattern"] = 2
    assert [b.mixer.window is None for b in blocks(import_hf_config(doc))][:4] == [False, True, False, True]
    doc["text_config"]["layer_types"] = ["full_attention"] * 62
    assert all(b.mixer.window is None for b in blocks(import_hf_config(doc)))


def test_deepseek_v3_has_three_dense_layers_then_moe_with_mla():
    spec = import_hf_config(config("deepseek-v3"))
    body = blocks(spec)
    assert len(body) == 61
    assert [isinstance(block.mlp, DenseMLP) for block in body[:3]] == [True] * 3
    assert all(block.mlp == MoEMLP(num_experts=256, top_k=8, expert_intermediate_size=2048,
                                   num_shared_experts=1, shared_intermediate_size=2048, router_groups=8,
                                   router_group_topk=4) for block in body[3:])
    assert body[0].mlp == DenseMLP(18432)
    assert body[0].mixer == AttentionMixer(num_heads=128, num_kv_heads=128, head_dim=192, v_head_dim=128,
                                           q_lora_rank=1536, kv_lora_rank=512, rope_head_dim=64)


def test_deepseek_v2_lite_has_no_query_latent_and_one_dense_layer():
    body = blocks(import_hf_config(config("deepseek-v2-lite")))
    assert len(body) == 27 and isinstance(body[0].mlp, DenseMLP) and isinstance(body[1].mlp, MoEMLP)
    assert body[0].mixer.q_lora_rank is None and body[0].mixer.kv_lora_rank == 512
    assert body[1].mlp.num_shared_experts == 2 and body[1].mlp.top_k == 6


def test_deepseek_routers_group_limit_is_read_as_transformers_routers_apply_it():
    """DeepSeek-V3's router always keeps ``topk_group`` of ``n_group`` groups (its HF defaults 4 of 8); DeepSeek-V2's
    only with ``topk_method`` ``group_limited_greedy``; GLM-4.5's and Kimi-K2's 1 of 1 route freely."""
    def routed(doc):
        return next(block.mlp for block in blocks(import_hf_config(doc)) if isinstance(block.mlp, MoEMLP))

    v3 = {key: value for key, value in config("deepseek-v3").items() if key not in ("n_group", "topk_group")}
    assert (routed(v3).router_groups, routed(v3).router_group_topk) == (8, 4)
    assert not routed(config("kimi-k2")).group_limited and not routed(config("glm-4.5")).group_limited
    lite = config("deepseek-v2-lite")
    assert not routed(lite).group_limited   # greedy
    limited = routed({**lite, "topk_method": "group_limited_greedy", "n_group": 8, "topk_group": 3})
    assert (limited.router_groups, limited.router_group_topk) == (8, 3)
    assert not routed({**lite, "n_group": 8, "topk_group": 3}).group_limited   # greedy ignores the groups
    for bad, field, reason in (({"topk_method": "group_limited_greedy", "n_group": None}, "n_group", "required"),
                               ({"topk_method": "group_limited_greedy", "n_group": 7}, "n_group", "equal groups"),
                               ({"topk_method": "top_p"}, "topk_method", "must be one of")):
        with pytest.raises(SpecError) as error:
            import_hf_config({**lite, **bad})
        assert error.value.field == field and reason in str(error.value), (bad, str(error.value))


def test_deepseek_moe_layer_freq_skips_layers():
    doc = {**config("deepseek-v2-lite"), "moe_layer_freq": 2, "first_k_dense_replace": 0}
    kinds = [isinstance(block.mlp, MoEMLP) for block in blocks(import_hf_config(doc))]
    assert kinds[:4] == [True, False, True, False]


def test_nemotron_h_layers_follow_the_pattern_string_character_by_character():
    doc = config("nemotron-h-8b")
    spec = import_hf_config(doc)
    code = {"mamba2": "M", "attention": "*"}
    rendered = "".join(code[block.mixer.type] if block.kind == "decoder" else "-" for block in blocks(spec))
    assert rendered == doc["hybrid_override_pattern"]
    mamba = next(block for block in blocks(spec) if block.mixer is not None and block.mixer.type == "mamba2")
    assert mamba.mixer == Mamba2Mixer(num_heads=128, head_dim=64, state_size=128, conv_kernel=4, n_groups=8)
    assert mamba.mlp is None
    attention = next(block for block in blocks(spec) if block.mixer is not None and block.mixer.type == "attention")
    assert attention.mixer == AttentionMixer(num_heads=32, num_kv_heads=8, head_dim=128) and attention.mlp is None
    mlp = next(block for block in blocks(spec) if block.kind == "mlp")
    # Nemotron-H's MLP layers are squared ReLU (mlp_hidden_act "relu2", NemotronHConfig's default)
    assert mlp.mlp == DenseMLP(intermediate_size=21504, gated=False, activation="squared_relu") and mlp.mixer is None


def test_nemotron_h_experts_are_plain_mlps_with_its_activation():
    moe = blocks(import_hf_config(NEMOTRON_H_MOE))[1].mlp
    assert moe == MoEMLP(num_experts=8, top_k=2, expert_intermediate_size=256, num_shared_experts=1,
                         shared_intermediate_size=512, gated=False, activation="squared_relu")
    # Nemotron 3's LatentMoE: its routed experts at moe_latent_size
    latent = blocks(import_hf_config(NEMOTRON_H_LATENT_MOE))[1].mlp
    assert latent == dataclasses.replace(moe, latent_size=128)
    # its router's group limit (n_group / topk_group; n_groups is Mamba-2's), and biased dense MLPs
    grouped = blocks(import_hf_config(NEMOTRON_H_GROUPED))
    assert (grouped[1].mlp.router_groups, grouped[1].mlp.router_group_topk) == (4, 2)
    assert blocks(import_hf_config(NEMOTRON_H_BIASED_MLP))[1].mlp == DenseMLP(1024, gated=False, bias=True,
                                                                             activation="squared_relu")
    with pytest.raises(SpecError) as error:
        import_hf_config({**NEMOTRON_H_MOE, "mlp_bias": True})
    assert error.value.field == "mlp_bias" and "MoE layers" in error.value.reason


def test_nemotron_h_moe_character_and_block_type_list():
    doc = {**config("nemotron-h-8b"), "hybrid_override_pattern": "ME*E", "num_hidden_layers": 4,
           "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
           "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 128}
    body = blocks(import_hf_config(doc))
    assert [block.kind for block in body] == ["decoder", "mlp", "decoder", "mlp"]
    assert body[1].mlp == MoEMLP(8, 2, 64, 1, 128, gated=False, activation="squared_relu")
    listed = {key: value for key, value in doc.items() if key != "hybrid_override_pattern"}
    listed["layers_block_type"] = ["mamba", "moe", "attention", "moe"]
    assert blocks(import_hf_config(listed)) == body


def assert_qwen3_next_layers(body, count: int, experts: int, top_k: int) -> None:
    """Qwen3-Next's layers (and Qwen3.5's): gated delta-net, full attention with QK-norm every fourth layer, an MoE
    of experts 512 wide beside one shared expert as wide on every layer."""
    assert len(body) == count
    assert [index for index, block in enumerate(body) if block.mixer.type == "attention"] == list(range(3, count, 4))
    assert body[0].mixer == LinearAttentionMixer(num_heads=32, head_dim=128, variant="gated_delta", num_key_heads=16,
                                                 conv_kernel=4)
    assert body[3].mixer == AttentionMixer(num_heads=16, num_kv_heads=2, head_dim=256, qk_norm=True)
    assert {block.mlp for block in body} == {MoEMLP(num_experts=experts, top_k=top_k, expert_intermediate_size=512,
                                                    num_shared_experts=1, shared_intermediate_size=512,
                                                    aux_loss_coeff=0.001)}


def test_qwen3_next_puts_full_attention_every_fourth_layer_and_moe_with_a_shared_expert():
    assert_qwen3_next_layers(blocks(import_hf_config(config("qwen3-next-80b-a3b"))), 48, experts=512, top_k=10)


def test_qwen3_next_without_layer_types_or_interval_puts_full_attention_every_fourth_layer_as_its_class_does():
    doc = {key: value for key, value in config("qwen3-next-80b-a3b").items() if key != "full_attention_interval"}
    assert import_hf_config(doc) == import_hf_config(config("qwen3-next-80b-a3b"))


def test_qwen3_5_is_read_from_its_text_config_as_qwen3_next_with_moe_on_every_layer():
    """Qwen3.5's MoE model: Qwen3-Next's gated delta-net and gated attention (every fourth layer), an MoE of 256
    experts (top 8) beside a shared expert on every layer, its text model under ``text_config``; the dense Qwen3.5
    has SwiGLU MLPs of ``intermediate_size`` instead."""
    doc = config("qwen3.5-35b-a3b")
    body = blocks(import_hf_config(doc))
    assert_qwen3_next_layers(body, 40, experts=256, top_k=8)
    text_only = {**doc["text_config"], "architectures": ["Qwen3_5MoeForCausalLM"]}
    text_only.pop("model_type")
    assert blocks(import_hf_config(text_only)) == body   # the class names the family
    dense = {"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text", "intermediate_size": 17408,
                                                      "num_hidden_layers": 8}}
    assert {block.mlp for block in blocks(import_hf_config(dense))} == {DenseMLP(17408)}


def test_qwen3_next_short_convolution_width_comes_from_linear_conv_kernel_dim():
    doc = config("qwen3-next-80b-a3b")
    doc["linear_conv_kernel_dim"] = 6
    linear = [block.mixer for block in blocks(import_hf_config(doc)) if block.mixer.type != "attention"]
    assert {mixer.conv_kernel for mixer in linear} == {6}
    doc["linear_conv_kernel_dim"] = 0
    with pytest.raises(SpecError, match="linear_conv_kernel_dim"):
        import_hf_config(doc)


@pytest.mark.parametrize("name, coefficient", [("mixtral-8x7b", 0.02), ("qwen3-next-80b-a3b", 0.001),
                                               ("minimax-text-01", 0.001), ("deepseek-v3", 0.0)])
def test_moe_layers_take_the_routers_balancing_loss_weight(name, coefficient):
    doc = config(name)
    assert {block.mlp.aux_loss_coeff for block in blocks(import_hf_config(doc)) if isinstance(block.mlp, MoEMLP)} \
        == {coefficient}
    if coefficient:
        doc["router_aux_loss_coef"] = -1
        with pytest.raises(SpecError, match="router_aux_loss_coef"):
            import_hf_config(doc)


def test_qwen3_next_layer_types_and_mlp_only_layers():
    doc = config("qwen3-next-80b-a3b")
    doc["layer_types"] = ["full_attention"] + ["linear_attention"] * 47
    doc["mlp_only_layers"] = [0, 5]
    body = blocks(import_hf_config(doc))
    assert body[0].mixer.type == "attention" and body[3].mixer.type == "linear_attention"
    assert body[0].mlp == DenseMLP(5120) and body[5].mlp == DenseMLP(5120) and isinstance(body[1].mlp, MoEMLP)


def test_minimax_has_softmax_attention_after_every_seven_lightning_layers():
    spec = import_hf_config(config("minimax-text-01"))
    body = blocks(spec)
    softmax = [index for index, block in enumerate(body) if block.mixer.type == "attention"]
    assert len(body) == 80 and softmax == list(range(7, 80, 8))
    assert body[0].mixer == LinearAttentionMixer(num_heads=64, head_dim=128, variant="lightning")
    assert body[7].mixer == AttentionMixer(num_heads=64, num_kv_heads=8, head_dim=128)
    assert {block.mlp for block in body} == {MoEMLP(num_experts=32, top_k=2, expert_intermediate_size=9216,
                                                           aux_loss_coeff=0.001)}


def test_minimax_hf_converted_layer_types_give_the_same_model():
    doc = config("minimax-text-01")
    types = doc.pop("attn_type_list")
    doc["model_type"] = "minimax"
    doc["layer_types"] = ["full_attention" if t else "linear_attention" for t in types]
    assert blocks(import_hf_config(doc)) == blocks(import_hf_config(config("minimax-text-01")))


def test_null_key_value_heads_means_one_per_query_head():
    doc = {**config("llama-3-8b"), "num_key_value_heads": None}
    assert blocks(import_hf_config(doc))[0].mixer.num_kv_heads == 32


def test_model_type_is_inferred_from_architectures_when_missing():
    doc = config("llama-3-8b")
    del doc["model_type"]
    assert import_hf_config(doc).num_layers == 34


def test_name_defaults_to_the_checkpoint_path_and_source_records_the_family():
    doc = {**config("llama-3-8b"), "_name_or_path": "meta-llama/Meta-Llama-3-8B"}
    spec = import_hf_config(doc)
    assert spec.name == "Meta-Llama-3-8B" and spec.source == "huggingface config.json (model_type llama)"
    assert import_hf_config(doc, source="hf:x").source == "hf:x"


def test_unknown_model_type_lists_the_supported_ones():
    with pytest.raises(SpecError) as error:
        import_hf_config({**config("llama-3-8b"), "model_type": "bert", "architectures": ["BertForMaskedLM"]})
    assert error.value.field == "model_type"
    assert "unsupported 'bert'" in error.value.reason
    for model_type in ("llama", "gemma3", "deepseek_v3", "nemotron_h", "qwen3_next", "minimax", "mixtral"):
        assert model_type in error.value.reason
    assert "minimax_text_01" in supported_model_types()


@pytest.mark.parametrize("fixture, mutate, field", [
    ("llama-3-8b", lambda d: d.update(hidden_size=0), "hidden_size"),
    ("llama-3-8b", lambda d: d.update(intermediate_size=11008.5), "intermediate_size"),
    ("gpt2", lambda d: d.update(n_head=7), "n_head"),
    ("granite-4.0-h-tiny", lambda d: d.update(mamba_n_heads=47), "mamba_n_heads"),
    ("granite-4.0-h-tiny", lambda d: d["layer_types"].__setitem__(2, "conv"), "layer_types[2]"),
    ("gpt-oss-20b", lambda d: d.update(layer_types=["full_attention"]), "layer_types"),
    ("mamba-codestral-7b", lambda d: d.update(n_groups=3), "n_groups"),
    ("jamba-v0.1", lambda d: d.update(num_experts_per_tok=17), "num_experts_per_tok"),
    ("qwen2.5-7b", lambda d: d.update(layer_types=["sliding_attention"] * 28, sliding_window=None), "sliding_window"),
    ("qwen3-30b-a3b", lambda d: d.update(mlp_only_layers="0"), "mlp_only_layers"),
    ("falcon-mamba-7b", lambda d: d.update(time_step_rank="big"), "time_step_rank"),
    ("llama-3-8b", lambda d: d.update(num_key_value_heads=5), "num_key_value_heads"),
    ("llama-3-8b", lambda d: d.update(num_attention_heads="32"), "num_attention_heads"),
    ("gemma-3-27b", lambda d: d["text_config"].pop("num_hidden_layers"), "text_config.num_hidden_layers"),
    ("gemma-2-9b", lambda d: d.update(layer_types=["sliding_attention"] * 41), "layer_types"),
    ("gemma-2-9b", lambda d: d.update(layer_types=["local"] * 42), "layer_types[0]"),
    ("deepseek-v3", lambda d: d.pop("kv_lora_rank"), "kv_lora_rank"),
    ("deepseek-v3", lambda d: d.update(num_experts_per_tok=300), "num_experts_per_tok"),
    ("nemotron-h-8b", lambda d: d.update(hybrid_override_pattern="M-X*"), "hybrid_override_pattern"),
    ("nemotron-h-8b", lambda d: d.pop("hybrid_override_pattern"), "hybrid_override_pattern"),
    ("nemotron-h-8b", lambda d: d.update(num_hidden_layers=50), "hybrid_override_pattern"),
    ("nemotron-h-8b", lambda d: d.pop("ssm_state_size"), "ssm_state_size"),
    ("nemotron-h-8b", lambda d: d.pop("n_groups"), "n_groups"),
    ("nemotron-h-8b", lambda d: d.update(n_groups=3), "n_groups"),
    ("qwen3-next-80b-a3b", lambda d: d.update(full_attention_interval=0), "full_attention_interval"),
    ("qwen3-next-80b-a3b", lambda d: d.pop("linear_num_key_heads"), "linear_num_key_heads"),
    ("minimax-text-01", lambda d: d["attn_type_list"].__setitem__(3, 2), "attn_type_list[3]"),
    ("minimax-text-01", lambda d: d.update(attn_type_list=[0, 1]), "attn_type_list"),
    ("minimax-text-01", lambda d: d.pop("num_local_experts"), "num_local_experts"),
    ("mixtral-8x7b", lambda d: d.update(model_type=None, architectures=["BertModel"]), "model_type"),
    ("llama-4-scout-17b-16e-text", lambda d: d.update(no_rope_layers=[1, 0] * 4), "no_rope_layers"),
    ("llama-4-scout-17b-16e-text", lambda d: d["no_rope_layers"].__setitem__(5, 2), "no_rope_layers[5]"),
    ("llama-4-scout-17b-16e-text", lambda d: d["moe_layers"].__setitem__(7, 48), "moe_layers[7]"),
    ("llama-4-scout-17b-16e-text", lambda d: d.update(attention_chunk_size=None,
                                                      layer_types=["chunked_attention"] * 48), "attention_chunk_size"),
    ("llama-4-scout-17b-16e-text", lambda d: d.update(attention_chunk_size=0), "attention_chunk_size"),
])
def test_import_errors_name_the_hf_key(fixture, mutate, field):
    doc = copy.deepcopy(config(fixture))
    mutate(doc)
    with pytest.raises(SpecError) as error:
        import_hf_config(doc)
    assert error.value.field == field


@pytest.mark.parametrize("kwargs, field", [({"seq_len": 0}, "seq_len"),
                                           ({"micro_batch_size": 1.5}, "micro_batch_size")])
def test_bad_shape_arguments_are_rejected(kwargs, field):
    with pytest.raises(SpecError) as error:
        import_hf_config(config("llama-3-8b"), **kwargs)
    assert error.value.field == field


def test_kimi_k2_is_read_as_deepseek_v3_through_its_architectures():
    spec = import_hf_config(config("kimi-k2"))
    body = blocks(spec)
    assert len(body) == 61 and isinstance(body[0].mlp, DenseMLP)
    assert {block.mlp for block in body[1:]} == {MoEMLP(num_experts=384, top_k=8, expert_intermediate_size=2048,
                                                       num_shared_experts=1, shared_intermediate_size=2048)}
    assert spec.source == "huggingface config.json (model_type kimi_k2, read as deepseek_v3)"


def test_qwen2_has_biased_qkv_and_slides_only_from_max_window_layers_when_asked():
    doc = config("qwen2.5-7b")
    body = blocks(import_hf_config(doc))
    assert body[0].mixer == AttentionMixer(num_heads=28, num_kv_heads=4, head_dim=128, qkv_bias=True)
    doc.update(use_sliding_window=True, max_window_layers=20, sliding_window=4096)
    assert [block.mixer.window for block in blocks(import_hf_config(doc))] == [None] * 20 + [4096] * 8


def test_qwen3_moe_has_qk_norm_and_routed_experts_without_a_shared_one():
    doc = config("qwen3-30b-a3b")
    body = blocks(import_hf_config(doc))
    assert body[0].mixer == AttentionMixer(num_heads=32, num_kv_heads=4, head_dim=128, qk_norm=True)
    assert {block.mlp for block in body} == {MoEMLP(num_experts=128, top_k=8, expert_intermediate_size=768,
                                                    aux_loss_coeff=0.001)}
    doc["mlp_only_layers"] = [0, 47]
    body = blocks(import_hf_config(doc))
    assert body[0].mlp == body[47].mlp == DenseMLP(6144) and isinstance(body[1].mlp, MoEMLP)


def test_gpt_oss_alternates_sliding_and_full_attention_with_sinks_and_biased_experts():
    spec = import_hf_config(config("gpt-oss-20b"))
    body = blocks(spec)
    assert [block.mixer.window for block in body] == [128, None] * 12
    assert all(block.mixer.sinks and block.mixer.qkv_bias and block.mixer.output_bias for block in body)
    assert {block.mlp for block in body} == {MoEMLP(num_experts=32, top_k=4, expert_intermediate_size=2880,
                                                    aux_loss_coeff=0.9, bias=True, activation="clamped_swiglu")}


def test_jamba_puts_attention_at_the_offset_of_each_period_and_moe_on_odd_layers():
    body = blocks(import_hf_config(config("jamba-v0.1")))
    assert [index for index, block in enumerate(body) if block.mixer.type == "attention"] == [4, 12, 20, 28]
    assert body[4].mixer == AttentionMixer(num_heads=32, num_kv_heads=8, head_dim=128, rotary=False)
    assert [index for index, block in enumerate(body) if isinstance(block.mlp, MoEMLP)] == list(range(1, 32, 2))
    assert body[0].mixer == MambaMixer(inner_size=8192, state_size=16, dt_rank=256, conv_kernel=4)


def test_mamba_families_are_mamba1_mixers_alone_with_auto_dt_rank():
    falcon = blocks(import_hf_config(config("falcon-mamba-7b")))
    assert len(falcon) == 64 and {block.mlp for block in falcon} == {None}
    assert falcon[0].mixer == MambaMixer(inner_size=8192, state_size=16, dt_rank=256, conv_kernel=4)
    doc = {**config("mamba-2.8b-hf"), "time_step_rank": "auto"}
    assert blocks(import_hf_config(doc))[0].mixer.dt_rank == 160   # ceil(2560 / 16)
    assert import_hf_config(doc).tie_embeddings


def test_granite_4_h_mixes_mamba2_and_attention_with_moe_and_a_shared_expert_everywhere():
    body = blocks(import_hf_config(config("granite-4.0-h-small")))
    assert [index for index, block in enumerate(body) if block.mixer.type == "attention"] == [5, 15, 25, 35]
    assert not body[5].mixer.rotary   # position_embedding_type "nope"
    roped = blocks(import_hf_config({**config("granite-4.0-h-small"), "position_embedding_type": "rope"}))
    assert roped[5].mixer.rotary
    assert body[0].mixer == Mamba2Mixer(num_heads=128, head_dim=64, state_size=128, conv_kernel=4, n_groups=1)
    assert {block.mlp for block in body} == {MoEMLP(num_experts=72, top_k=10, expert_intermediate_size=768,
                                                    num_shared_experts=1, shared_intermediate_size=1536)}
    dense = blocks(import_hf_config({**config("granite-4.0-h-tiny"), "num_local_experts": 0}))
    assert {block.mlp for block in dense} == {DenseMLP(1024)}


def test_glm4_moe_has_dense_first_layers_biased_qkv_and_optional_qk_norm():
    full, air = blocks(import_hf_config(config("glm-4.5"))), blocks(import_hf_config(config("glm-4.5-air")))
    assert [isinstance(block.mlp, DenseMLP) for block in full[:4]] == [True, True, True, False]
    assert full[0].mixer == AttentionMixer(num_heads=96, num_kv_heads=8, head_dim=128, qkv_bias=True, qk_norm=True)
    assert not air[0].mixer.qk_norm and isinstance(air[1].mlp, MoEMLP) and isinstance(air[0].mlp, DenseMLP)


def test_dots1_has_qwen3_attention_and_deepseek_moe_and_slides_from_max_window_layers():
    layers = blocks(import_hf_config(DOTS_LLM1))
    assert layers[0].mlp == DenseMLP(10944) and len(layers) == 62
    assert {block.mlp for block in layers[1:]} == {MoEMLP(num_experts=128, top_k=6, expert_intermediate_size=1408,
                                                         num_shared_experts=2, shared_intermediate_size=1408)}
    assert {block.mixer for block in layers} == {AttentionMixer(num_heads=32, num_kv_heads=32, head_dim=128,
                                                                qk_norm=True)}
    # Dots1Config's rule: sliding_window from max_window_layers on, with no use_sliding_window to switch it
    windows = [block.mixer.window for block in blocks(import_hf_config({**DOTS_LLM1, "max_window_layers": 60}))]
    assert windows == [None] * 60 + [4096, 4096]
    assert not any(block.mixer.window for block in blocks(import_hf_config({**DOTS_LLM1, "sliding_window": None,
                                                                             "max_window_layers": 0})))
    typed = {**DOTS_LLM1, "num_hidden_layers": 2, "sliding_window": 512,
             "layer_types": ["sliding_attention", "full_attention"]}
    assert [block.mixer.window for block in blocks(import_hf_config(typed))] == [512, None]
    biased = blocks(import_hf_config({**DOTS_LLM1, "attention_bias": True}))[0].mixer
    assert biased.qkv_bias and biased.output_bias
    with pytest.raises(SpecError) as error:
        import_hf_config({key: value for key, value in DOTS_LLM1.items() if key != "n_routed_experts"})
    assert error.value.field == "n_routed_experts"


def test_ministral_slides_per_layer_types_and_starcoder2_is_a_biased_layernorm_model_without_a_gate():
    windows = [block.mixer.window for block in blocks(import_hf_config(MINISTRAL_MIXED))]
    assert windows == [4096, None, 4096, None]
    assert {block.mixer.window for block in blocks(import_hf_config({"model_type": "ministral", "head_dim": 128}))} \
        == {4096}
    assert {block.mixer.window for block in blocks(import_hf_config({"model_type": "ministral", "head_dim": 128,
                                                                      "sliding_window": None}))} == {None}
    starcoder2 = import_hf_config({"model_type": "starcoder2", "sliding_window": 4096})
    assert starcoder2.norm == "layernorm" and starcoder2.tie_embeddings
    assert blocks(starcoder2)[0].mixer == AttentionMixer(num_heads=24, num_kv_heads=2, head_dim=128, qkv_bias=True,
                                                         output_bias=True, window=4096)
    assert blocks(starcoder2)[0].mlp == DenseMLP(12288, gated=False, bias=True, activation="gelu_tanh")
    plain = blocks(import_hf_config({"model_type": "starcoder2", "use_bias": False}))[0]
    assert not (plain.mixer.qkv_bias or plain.mlp.bias) and plain.mixer.window is None


def test_hunyuan_has_qk_norm_and_a_shared_mlp_beside_a_per_layer_top_k():
    dense = blocks(import_hf_config(HUNYUAN_DENSE))
    assert dense[0].mixer == AttentionMixer(num_heads=32, num_kv_heads=8, head_dim=128, qk_norm=True,
                                            qk_norm_after_rotary=True)   # HunYuanDenseV1Attention's order
    assert dense[0].mlp == DenseMLP(11008)
    moe = blocks(import_hf_config(HUNYUAN_MOE))
    assert [block.mlp.top_k for block in moe] == [8, 8, 4, 8]
    assert moe[0].mlp == MoEMLP(num_experts=64, top_k=8, expert_intermediate_size=3072, num_shared_experts=1,
                                shared_intermediate_size=3072)
    assert moe[0].mixer.qkv_bias and moe[0].mixer.output_bias and moe[0].mixer.qk_norm_after_rotary
    assert {block.mlp.top_k for block in blocks(import_hf_config({**HUNYUAN_MOE, "moe_topk": 2}))} == {2}
    for bad, reason in (([8, 8, 8], "has 3 entries but num_hidden_layers is 4"), ([8, 8, 0, 8], "must be >= 1"),
                        ([8, 8, 65, 8], "must be <= the number of experts (64)")):
        with pytest.raises(SpecError) as error:
            import_hf_config({**HUNYUAN_MOE, "moe_topk": bad})
        assert error.value.field.startswith("moe_topk") and reason in error.value.reason


def test_gpt2_and_starcoder_are_layernorm_models_with_learned_positions():
    gpt2 = import_hf_config(config("gpt2"))
    assert (gpt2.norm, gpt2.position_embeddings, gpt2.seq_len, gpt2.tie_embeddings) == ("layernorm", 1024, 1024, True)
    assert blocks(gpt2)[0].mlp == DenseMLP(3072, gated=False, bias=True, activation="gelu_tanh")   # gelu_new
    starcoder = import_hf_config(config("starcoder"))
    assert blocks(starcoder)[0].mixer == AttentionMixer(num_heads=48, num_kv_heads=1, head_dim=128, qkv_bias=True,
                                                        output_bias=True, rotary=False)
    assert starcoder.seq_len == 4096 and starcoder.position_embeddings == 8192
    with pytest.raises(SpecError) as error:
        import_hf_config(config("gpt2"), seq_len=2048)
    assert error.value.field == "seq_len"


def test_llama4_scout_chunks_its_rotary_layers_and_leaves_every_fourth_full_without_positions():
    layers = blocks(import_hf_config(config("llama-4-scout-17b-16e-text")))
    assert len(layers) == 48
    for index, layer in enumerate(layers):
        nope = (index + 1) % 4 == 0
        assert layer.mixer == AttentionMixer(num_heads=40, num_kv_heads=8, head_dim=128, rotary=not nope,
                                             chunk=None if nope else 8192), index
        assert layer.mlp == MoEMLP(num_experts=16, top_k=1, expert_intermediate_size=8192, num_shared_experts=1,
                                   shared_intermediate_size=8192, aux_loss_coeff=0.001)


def test_llama4_multimodal_config_reads_its_text_config_and_interleaves_dense_mlps():
    """The released (multimodal) form nests the text model under ``text_config``; Maverick's MoE is on every second
    layer (``interleave_moe_layer_step`` 2), the others dense of ``intermediate_size_mlp``."""
    text = config("llama-4-scout-17b-16e-text")
    wrapped = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
               "text_config": {**text, "model_type": "llama4_text"}, "vision_config": {"hidden_size": 1408}}
    assert blocks(import_hf_config(wrapped)) == blocks(import_hf_config(text))
    maverick = {key: value for key, value in text.items() if key not in ("moe_layers", "no_rope_layers")}
    maverick.update(num_local_experts=128, interleave_moe_layer_step=2)
    layers = blocks(import_hf_config({**wrapped, "text_config": maverick}))
    assert [isinstance(layer.mlp, MoEMLP) for layer in layers] == [False, True] * 24
    assert {layer.mlp for layer in layers[::2]} == {DenseMLP(16384)}
    assert [layer.mixer.rotary for layer in layers] == [True, True, True, False] * 12   # the class's default interval
    roles = ["full_attention"] * 48
    assert all(layer.mixer.chunk is None for layer in blocks(import_hf_config({**text, "layer_types": roles})))
    # no chunk size: the rotary layers attend over the whole sequence too (Llama4TextConfig's layer types)
    assert all(layer.mixer.chunk is None for layer in blocks(import_hf_config({**text, "attention_chunk_size": None})))


def test_olmo3_slides_on_three_layers_of_four_unless_layer_types_say_otherwise():
    """OLMo 3: OLMo 2's attention (biased per ``attention_bias``, QK-norm) windowed over ``sliding_window`` on all but
    every fourth layer by default (``Olmo3Config``), or as ``layer_types`` says."""
    doc = {"architectures": ["Olmo3ForCausalLM"], "hidden_size": 1024, "num_attention_heads": 8,
           "intermediate_size": 2816, "num_hidden_layers": 8, "vocab_size": 100278, "sliding_window": 4096}
    layers = blocks(import_hf_config(doc))
    assert [layer.mixer.window for layer in layers] == [4096, 4096, 4096, None] * 2
    assert {layer.mixer.qk_norm for layer in layers} == {True} and {layer.mlp for layer in layers} == {DenseMLP(2816)}
    types = ["full_attention", "sliding_attention"] * 4
    windows = [layer.mixer.window for layer in blocks(import_hf_config({**doc, "layer_types": types}))]
    assert windows == [None, 4096] * 4
    with pytest.raises(SpecError) as error:
        import_hf_config({**doc, "sliding_window": None})
    assert error.value.field == "sliding_window"


def test_smollm3_leaves_every_fourth_layer_without_positions_and_slides_only_when_told():
    """SmolLM3-3B: Llama with NoPE on every fourth layer (``no_rope_layers``); ``use_sliding_window`` windows the
    ``layer_types``' sliding layers, by default the NoPE ones (``SmolLM3Config``), and nothing without it; biases where
    ``attention_bias`` and ``mlp_bias`` say."""
    doc = config("smollm3-3b")
    spec = import_hf_config(doc)
    layers = blocks(spec)
    assert len(layers) == 36 and spec.tie_embeddings
    assert [layer.mixer for layer in layers[:4]] == [
        AttentionMixer(num_heads=16, num_kv_heads=4, head_dim=128, rotary=rope) for rope in (True, True, True, False)]
    assert [layer.mixer.rotary for layer in layers] == [True, True, True, False] * 9
    assert {layer.mlp for layer in layers} == {DenseMLP(11008)}
    bare = {key: value for key, value in doc.items() if key != "no_rope_layers"}
    interval = blocks(import_hf_config({**bare, "no_rope_layer_interval": 3}))
    assert [layer.mixer.rotary for layer in interval[:6]] == [True, True, False] * 2
    # a window without use_sliding_window windows nothing, as SmolLM3Attention reads it
    assert all(layer.mixer.window is None for layer in blocks(import_hf_config({**doc, "sliding_window": 2048})))
    sliding = blocks(import_hf_config({**doc, "use_sliding_window": True, "sliding_window": 2048}))
    assert [layer.mixer.window for layer in sliding[:8]] == [None, None, None, 2048] * 2
    types = ["sliding_attention", "full_attention"] * 18
    told = blocks(import_hf_config({**doc, "use_sliding_window": True, "sliding_window": 2048, "layer_types": types}))
    assert [layer.mixer.window for layer in told[:4]] == [2048, None, 2048, None]
    biased = blocks(import_hf_config({**doc, "attention_bias": True, "mlp_bias": True}))[0]
    assert biased.mixer.qkv_bias and biased.mixer.output_bias and biased.mlp == DenseMLP(11008, bias=True)
    with pytest.raises(SpecError) as error:
        import_hf_config({**doc, "use_sliding_window": True, "layer_types": types})
    assert error.value.field == "sliding_window"
    with pytest.raises(SpecError) as error:
        import_hf_config({**doc, "no_rope_layers": [1, 2] * 18})
    assert error.value.field == "no_rope_layers[1]"


def test_minimax_m2_is_qk_normed_attention_with_a_sigmoid_routed_moe_on_every_layer():
    layers = blocks(import_hf_config(config("minimax-m2")))
    assert len(layers) == 62
    assert {layer.mixer for layer in layers} == {AttentionMixer(num_heads=48, num_kv_heads=8, head_dim=128,
                                                                qk_norm=True)}
    assert {layer.mlp for layer in layers} == {MoEMLP(num_experts=256, top_k=8, expert_intermediate_size=1536,
                                                      aux_loss_coeff=0.001)}
    with pytest.raises(SpecError) as error:
        import_hf_config({**config("minimax-m2"), "num_experts_per_tok": 300})
    assert error.value.field == "num_experts_per_tok"


def test_glm_4_7_flash_is_latent_attention_with_its_first_layer_dense_or_as_mlp_layer_types_say():
    doc = config("glm-4.7-flash")
    layers = blocks(import_hf_config(doc))
    assert len(layers) == 47
    assert {layer.mixer for layer in layers} == {AttentionMixer(
        num_heads=20, num_kv_heads=20, head_dim=256, v_head_dim=256, q_lora_rank=768, kv_lora_rank=512,
        rope_head_dim=64)}
    moe = MoEMLP(num_experts=64, top_k=4, expert_intermediate_size=1536, num_shared_experts=1,
                 shared_intermediate_size=1536, router_groups=1, router_group_topk=1)
    assert [layer.mlp for layer in layers] == [DenseMLP(10240)] + [moe] * 46
    kinds = ["dense", "dense", "sparse"] + ["sparse"] * 44
    told = blocks(import_hf_config({**doc, "mlp_layer_types": kinds}))
    assert [layer.mlp for layer in told[:3]] == [DenseMLP(10240), DenseMLP(10240), moe]
    with pytest.raises(SpecError) as error:
        import_hf_config({**doc, "mlp_layer_types": ["dense", "moe"] + ["sparse"] * 45})
    assert error.value.field == "mlp_layer_types[1]"


def test_granite_families_bias_where_told_and_share_an_expert_only_in_granitemoeshared():
    doc = {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 2048,
           "num_hidden_layers": 4, "vocab_size": 49155}
    dense = blocks(import_hf_config({**doc, "model_type": "granite", "attention_bias": True, "mlp_bias": True}))[0]
    assert dense.mixer == AttentionMixer(num_heads=16, num_kv_heads=4, head_dim=64, qkv_bias=True, output_bias=True,
                                         softmax_scale=1.0)   # attention_multiplier's default, in place of 1/8
    assert dense.mlp == DenseMLP(2048, bias=True)
    moe = {**doc, "num_local_experts": 40, "num_experts_per_tok": 8, "shared_intermediate_size": 512}
    plain = blocks(import_hf_config({**moe, "architectures": ["GraniteMoeForCausalLM"]}))[0].mlp
    assert plain == MoEMLP(num_experts=40, top_k=8, expert_intermediate_size=2048, aux_loss_coeff=0.001)
    shared = blocks(import_hf_config({**moe, "model_type": "granitemoeshared"}))[0].mlp
    assert shared == MoEMLP(num_experts=40, top_k=8, expert_intermediate_size=2048, num_shared_experts=1,
                            shared_intermediate_size=512, aux_loss_coeff=0.001)
    assert blocks(import_hf_config({**moe, "model_type": "granitemoeshared", "shared_intermediate_size": 0}))[0].mlp \
        == plain
    with pytest.raises(SpecError) as error:
        import_hf_config({**moe, "model_type": "granitemoeshared", "shared_intermediate_size": -1})
    assert error.value.field == "shared_intermediate_size"


def test_seed_oss_biases_its_query_key_and_value_but_not_its_output_unless_told():
    doc = {"model_type": "seed_oss", "num_hidden_layers": 2}
    mixer = blocks(import_hf_config(doc))[0].mixer
    assert mixer == AttentionMixer(num_heads=80, num_kv_heads=8, head_dim=128, qkv_bias=True)
    assert blocks(import_hf_config({**doc, "attention_out_bias": True}))[0].mixer.output_bias


def test_nemotron_is_a_layernorm_model_with_an_ungated_mlp():
    spec = import_hf_config(MINITRON_8B)
    assert spec.norm == "layernorm" and not spec.tie_embeddings
    assert blocks(spec)[0].mixer == AttentionMixer(num_heads=48, num_kv_heads=8, head_dim=128)
    assert blocks(spec)[0].mlp == DenseMLP(16384, gated=False, activation="squared_relu")   # hidden_act relu2
    assert blocks(import_hf_config({**MINITRON_8B, "hidden_act": "gelu"}))[0].mlp == DenseMLP(16384, gated=False)


def test_arcee_and_apertus_are_llama_attention_with_an_ungated_mlp():
    doc = {"hidden_size": 2560, "num_attention_heads": 20, "num_key_value_heads": 4, "intermediate_size": 18432,
           "num_hidden_layers": 4, "vocab_size": 128004}
    arcee = import_hf_config({**doc, "model_type": "arcee", "mlp_bias": True})
    assert arcee.norm == "rmsnorm"
    assert blocks(arcee)[0] == LayerSpec(kind="decoder",
                                         mlp=DenseMLP(18432, gated=False, bias=True, activation="squared_relu"),
                                         mixer=AttentionMixer(num_heads=20, num_kv_heads=4, head_dim=128))
    apertus = blocks(import_hf_config({**doc, "architectures": ["ApertusForCausalLM"], "mlp_bias": True}))[0]
    assert apertus.mixer == AttentionMixer(num_heads=20, num_kv_heads=4, head_dim=128, qk_norm=True)
    # ApertusMLP has no biases whatever mlp_bias says; its activation is xIELU (hidden_act's default)
    assert apertus.mlp == DenseMLP(18432, gated=False, activation="xielu")
    gelu = blocks(import_hf_config({**doc, "architectures": ["ApertusForCausalLM"], "hidden_act": "gelu"}))[0]
    assert gelu.mlp == DenseMLP(18432, gated=False)


def test_ernie_4_5_moe_puts_its_moe_on_the_layers_its_interval_and_bounds_name():
    doc = {"architectures": ["Ernie4_5_MoeForCausalLM"], "hidden_size": 8192, "num_attention_heads": 64,
           "num_key_value_heads": 8, "intermediate_size": 28672, "num_hidden_layers": 8, "moe_num_experts": 64,
           "moe_k": 8, "moe_intermediate_size": 3584, "moe_num_shared_experts": 0, "moe_layer_start_index": 3}
    layers = blocks(import_hf_config(doc))
    moe = MoEMLP(num_experts=64, top_k=8, expert_intermediate_size=3584, aux_loss_coeff=0.001)
    assert [layer.mlp for layer in layers] == [DenseMLP(28672)] * 3 + [moe] * 5
    bounded = blocks(import_hf_config({**doc, "moe_layer_interval": 2, "moe_layer_end_index": 5}))
    assert [isinstance(layer.mlp, MoEMLP) for layer in bounded] == [False, False, False, True, False, True, False,
                                                                      False]
    shared = blocks(import_hf_config({**doc, "moe_num_shared_experts": 2}))[3].mlp
    assert (shared.num_shared_experts, shared.shared_intermediate_size) == (2, 3584)
    biased = blocks(import_hf_config({**doc, "use_bias": True}))[0]
    assert biased.mixer.qkv_bias and biased.mixer.output_bias and biased.mlp == DenseMLP(28672, bias=True)
    with pytest.raises(SpecError) as error:
        import_hf_config({**doc, "moe_k": 65})
    assert error.value.field == "moe_k"


def test_exaone4_slides_with_positions_on_its_local_layers_and_attends_globally_without_them():
    """Three local layers to one global, by the numeric pattern or by "LLLG"; the global layers carry no positions
    while there is a window, and without one every layer is global and rotary."""
    doc = EXAONE_4_32B
    layers = blocks(import_hf_config(doc))
    local = AttentionMixer(num_heads=40, num_kv_heads=8, head_dim=128, qk_norm=True, window=4096)
    global_ = AttentionMixer(num_heads=40, num_kv_heads=8, head_dim=128, qk_norm=True, rotary=False)
    assert [layer.mixer for layer in layers[:8]] == [local, local, local, global_] * 2
    assert {layer.mlp for layer in layers} == {DenseMLP(27392)}
    assert blocks(import_hf_config({**doc, "sliding_window_pattern": "LLLG"})) == layers
    assert [layer.mixer.window for layer in blocks(import_hf_config({**doc, "sliding_window_pattern": "LG"}))[:4]] \
        == [4096, None] * 2
    unwindowed = blocks(import_hf_config({**doc, "sliding_window": None}))
    assert {layer.mixer for layer in unwindowed} == {AttentionMixer(num_heads=40, num_kv_heads=8, head_dim=128,
                                                                    qk_norm=True)}
    types = ["full_attention", "sliding_attention"] * 32
    assert [layer.mixer.window for layer in blocks(import_hf_config({**doc, "layer_types": types}))[:2]] == [None, 4096]
    with pytest.raises(SpecError) as error:
        import_hf_config({**doc, "sliding_window_pattern": "LLXG"})
    assert error.value.field == "sliding_window_pattern"


def test_phi3_is_llama_shaped_and_phimoe_is_a_layernorm_mixtral_with_biased_attention():
    phi3 = import_hf_config(config("phi-3-mini-4k"))
    assert blocks(phi3)[0].mixer == AttentionMixer(num_heads=32, num_kv_heads=32, head_dim=96, window=2047)
    phimoe = import_hf_config(config("phi-3.5-moe"))
    assert phimoe.norm == "layernorm"
    assert blocks(phimoe)[0].mixer.qkv_bias and blocks(phimoe)[0].mixer.output_bias
    assert blocks(phimoe)[0].mlp == MoEMLP(num_experts=16, top_k=2, expert_intermediate_size=6400)
