"""Imported parameter counts against an independent oracle: ``transformers`` builds each fixture's model on the
meta device (no memory) and counts it. Ours must equal that count less the parts our model leaves out, each
named here by the HF parameters it consists of, and be within 0.5 % of it.

The fixtures are the released ``config.json`` files of the models named (Phi-3.5-MoE's 64-entry long-RoPE factor
lists are left out of its fixture: RoPE holds no parameters), except five added on 2026-11-29 from configs quoted in
public code (this machine cannot reach the HuggingFace Hub), each shape key found in at least two independent
quotes: ``qwen2-57b-a14b`` (a full copy), ``olmoe-1b-7b-0924`` and ``olmo-2-0425-1b`` (their keys that hold no weights,
such as token ids, as released to the best of our knowledge), ``llama-4-scout-17b-16e-text`` (Scout's text model in
the text-only form its derivatives ship, ``Llama4ForCausalLM``) and ``qwen3.5-35b-a3b`` (its ``text_config``; the
``vision_config`` is left out). Three more were added later that day the same way, each shape key again in at least two
independent quotes, and the keys that hold no weights kept only where a quote gives them (token ids left out):
``smollm3-3b`` (SmolLM3-3B), ``minimax-m2`` (MiniMax-M2) and ``glm-4.7-flash`` (GLM-4.7-Flash).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from planner.cost import count_parameters
from planner.spec.hf import import_hf_config
from tests.planner.test_hf_import import (DOTS_LLM1, EXAONE_4_32B, HUNYUAN_DENSE, HUNYUAN_MOE, MINISTRAL_MIXED,
                                          MINITRON_8B, NEMOTRON_H_BIASED_MLP, NEMOTRON_H_GROUPED,
                                          NEMOTRON_H_LATENT_MOE, NEMOTRON_H_MOE)

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
TOLERANCE = 0.005

SHARED_EXPERT_GATE = ("the shared expert's gate", r"shared_expert_gate\.weight$", 1)
OUTPUT_GATE = ("the attention output gate (half of each full-attention q_proj)", r"self_attn\.q_proj\.weight$", 0.5)
# OLMo's QK-norms span every head (16 of 128 wide here); ours is one head wide (planner.spec.hf's approximations)
OLMO_WIDE_QK_NORMS = ("the QK-norms' weights beyond one head's", r"self_attn\.(q|k)_norm\.weight$", 15 / 16)
# MiniMax-M2's likewise, over its 48 query heads and its 8 key heads
M2_WIDE_QK_NORMS = [("the query norm's weights beyond one head's", r"self_attn\.q_norm\.weight$", 47 / 48),
                    ("the key norm's weights beyond one head's", r"self_attn\.k_norm\.weight$", 7 / 8)]

# fixture -> (transformers model_type to build, when the config's own is not one, [(what we leave out,
# HF parameter names it consists of, the share of those parameters it is)])
CASES = {
    "llama-3-8b": (None, []),
    "mixtral-8x7b": (None, []),
    "deepseek-v2-lite": (None, []),
    "deepseek-v3": (None, []),
    "kimi-k2": ("deepseek_v3", []),   # model_type kimi_k2 has no transformers class; its architectures is V3's
    "nemotron-h-8b": (None, []),
    "minimax-text-01": ("minimax", []),
    "gemma-2-9b": (None, []),   # its four norms a layer: block_norms "sandwich"
    "qwen3-next-80b-a3b": (None, [OUTPUT_GATE, SHARED_EXPERT_GATE]),
    # the released multimodal config's text model (its vision_config left out of the fixture)
    "qwen3.5-35b-a3b": ("qwen3_5_moe_text", [OUTPUT_GATE, SHARED_EXPERT_GATE]),
    "qwen2-57b-a14b": (None, [SHARED_EXPERT_GATE]),
    "olmo-2-0425-1b": (None, [OLMO_WIDE_QK_NORMS]),
    "olmoe-1b-7b-0924": (None, [OLMO_WIDE_QK_NORMS]),
    "llama-4-scout-17b-16e-text": (None, []),   # its QK-norm (an L2 norm) holds no weights
    "smollm3-3b": (None, []),
    "minimax-m2": (None, M2_WIDE_QK_NORMS),
    "glm-4.7-flash": (None, []),
    "qwen2.5-7b": (None, []),
    "qwen3-8b": (None, []),
    "qwen3-30b-a3b": (None, []),
    "qwen3-235b-a22b": (None, []),
    "phi-3-mini-4k": (None, []),
    "phi-3.5-moe": (None, [("the head's bias (lm_head_bias)", r"^lm_head\.bias$", 1)]),
    "mamba-2.8b-hf": (None, []),
    "falcon-mamba-7b": (None, []),
    "mamba-codestral-7b": (None, []),
    "jamba-v0.1": (None, [("the Mamba mixers' RMSNorms of dt, B and C", r"mamba\.(dt|b|c)_layernorm\.weight$", 1)]),
    "granite-4.0-h-small": (None, []),
    "granite-4.0-h-tiny": (None, []),
    "gpt-oss-20b": (None, []),
    "gpt-oss-120b": (None, []),
    "glm-4.5": (None, []),
    "glm-4.5-air": (None, []),
    "gpt2": (None, []),
    "starcoder": (None, []),
}


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def hf_converted(config: dict) -> dict:
    """What ``transformers`` 5's strict config classes read differently: MiniMax-Text-01's own ``attn_type_list`` in
    the spelling of its ``-hf`` conversion (``layer_types``), the one ``MiniMaxConfig`` reads; Llama 4's released
    ``attn_temperature_tuning`` (4, an int where ``Llama4TextConfig`` now types a bool; it holds no weights)."""
    if "attn_temperature_tuning" in config:
        config = {**config, "attn_temperature_tuning": bool(config["attn_temperature_tuning"])}
    if "attn_type_list" not in config:
        return config
    types = ["full_attention" if value else "linear_attention" for value in config["attn_type_list"]]
    return {**config, "layer_types": types}


def transformers_parameters(config: dict, model_type: str | None = None) -> dict[str, int]:
    """Every distinct parameter of the model ``transformers`` builds from ``config``, by name (tied tables once)."""
    keys = {key: value for key, value in hf_converted(config).items()
            if key not in ("model_type", "quantization_config")}
    hf_config = AutoConfig.for_model(model_type or config["model_type"], **keys)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return {name: parameter.numel() for name, parameter in model.named_parameters()}


def text_model_parameters(config: dict) -> dict[str, int]:
    """Gemma 3's language model alone, as ``Gemma3ForCausalLM`` builds it from the ``text_config``."""
    return transformers_parameters({**config["text_config"], "model_type": "gemma3_text"})


