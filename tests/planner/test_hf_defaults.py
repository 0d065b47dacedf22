"""The defaults and aliases the importer fills in for keys a config leaves out are those of ``transformers``' config
classes: entry by entry, and end to end (a config that is only a ``model_type`` imports as the model
``transformers`` builds from its class defaults, parameter for parameter)."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from planner.cost import count_parameters
from planner.spec.hf import FAMILIES, import_hf_config
from planner.spec.hf.defaults import TRANSFORMERS_ALIASES, TRANSFORMERS_DEFAULTS

# Our model types that transformers knows under another name (MiniMax's checkpoint names; Gemma 3's text model,
# whose keys sit under text_config).
TRANSFORMERS_CLASS_OF = {"minimax_text_01": "minimax", "minimax_m1": "minimax", "gemma3": "gemma3_text",
                         "llama4": "llama4_text", "qwen3_5_moe": "qwen3_5_moe_text", "qwen3_5": "qwen3_5_text"}

# Families every key of which has a transformers default (the others need their sizes in the config).
FULLY_DEFAULTED = ("qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "olmo2", "olmo3", "olmoe", "phi3", "phimoe",
                   "mamba", "falcon_mamba", "mamba2", "jamba", "granitemoehybrid", "gpt_oss", "glm4_moe", "gpt2",
                   "gpt_bigcode", "llama", "llama4_text", "qwen3_5_moe_text", "qwen3_5_text", "smollm3",
                   "minimax_m2", "glm4_moe_lite", "granite", "granitemoe", "granitemoeshared", "seed_oss",
                   "exaone4", "arcee", "apertus", "ernie4_5", "ernie4_5_moe", "starcoder2")

# What our model of a family leaves out (as tests/planner/test_hf_counts.py names it), and its share of the parameters
# matched: Jamba's dt/B/C norms, Qwen2-MoE's and Qwen3.5's shared-expert gate, Qwen3.5's attention output gate (half
# of each full-attention q_proj), ERNIE 4.5 MoE's routing bias (a frozen
# parameter), OLMo's and MiniMax-M2's QK-norm weights beyond
# one head's (32 and 16 heads in OLMo's default models; MiniMax-M2's 48 query and 8 key heads).
QK_NORMS = r"self_attn\.(q|k)_norm\.weight$"
SHARED_EXPERT_GATE = (r"shared_expert_gate\.weight$", 1)
OUTPUT_GATE = (r"self_attn\.q_proj\.weight$", 0.5)
LEFT_OUT = {"jamba": [(r"mamba\.(dt|b|c)_layernorm\.weight$", 1)], "qwen2_moe": [SHARED_EXPERT_GATE],
            "olmo2": [(QK_NORMS, 31 / 32)], "olmo3": [(QK_NORMS, 31 / 32)], "olmoe": [(QK_NORMS, 15 / 16)],
            "qwen3_5_moe_text": [OUTPUT_GATE, SHARED_EXPERT_GATE], "qwen3_5_text": [OUTPUT_GATE],
            "ernie4_5_moe": [(r"moe_statics\.e_score_correction_bias$", 1)],
            "minimax_m2": [(r"self_attn\.q_norm\.weight$", 47 / 48), (r"self_attn\.k_norm\.weight$", 7 / 8)]}


def kept(model_type: str, name: str, count: int) -> float:
    """The parameters of ``name`` our model of ``model_type`` holds."""
    share = next((share for pattern, share in LEFT_OUT.get(model_type, []) if re.search(pattern, name)), 0)
    return count * (1 - share)


def class_defaults(model_type: str) -> dict:
    config_class = CONFIG_MAPPING[TRANSFORMERS_CLASS_OF.get(model_type, model_type)]
    return {field.name: field.default for field in dataclasses.fields(config_class)}


def test_every_family_has_a_defaults_table_with_its_tie_default():
    assert set(TRANSFORMERS_DEFAULTS) == set(FAMILIES)
    assert all("tie_word_embeddings" in table for table in TRANSFORMERS_DEFAULTS.values())


@pytest.mark.parametrize("model_type", sorted(TRANSFORMERS_DEFAULTS))
def test_each_default_is_the_config_class_default(model_type):
    theirs = class_defaults(model_type)
    for key, ours in TRANSFORMERS_DEFAULTS[model_type].items():
        assert key in theirs, f"{model_type}: {key} is not a field of the transformers config class"
        assert theirs[key] == ours, f"{model_type}.{key}: ours {ours!r}, transformers {theirs[key]!r}"


@pytest.mark.parametrize("model_type", sorted(TRANSFORMERS_ALIASES))
def test_each_alias_is_in_the_config_class_attribute_map(model_type):
    attribute_map = CONFIG_MAPPING[model_type].attribute_map
    for key, alias in TRANSFORMERS_ALIASES[model_type].items():
        assert attribute_map.get(key) == alias or attribute_map.get(alias) == key, f"{model_type}: {key}/{alias}"


@pytest.mark.parametrize("model_type", FULLY_DEFAULTED)
def test_a_bare_model_type_imports_as_transformers_default_model(model_type):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type))
    expected = sum(kept(model_type, name, parameter.numel()) for name, parameter in model.named_parameters())
    assert count_parameters(import_hf_config({"model_type": model_type})) == expected


@pytest.mark.parametrize("model_type, alias_doc", [
    ("gpt2", {"hidden_size": 1600, "num_attention_heads": 25, "num_hidden_layers": 48}),
    ("qwen3_moe", {"num_local_experts": 64}),
    ("granitemoehybrid", {"layers_block_type": ["mamba", "attention"], "num_hidden_layers": 2}),
])
def test_a_key_spelled_as_its_alias_is_read(model_type, alias_doc):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **alias_doc))
    expected = sum(parameter.numel() for parameter in model.parameters())
    assert count_parameters(import_hf_config({"model_type": model_type, **alias_doc})) == expected
