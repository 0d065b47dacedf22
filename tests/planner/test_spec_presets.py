"""Model presets: the realistic ones equal the importer's output for their HF fixtures; the tiny ones are small."""

from pathlib import Path

import pytest

from planner.errors import SpecError
from planner.spec.build_presets import HF_PRESET_REPOS, build_hf_preset, write_hf_presets
from planner.spec.model import AttentionMixer, LinearAttentionMixer, Mamba2Mixer, MoEMLP, load_model_spec
from planner.spec.presets import MODEL_PRESET_DIR, load_model_preset, model_preset_names

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
REQUIRED = {"llama-3-8b", "gemma-2-9b", "gemma-3-27b", "deepseek-v2-lite", "deepseek-v3", "nemotron-h-8b",
            "qwen3-next-80b-a3b", "minimax-text-01", "mixtral-8x7b", "tiny-llama", "tiny-hybrid"}


def test_every_required_preset_is_shipped():
    assert REQUIRED <= set(model_preset_names())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_each_preset_loads_and_round_trips(name):
    spec = load_model_preset(name)
    assert spec.name == name and spec.source
    assert load_model_spec(spec.to_dict()) == spec


@pytest.mark.parametrize("name", sorted(HF_PRESET_REPOS))
def test_realistic_preset_equals_the_import_of_its_hf_fixture(name):
    assert load_model_preset(name) == build_hf_preset(name, FIXTURES)
    assert HF_PRESET_REPOS[name] in load_model_preset(name).source


def test_regenerating_the_presets_writes_the_shipped_files(tmp_path):
    written = write_hf_presets(FIXTURES, tmp_path)
    assert {path.stem for path in written} == set(HF_PRESET_REPOS)
    for path in written:
        assert path.read_text() == (MODEL_PRESET_DIR / path.name).read_text()


def test_tiny_llama_is_embedding_four_attention_decoders_and_head():
    spec = load_model_preset("tiny-llama")
    assert [layer.kind for layer in spec.layers] == ["embedding"] + ["decoder"] * 4 + ["head"]
    assert (spec.hidden_size, spec.vocab_size, spec.seq_len) == (64, 512, 32)
    assert all(isinstance(layer.mixer, AttentionMixer) for layer in spec.layers[1:-1])


def test_tiny_hybrid_uses_every_layer_kind():
    spec = load_model_preset("tiny-hybrid")
    assert (spec.hidden_size, spec.vocab_size, spec.seq_len) == (64, 2048, 32)
    mixers = [layer.mixer for layer in spec.layers if layer.mixer is not None]
    mlps = [layer.mlp for layer in spec.layers if layer.mlp is not None]
    assert any(isinstance(m, AttentionMixer) and m.window is None and m.num_kv_heads < m.num_heads for m in mixers)
    assert any(isinstance(m, AttentionMixer) and m.window is not None for m in mixers)
    assert {m.variant for m in mixers if isinstance(m, LinearAttentionMixer)} == {"gated_delta", "lightning"}
    assert any(isinstance(m, Mamba2Mixer) for m in mixers)
    assert any(isinstance(m, MoEMLP) and m.num_shared_experts for m in mlps)
    assert any(layer.kind == "mlp" for layer in spec.layers)
    assert any(layer.kind == "decoder" and layer.mlp is None for layer in spec.layers)


def test_unknown_preset_is_a_preset_error_listing_the_known_ones():
    with pytest.raises(SpecError) as error:
        load_model_preset("gpt-5")
    assert error.value.field == "preset" and "tiny-llama" in error.value.reason


def test_preset_names_cannot_reach_outside_the_preset_folder():
    with pytest.raises(SpecError) as error:
        load_model_preset("../clusters/cpu-host")
    assert error.value.field == "preset"
