"""Loading model descriptions from text and files: our format in JSON or YAML, HF configs, and parse errors."""

import json
from pathlib import Path

import pytest
import yaml

from planner.errors import SpecError
from planner.spec.files import load_model_file, parse_model_text, parse_model_document
from planner.spec.presets import load_model_preset

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def tiny_doc() -> dict:
    return load_model_preset("tiny-llama").to_dict()


def test_our_format_as_json_round_trips_to_the_same_spec():
    spec = parse_model_text(json.dumps(tiny_doc()), "model.json")
    assert spec == load_model_preset("tiny-llama")


def test_our_format_as_yaml_gives_the_same_spec_as_json():
    text = yaml.safe_dump(tiny_doc(), sort_keys=False)
    assert parse_model_text(text, "model.yaml") == parse_model_text(json.dumps(tiny_doc()), "model.json")


def test_yaml_without_a_telling_file_name_is_recognised():
    assert parse_model_text(yaml.safe_dump(tiny_doc())).name == "tiny-llama"


def test_hf_config_is_detected_and_imported():
    text = (FIXTURES / "llama-3-8b.json").read_text()
    spec = parse_model_text(text, "config.json")
    assert spec.num_layers == 34 and spec.vocab_size == 128256
    assert "llama" in spec.source


def test_invalid_json_names_the_line_and_column():
    with pytest.raises(SpecError) as error:
        parse_model_text('{\n  "format": "adaptis.model/v1",\n  "name": oops\n}', "model.json")
    assert error.value.field == "file"
    assert "line 3, column 11" in error.value.reason


def test_invalid_yaml_names_the_line_and_column():
    with pytest.raises(SpecError) as error:
        parse_model_text("format: adaptis.model/v1\nlayers:\n  - kind: [embedding\n", "model.yml")
    assert error.value.field == "file"
    assert "line 4, column 1" in error.value.reason


@pytest.mark.parametrize("text, reason", [
    ("", "is empty"),
    ("   \n", "is empty"),
    ("[1, 2]", "must hold an object"),
    ("just a string", "must hold an object"),
])
def test_documents_that_are_not_objects_are_rejected(text, reason):
    with pytest.raises(SpecError) as error:
        parse_model_text(text)
    assert error.value.field == "file" and reason in error.value.reason


def test_object_without_format_or_model_type_asks_for_the_format():
    with pytest.raises(SpecError) as error:
        parse_model_text('{"name": "x", "hidden_size": 8}', "model.json")
    assert error.value.field == "format"


def test_field_errors_inside_our_format_keep_their_path():
    doc = tiny_doc()
    doc["layers"][1]["mixer"]["num_kv_heads"] = 3
    with pytest.raises(SpecError) as error:
        parse_model_text(json.dumps(doc), "model.json")
    assert error.value.field == "layers[1].mixer.num_kv_heads"


def test_load_model_file_reads_json_and_yaml(tmp_path):
    json_path = tmp_path / "m.json"
    json_path.write_text(json.dumps(tiny_doc()))
    yaml_path = tmp_path / "m.yaml"
    yaml_path.write_text(yaml.safe_dump(tiny_doc()))
    assert load_model_file(json_path) == load_model_file(yaml_path) == load_model_preset("tiny-llama")


def test_an_hf_config_is_named_after_its_model_else_its_file_never_its_model_type():
    named = json.loads((FIXTURES / "phi-3.5-moe.json").read_text())          # _name_or_path: Phi-3.5-MoE-instruct
    assert parse_model_text(json.dumps(named), "config.json").name == "Phi-3.5-MoE-instruct"
    anonymous = json.loads((FIXTURES / "qwen3-8b.json").read_text())          # no _name_or_path
    assert parse_model_text(json.dumps(anonymous), "Qwen3-8B.json").name == "Qwen3-8B"
    local = json.loads((FIXTURES / "falcon-mamba-7b.json").read_text())       # _name_or_path: "./"
    assert parse_model_text(json.dumps(local), "falcon-mamba-7b.json").name == "falcon-mamba-7b"


def test_load_model_file_reads_an_hf_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text((FIXTURES / "mixtral-8x7b.json").read_text())
    assert load_model_file(path).layers[1].mlp.num_experts == 8


def test_missing_file_is_a_file_error(tmp_path):
    with pytest.raises(SpecError) as error:
        load_model_file(tmp_path / "nope.json")
    assert error.value.field == "file" and "not found" in error.value.reason


def test_binary_file_is_a_file_error(tmp_path):
    path = tmp_path / "weights.json"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(SpecError) as error:
        load_model_file(path)
    assert error.value.field == "file" and "UTF-8" in error.value.reason


def test_a_misspelt_hf_key_is_reported_with_the_key_it_means_and_the_default_taken_instead():
    from transformers import LlamaConfig

    config = json.loads((FIXTURES / "llama-3-8b.json").read_text())
    config.pop("num_hidden_layers", None)
    config["num_hiden_layers"] = 80
    spec, warnings = parse_model_document(json.dumps(config), "config.json")
    assert [(warning.field, "'num_hidden_layers'" in warning.reason) for warning in warnings] == \
        [("num_hiden_layers", True)]
    # What was built is what transformers builds from the same file: its default depth, not the 80 meant.
    assert spec.num_layers == LlamaConfig(**config).num_hidden_layers + 2


def test_the_real_hf_configs_give_no_warning():
    for path in sorted(FIXTURES.glob("*.json")):
        assert parse_model_document(path.read_text(), path.name)[1] == [], path.name


def test_an_unknown_field_of_our_format_is_refused_with_the_field_it_likely_means():
    doc = tiny_doc()
    doc["hiden_size"] = doc.pop("hidden_size")
    with pytest.raises(SpecError) as refused:
        parse_model_text(json.dumps(doc), "model.json")
    assert refused.value.field == "hiden_size" and "did you mean 'hidden_size'?" in refused.value.reason