def left_out(parameters: dict[str, int], parts) -> int:
    total = 0
    for what, pattern, share in parts:
        matched = sum(count for name, count in parameters.items() if re.search(pattern, name))
        assert matched, f"{what}: no transformers parameter matches {pattern}"
        total += round(matched * share)
    return total


def test_every_fixture_has_a_count_case():
    assert {path.stem for path in FIXTURES.glob("*.json")} == set(CASES) | {"gemma-3-27b"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_imported_parameters_equal_transformers_less_the_named_parts(name):
    model_type, parts = CASES[name]
    config = fixture(name)
    text = config.get("text_config", config)   # a multimodal config's language model, as its CausalLM class builds it
    reference = transformers_parameters(text, model_type)
    expected = sum(reference.values())
    ours = count_parameters(import_hf_config(config))
    assert ours == expected - left_out(reference, parts)
    assert abs(ours - expected) <= TOLERANCE * expected


ERNIE_ROUTING_BIAS = ("the router's score-correction bias (a frozen parameter)",
                      r"moe_statics\.e_score_correction_bias$", 1)
# ERNIE 4.5 MoE with every bias on and an MoE on every second layer: the biases the model cannot hold are named
ERNIE_BIASED = {"model_type": "ernie4_5_moe", "num_hidden_layers": 6, "use_bias": True, "moe_layer_interval": 2}
ERNIE_BIASED_PARTS = [ERNIE_ROUTING_BIAS, ("the head's bias", r"^lm_head\.bias$", 1),
                      ("the shared experts' biases", r"shared_experts\.\w+_proj\.bias$", 1)]


@pytest.mark.parametrize("config, parts", [(MINITRON_8B, []), (EXAONE_4_32B, []), (ERNIE_BIASED, ERNIE_BIASED_PARTS),
                                           (NEMOTRON_H_MOE, []), (DOTS_LLM1, []), (MINISTRAL_MIXED, []),
                                           (HUNYUAN_DENSE, []), (HUNYUAN_MOE, []), (NEMOTRON_H_LATENT_MOE, []),
                                           (NEMOTRON_H_GROUPED, []), (NEMOTRON_H_BIASED_MLP, [])],
                         ids=["minitron-8b", "exaone-4.0-32b", "ernie-4.5-moe-biased", "nemotron-h-moe", "dots.llm1",
                              "ministral-mixed", "hunyuan-dense", "hunyuan-moe", "nemotron-h-latent-moe",
                              "nemotron-h-grouped-router", "nemotron-h-biased-mlp"])
def test_shapes_without_a_fixture_count_as_transformers_builds_them(config, parts):
    reference = transformers_parameters(config)
    assert count_parameters(import_hf_config(config)) == sum(reference.values()) - left_out(reference, parts)


def test_gemma3_counts_its_language_model_and_names_the_vision_tower():
    config = fixture("gemma-3-27b")
    full, text = transformers_parameters(config), text_model_parameters(config)
    vision = sum(count for name, count in full.items() if re.search(r"vision_tower|multi_modal_projector", name))
    assert sum(full.values()) - sum(text.values()) == vision
    ours = count_parameters(import_hf_config(config))
    assert ours == sum(text.values())
