"""Import a HuggingFace ``config.json`` into a ModelSpec.

Every family becomes ``embedding`` + its blocks + ``head``; what differs is how a family's keys say which
mixer and which MLP each block has:

- ``llama``, ``mistral``: attention + gated MLP in every block (Mistral's ``sliding_window``, when set,
  windows every layer). ``mixtral``: the MLP is a ``num_local_experts`` top-``num_experts_per_tok`` MoE.
- ``gemma2``: a norm before and after each sublayer (``block_norms: sandwich``, four a layer; OLMo 2's, OLMo 3's and
  EXAONE 4's after it, ``post``); ``layer_types`` when given, else sliding-window on even layers and global on odd ones
  (the rule of HF's ``Gemma2Config``). ``gemma3`` / ``gemma3_text``: the text model may sit under
  ``text_config``; ``layer_types`` when given, else layer i is global when ``(i + 1) %
  sliding_window_pattern == 0`` (every 6th). The published Gemma 3 27B config omits ``vocab_size`` and
  ``sliding_window_pattern`` and relies on ``Gemma3TextConfig``'s defaults (262 208 and 6), as we do.
- ``deepseek_v2``, ``deepseek_v3``: multi-head latent attention; the first ``first_k_dense_replace``
  blocks have a dense MLP, the others (every ``moe_layer_freq``-th) an MoE of ``n_routed_experts``
  top-``num_experts_per_tok`` experts of ``moe_intermediate_size`` plus ``n_shared_experts`` shared ones.
- ``nemotron_h``: one block per character of ``hybrid_override_pattern`` (or entry of
  ``layers_block_type``): ``M`` a Mamba-2 mixer alone, ``*`` attention alone, ``-`` a squared-ReLU
  (non-gated) MLP alone, ``E`` an MoE alone.
- ``qwen3_next``: ``layer_types`` when given, else every ``full_attention_interval``-th layer (4 by default) is full
  attention and the rest gated delta-net linear attention; MLPs are MoE with one shared expert except the
  ``mlp_only_layers`` and layers off the ``decoder_sparse_step``. ``qwen3_5_moe`` / ``qwen3_5`` (Qwen3.5, and
  ``_text`` their text models): the same layers, MoE on every layer (the MoE model) or dense SwiGLU of
  ``intermediate_size`` (the dense one), the text model under ``text_config``.
- ``minimax`` / ``minimax_text_01`` / ``minimax_m1``: ``attn_type_list`` (0 lightning linear attention,
  1 softmax attention) or ``layer_types``; every MLP is an MoE of ``num_local_experts`` experts of
  ``intermediate_size`` (plus a shared expert when ``shared_intermediate_size`` > 0).
- ``qwen2``: Llama with biased q/k/v; ``qwen3``: plus a per-head QK-norm; ``qwen3_moe``: Qwen3's attention with
  ``num_experts`` experts (no shared one) except the ``mlp_only_layers``. ``phi3``: Llama's weights (fused).
  ``phimoe``: Mixtral with biased attention and LayerNorm. ``qwen2_moe``: Qwen2's attention with ``num_experts``
  experts of ``moe_intermediate_size`` and one shared expert of ``shared_expert_intermediate_size``, except the
  ``mlp_only_layers`` and layers off the ``decoder_sparse_step``.
- ``olmo2``: Llama with ``attention_bias`` on all four projections, an RMSNorm over all queries and over all keys,
  and each sublayer's norm after it. ``olmo3``: OLMo 2 sliding over ``sliding_window`` on the ``layer_types``'
  sliding layers (all but every fourth by default). ``olmoe``: that attention (norms before) with a top-k MoE of
  ``num_experts`` experts of ``intermediate_size`` on every layer.
- ``mamba`` / ``falcon_mamba``: Mamba-1 mixers alone; ``mamba2``: Mamba-2 mixers alone. ``jamba``: attention
  every ``attn_layer_period``-th layer (at ``attn_layer_offset``), Mamba-1 elsewhere; an MoE every
  ``expert_layer_period``-th MLP. ``granitemoehybrid``: ``layer_types`` of Mamba-2 and attention, every layer
  with an MoE plus a shared expert (or a dense MLP when ``num_local_experts`` is 0).
- ``llama4`` / ``llama4_text``: attention chunked over ``attention_chunk_size`` tokens with rotary positions, and
  every ``no_rope_layer_interval``-th layer (or per ``no_rope_layers`` / ``layer_types``) full attention without
  positions; an MoE with one shared expert on the ``moe_layers`` (every ``interleave_moe_layer_step``-th), dense MLPs
  of ``intermediate_size_mlp`` elsewhere. ``llama4``'s text model sits under ``text_config``.
- ``smollm3``: Llama (biases per ``attention_bias`` and ``mlp_bias``) without positions on every
  ``no_rope_layer_interval``-th layer (or per ``no_rope_layers``); with ``use_sliding_window``, windows on the
  ``layer_types``' sliding layers (by default the NoPE ones).
- ``granite``: Llama with biases per ``attention_bias`` and ``mlp_bias``, and its multipliers;
  ``granitemoe``: that attention with a ``num_local_experts`` MoE on every layer, and ``granitemoeshared`` beside a
  shared expert of ``shared_intermediate_size``. ``seed_oss``: Llama with biased q/k/v (``attention_bias``), output
  (``attention_out_bias``) and MLP (``mlp_bias``). ``nemotron`` (Nemotron-4, Minitron): LayerNorm, biases per
  ``attention_bias`` / ``mlp_bias``, a squared-ReLU MLP without a gate; ``arcee`` (AFM): the same with RMSNorm.
  ``apertus``: attention with a per-head QK-norm and an MLP without a gate (xIELU).
- ``ernie4_5``: Llama with ``use_bias`` on every projection. ``ernie4_5_moe``: that attention, and on every
  ``moe_layer_interval``-th layer from ``moe_layer_start_index`` to ``moe_layer_end_index`` a ``moe_num_experts``
  top-``moe_k`` MoE beside ``moe_num_shared_experts`` shared experts, dense MLPs elsewhere.
- ``exaone4``: per-head QK-norm; local layers slide over ``sliding_window`` with rotary positions, global ones (every
  ``sliding_window_pattern``-th, or per an ``L``/``G`` string or ``layer_types``) attend without positions.
- ``gpt_oss``: alternating sliding / full attention with sinks and biases, biased MoE on every layer.
  ``glm4_moe``: biased q/k/v, optional QK-norm, DeepSeek's dense-first-k then shared-expert MoE. ``glm4_moe_lite``
  (GLM-4.7-Flash): DeepSeek's latent attention and MoE, dense where ``mlp_layer_types`` says (the first layer by
  default). ``minimax_m2``: QK-normed grouped-query attention and a ``num_local_experts`` MoE on every layer.
- ``gpt2`` / ``gpt_bigcode``: learned positions, LayerNorm, biased attention (one key/value head with
  ``multi_query``) and a biased GELU MLP.
- Any other ``model_type`` whose ``architectures`` names one of these families' classes (Kimi-K2's
  ``kimi_k2`` with ``DeepseekV3ForCausalLM``) is read as that family.

Keys a config leaves out take the defaults of the family's ``transformers`` config class
(``planner.spec.hf.defaults``, checked against ``transformers`` by the tests).

Approximations, chosen because the pipeline planner needs per-layer cost and memory, not bit-exact modules:
- MLA is attention whose query/key heads are ``qk_nope_head_dim + qk_rope_head_dim`` wide and value heads
  ``v_head_dim`` wide, with the latent ranks kept so the cost model counts the down/up projections; in
  training every head materialises its own key and value, so ``num_kv_heads == num_heads``.
- Qwen3-Next's attention output gate and shared-expert gate (Qwen3.5's too; Qwen2-MoE's shared-expert gate),
  DeepSeek's multi-token-prediction module, Jamba's dt/B/C norms, Phi-3.5-MoE's head bias and Gemma 3's vision tower
  are left out (each well under 1 % of the parameters, or absent from the model that trains the pipeline; the tests
  name each). So is Llama 4's vision encoder. Gemma's and Granite's scalars (embedding, residual and logits
  multipliers, soft-caps, attention scales: ``reader.gemma_scalars``, ``granite_scalars``) are the model's.
- OLMo 2's, OLMo 3's, OLMoE's and MiniMax-M2's QK-norms normalise all the heads' queries (keys) at once; they run as
  Qwen3's per-head norm, whose weights are one head wide (the tests name the rest: 0.004 % of OLMo 2 1B).
  MiniMax-M2's partial rotary positions (``rotary_dim``) and sigmoid routing with a balancing bias hold no weights
  and are not modelled; nor are its and GLM-4.7-Flash's multi-token-prediction modules, as DeepSeek's.
- Linear attention keeps one head width: Qwen3-Next's ``linear_value_head_dim`` (equal to the key width in
  every released config).
- Activations are the ones the config names (``reader.mlp_activation``; a name the model format does not hold is
  refused by its key): SwiGLU, Gemma 2's and 3's GeGLU with the tanh-approximated GELU (``hidden_activation``),
  gpt-oss's clamped SwiGLU, GPT-2's and StarCoder's tanh GELU, Nemotron-H's, Nemotron-4's and AFM's squared ReLU
  (``relu2``) and Apertus's xIELU (with its two learned scalars); Falcon-Mamba's
  weightless RMSNorms of B, C and dt are left out (no parameters, a few elementwise passes).
- Training runs in bf16 whatever ``torch_dtype`` the checkpoint was saved in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Callable

from planner.errors import SpecError, SpecWarning
from planner.spec.hf import attention_families as softmax
from planner.spec.hf import hybrid_families as hybrid
from planner.spec.hf.defaults import TRANSFORMERS_ALIASES, TRANSFORMERS_DEFAULTS
from planner.spec.hf.reader import (EMBEDDING, HEAD, Config, gemma_scalars, granite_scalars, mlp_activation,
                                    with_attention_scalars, with_gated_activation)
from planner.spec.model import LayerSpec, ModelSpec, load_model_spec
from planner.fields import require_mapping, shown

DEFAULT_SEQ_LEN = 4096


@dataclass(frozen=True)
class Family:
    """How one ``model_type`` becomes a ModelSpec: its blocks, its norm, the key holding the size of its learned
    position table (None: rotary or no positions, which hold no parameters), and whether its text model's keys may
    sit under ``text_config``."""

    blocks: Callable[[Config], list[LayerSpec]]
    norm: str = "rmsnorm"
    positions_key: str | None = None
    nested_text: bool = False   # a multimodal config: the text model's keys under ``text_config`` (when present)
    # the key naming its gated MLPs' and experts' activation (``reader.mlp_activation``); None: its builder sets it
    activation_key: str | None = "hidden_act"
    block_norms: str = "pre"   # where its blocks' norms sit (``planner.spec.model.BLOCK_NORMS``)
    # its scalars without weights: (attention fields, model fields) (``reader.gemma_scalars``, ``granite_scalars``)
    scalars: Callable[[Config], tuple[dict, dict]] | None = None


FAMILIES: dict[str, Family] = {
    "llama": Family(softmax.llama),
    "mistral": Family(softmax.llama),
    "ministral": Family(softmax.ministral),
    "starcoder2": Family(softmax.starcoder2, norm="layernorm"),
    "phi3": Family(softmax.llama),
    "mixtral": Family(softmax.mixtral),
    "phimoe": Family(softmax.phimoe, norm="layernorm"),
    "gemma2": Family(softmax.gemma2, activation_key="hidden_activation", block_norms="sandwich", scalars=gemma_scalars),
    "gemma3": Family(softmax.gemma3, nested_text=True, activation_key="hidden_activation", block_norms="sandwich",
                     scalars=gemma_scalars),
    "gemma3_text": Family(softmax.gemma3, activation_key="hidden_activation", block_norms="sandwich",
                          scalars=gemma_scalars),
    "qwen2": Family(softmax.qwen2),
    "qwen3": Family(softmax.qwen3),
    "qwen3_moe": Family(softmax.qwen3_moe),
    "qwen2_moe": Family(softmax.qwen2_moe),
    "olmo2": Family(softmax.olmo2, block_norms="post"),
    "olmo3": Family(softmax.olmo3, block_norms="post"),
    "olmoe": Family(softmax.olmoe),
    "llama4": Family(softmax.llama4, nested_text=True),
    "llama4_text": Family(softmax.llama4),
    "smollm3": Family(softmax.smollm3),
    "granite": Family(softmax.granite, scalars=granite_scalars),
    "granitemoe": Family(softmax.granitemoe, scalars=granite_scalars),
    "granitemoeshared": Family(softmax.granitemoeshared, scalars=granite_scalars),
    "seed_oss": Family(softmax.seed_oss),
    "nemotron": Family(softmax.ungated, norm="layernorm"),
    "arcee": Family(softmax.ungated),
    "apertus": Family(softmax.apertus),
    "exaone4": Family(softmax.exaone4, block_norms="post"),
    "ernie4_5": Family(softmax.ernie4_5),
    "ernie4_5_moe": Family(softmax.ernie4_5_moe),
    "gpt_oss": Family(softmax.gpt_oss, activation_key=None),
    "minimax_m2": Family(softmax.minimax_m2),
    "deepseek_v2": Family(softmax.deepseek),
    "deepseek_v3": Family(softmax.deepseek),
    "glm4_moe_lite": Family(softmax.glm4_moe_lite),
    "glm4_moe": Family(softmax.glm4_moe),
    "dots1": Family(softmax.dots1),
    "hunyuan_v1_dense": Family(softmax.hunyuan_v1_dense),
    "hunyuan_v1_moe": Family(softmax.hunyuan_v1_moe),
    "gpt2": Family(softmax.gpt2, norm="layernorm", positions_key="n_positions"),
    "gpt_bigcode": Family(softmax.gpt2, norm="layernorm", positions_key="n_positions"),
    "mamba": Family(hybrid.mamba),
    "falcon_mamba": Family(hybrid.mamba),
    "mamba2": Family(hybrid.mamba2),
    "jamba": Family(hybrid.jamba),
    "nemotron_h": Family(hybrid.nemotron_h),
    "granitemoehybrid": Family(hybrid.granitemoehybrid, scalars=granite_scalars),
    "qwen3_next": Family(hybrid.qwen3_next),
    "qwen3_5_moe": Family(hybrid.qwen3_next, nested_text=True),
    "qwen3_5_moe_text": Family(hybrid.qwen3_next),
    "qwen3_5": Family(hybrid.qwen3_next, nested_text=True),
    "qwen3_5_text": Family(hybrid.qwen3_next),
    "minimax": Family(hybrid.minimax),
    "minimax_text_01": Family(hybrid.minimax),
    "minimax_m1": Family(hybrid.minimax),
}

ARCHITECTURE_MODEL_TYPES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "MixtralForCausalLM": "mixtral",
    "MinistralForCausalLM": "ministral", "Starcoder2ForCausalLM": "starcoder2",
    "Phi3ForCausalLM": "phi3", "PhiMoEForCausalLM": "phimoe", "PhimoeForCausalLM": "phimoe",
    "Gemma2ForCausalLM": "gemma2", "Gemma3ForConditionalGeneration": "gemma3", "Gemma3ForCausalLM": "gemma3_text",
    "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen2MoeForCausalLM": "qwen2_moe", "Olmo2ForCausalLM": "olmo2", "Olmo3ForCausalLM": "olmo3",
    "OlmoeForCausalLM": "olmoe",
    "Llama4ForConditionalGeneration": "llama4", "Llama4ForCausalLM": "llama4_text",
    "SmolLM3ForCausalLM": "smollm3", "GraniteForCausalLM": "granite", "GraniteMoeForCausalLM": "granitemoe",
    "GraniteMoeSharedForCausalLM": "granitemoeshared", "SeedOssForCausalLM": "seed_oss",
    "NemotronForCausalLM": "nemotron", "ArceeForCausalLM": "arcee", "ApertusForCausalLM": "apertus",
    "Exaone4ForCausalLM": "exaone4", "Ernie4_5ForCausalLM": "ernie4_5", "Ernie4_5_MoeForCausalLM": "ernie4_5_moe",
    "GptOssForCausalLM": "gpt_oss", "MiniMaxM2ForCausalLM": "minimax_m2",
    "Glm4MoeForCausalLM": "glm4_moe", "Glm4MoeLiteForCausalLM": "glm4_moe_lite", "Dots1ForCausalLM": "dots1",
    "HunYuanDenseV1ForCausalLM": "hunyuan_v1_dense", "HunYuanMoEV1ForCausalLM": "hunyuan_v1_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3",
    "GPT2LMHeadModel": "gpt2", "GPTBigCodeForCausalLM": "gpt_bigcode",
    "MambaForCausalLM": "mamba", "FalconMambaForCausalLM": "falcon_mamba", "Mamba2ForCausalLM": "mamba2",
    "JambaForCausalLM": "jamba", "NemotronHForCausalLM": "nemotron_h",
    "GraniteMoeHybridForCausalLM": "granitemoehybrid", "Qwen3NextForCausalLM": "qwen3_next",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5_moe", "Qwen3_5MoeForCausalLM": "qwen3_5_moe_text",
    "Qwen3_5ForConditionalGeneration": "qwen3_5", "Qwen3_5ForCausalLM": "qwen3_5_text",
    "MiniMaxForCausalLM": "minimax", "MiniMaxText01ForCausalLM": "minimax_text_01",
    "MiniMaxM1ForCausalLM": "minimax_m1",
}


def supported_model_types() -> list[str]:
    return sorted(FAMILIES)


def family_of(config: dict) -> str:
    """The family a config is read as: its ``model_type`` when we know it, else the first class in its
    ``architectures`` that we know (Kimi-K2's ``kimi_k2`` is DeepSeek-V3's ``DeepseekV3ForCausalLM``)."""
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise SpecError("model_type", f"must be a string, got {shown(model_type)}")
    if model_type in FAMILIES:
        return model_type
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list):
        raise SpecError("architectures", f"must be a list of class names, got {shown(architectures)}")
    known = [ARCHITECTURE_MODEL_TYPES[arch] for arch in architectures
             if isinstance(arch, str) and arch in ARCHITECTURE_MODEL_TYPES]
    if known:
        return known[0]
    if model_type is None:
        raise SpecError("model_type", "is required (no known entry in architectures); supported: "
                        + ", ".join(supported_model_types()))
    raise SpecError("model_type", f"unsupported {shown(model_type)} (and no supported class in architectures); "
                                  f"supported: {', '.join(supported_model_types())}")


def _text_config(config: dict, family: str) -> Config:
    """The text model's keys: Gemma 3's, Llama 4's and Qwen3.5's multimodal configs nest them under
    ``text_config``."""
    tables = dict(defaults=TRANSFORMERS_DEFAULTS.get(family), aliases=TRANSFORMERS_ALIASES.get(family))
    if FAMILIES[family].nested_text and "text_config" in config:
        return Config(require_mapping(config["text_config"], "text_config"), "text_config", **tables)
    return Config(config, **tables)


def hf_model_name(config: dict, filename: str = "") -> str | None:
    """The model a config describes: the last part of its ``_name_or_path`` (``meta-llama/Meta-Llama-3-8B``),
    else the stem of the file it came in (``Qwen3-8B.json``); None when neither names it (``./``, no file)."""
    path = config.get("_name_or_path")
    if isinstance(path, str) and path.strip("/."):
        return path.rstrip("/").rsplit("/", 1)[-1]
    stem = PurePath(filename).stem if filename else ""
    return stem or None


def _default_name(config: dict, family: str) -> str:
    named = hf_model_name(config)
    if named:
        return named
    return config.get("model_type") if isinstance(config.get("model_type"), str) else family


def _check_positive(field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(field, f"must be a positive integer, got {value!r}")


def _blocks(cfg: Config, family: Family, attention_scalars: dict) -> list[LayerSpec]:
    """The family's blocks, their gated MLPs and experts with the activation its ``activation_key`` names, their
    attention with its scalars."""
    blocks = family.blocks(cfg)
    if family.activation_key and any(layer.mlp is not None and layer.mlp.gated for layer in blocks):
        blocks = with_gated_activation(blocks, mlp_activation(cfg, family.activation_key, gated=True))
    return with_attention_scalars(blocks, **attention_scalars) if attention_scalars else blocks


def import_hf_config(config: dict, *, name: str | None = None, seq_len: int | None = None,
                     micro_batch_size: int = 1, source: str | None = None) -> ModelSpec:
    """Build the ModelSpec of a HuggingFace ``config.json`` (parsed); errors name the HF key at fault.

    ``seq_len`` defaults to 4096, or to the learned position table's size when that is shorter (GPT-2's 1024).
    """
    return read_hf_config(config, name=name, seq_len=seq_len, micro_batch_size=micro_batch_size,
                          source=source)[0]


def read_hf_config(config: dict, *, name: str | None = None, seq_len: int | None = None,
                   micro_batch_size: int = 1, source: str | None = None) -> tuple[ModelSpec, list[SpecWarning]]:
    """``import_hf_config``'s spec, and a warning for each key of the config that looks like a misspelling of a
    key it left out (whose ``transformers`` default was taken instead)."""
    config = require_mapping(config, "")
    for field, value in (("seq_len", seq_len), ("micro_batch_size", micro_batch_size)):
        if value is not None:
            _check_positive(field, value)
    family_name = family_of(config)
    family = FAMILIES[family_name]
    cfg = _text_config(config, family_name)
    positions = cfg.integer(family.positions_key) if family.positions_key else None
    if seq_len is None:
        seq_len = min(DEFAULT_SEQ_LEN, positions) if positions else DEFAULT_SEQ_LEN
    tie_default = cfg.default("tie_word_embeddings")
    attention_scalars, model_scalars = family.scalars(cfg) if family.scalars else ({}, {})
    spec = ModelSpec(
        name=name or _default_name(config, family_name),
        hidden_size=cfg.integer("hidden_size"),
        vocab_size=cfg.integer("vocab_size"),
        seq_len=seq_len,
        micro_batch_size=micro_batch_size,
        tie_embeddings=cfg.flag("tie_word_embeddings", Config(config).flag("tie_word_embeddings", tie_default)),
        layers=(EMBEDDING, *_blocks(cfg, family, attention_scalars), HEAD),
        source=source or f"huggingface config.json (model_type {config.get('model_type', family_name)}"
                         + (f", read as {family_name})" if config.get("model_type") not in (None, family_name)
                            else ")"),
        norm=family.norm,
        position_embeddings=positions,
        block_norms=family.block_norms,
        **model_scalars,
    )
    # The spec loader owns the invariants; a spec it would reject must not leave the importer.
    warnings = [SpecWarning(cfg.field(key), f"is not a key this model's config reads; did you mean {meant!r}? "
                                            f"{meant!r} is not in the config, so its default was used")
                for key, meant in cfg.misspellings()]
    return load_model_spec(spec.to_dict()), warnings
