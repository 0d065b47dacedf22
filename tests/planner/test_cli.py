"""``python -m planner`` as users run it: subprocesses, JSON on stdout, exit codes, errors naming the field."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.baselines import build_baseline
from planner.cluster import load_cluster_preset
from planner.cost import analytic_profile
from planner.plan import load_plan
from planner.profile import load_profile
from planner.simulator import simulate
from planner.spec.presets import load_model_preset

from sched_checks import decoder_profile

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "planner", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or REPO_ROOT, timeout=60)


def error_of(result):
    return json.loads(result.stderr)["error"]


@pytest.fixture
def profile_file(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(decoder_profile(8, with_ends=True).to_dict()))
    return path


@pytest.fixture
def plan_file(tmp_path, profile_file):
    path = tmp_path / "plan.json"
    result = run_cli("baseline", "--schedule", "1f1b", "--profile", profile_file, "--devices", 4,
                     "--microbatches", 8, "--out", path)
    assert result.returncode == 0, result.stderr
    return path


@pytest.mark.parametrize("command", [[], ["simulate"], ["baseline"], ["export"], ["profile"], ["presets"]])
def test_every_command_has_help(command):
    result = run_cli(*command, "--help")
    assert result.returncode == 0 and "usage:" in result.stdout


def test_baseline_writes_a_plan_and_reports_its_prediction(plan_file, profile_file):
    plan = load_plan(json.loads(plan_file.read_text()))
    assert plan.strategy == "1f1b" and plan.num_stages == 4
    expected = simulate(plan, load_profile(json.loads(profile_file.read_text())))
    assert plan.predicted["iteration_ms"] == pytest.approx(expected.iteration_ms)


def test_baseline_to_stdout_with_every_option(profile_file):
    result = run_cli("baseline", "--schedule", "interleaved-1f1b", "--profile", profile_file, "--devices", 2,
                     "--microbatches", 4, "--cluster", "h100-sxm-1x8", "--partition", "time-balanced",
                     "--chunks", 2)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["meta"]["partition"] == "time-balanced" and len(doc["stages"]) == 4
    assert doc["meta"]["cluster"] == load_cluster_preset("h100-sxm-1x8").name


def test_simulate_prints_metrics_and_the_timeline_on_request(plan_file, profile_file):
    result = run_cli("simulate", plan_file, "--profile", profile_file)
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout)
    assert {"iteration_ms", "bubble_ratio", "per_device"} <= metrics.keys() and "timeline" not in metrics
    expected = simulate(load_plan(json.loads(plan_file.read_text())), load_profile(json.loads(profile_file.read_text())))
    assert metrics["bubble_ratio"] == pytest.approx(expected.bubble_ratio)
    assert metrics["iteration_ms"] == pytest.approx(expected.iteration_ms)
    timed = json.loads(run_cli("simulate", plan_file, "--profile", profile_file, "--timeline").stdout)
    assert len(timed["timeline"]) == 4 * 8 * 2


def test_simulate_with_a_cluster_costs_transfers(plan_file, profile_file):
    free = json.loads(run_cli("simulate", plan_file, "--profile", profile_file).stdout)
    costly = json.loads(run_cli("simulate", plan_file, "--profile", profile_file, "--cluster", "h100-sxm-2x8").stdout)
    assert costly["iteration_ms"] > free["iteration_ms"]


def test_profile_presets_and_a_preset_name_as_profile(tmp_path):
    out = tmp_path / "p.json"
    result = run_cli("profile", "--model", "tiny-llama", "--cluster", "cpu-host", "--out", out)
    assert result.returncode == 0, result.stderr
    expected = analytic_profile(load_model_preset("tiny-llama"), load_cluster_preset("cpu-host"))
    assert load_profile(json.loads(out.read_text())) == expected
    presets = json.loads(run_cli("presets").stdout)
    assert "tiny-llama" in presets["models"] and "h100-sxm-1x8" in presets["clusters"]
    by_name = run_cli("baseline", "--schedule", "zb-v", "--profile", "tiny-llama", "--cluster", "cpu-host",
                      "--devices", 2, "--microbatches", 4)
    assert by_name.returncode == 0, by_name.stderr
    assert json.loads(by_name.stdout)["meta"]["profile"] == "tiny-llama"


def test_profile_accepts_a_model_file(tmp_path):
    spec = tmp_path / "model.yaml"
    spec.write_text("format: adaptis.model/v1\nname: mini\nhidden_size: 64\nvocab_size: 512\nseq_len: 32\n"
                    "layers:\n  - {kind: embedding}\n  - kind: decoder\n    repeat: 2\n"
                    "    mixer: {type: attention, num_heads: 4, num_kv_heads: 2, head_dim: 16}\n"
                    "    mlp: {type: dense, intermediate_size: 128, gated: true}\n  - {kind: head}\n")
    result = run_cli("profile", "--model", spec, "--cluster", "cpu-host")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["layers"]) == 4


@pytest.mark.parametrize("fmt", ["torch-csv", "megatron-layout", "plan-json", "perfetto"])
def test_export_writes_each_format(tmp_path, plan_file, profile_file, fmt):
    out = tmp_path / "export.out"
    result = run_cli("export", plan_file, "--to", fmt, "--profile", profile_file, "--out", out)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["out"] == str(out)
    text = out.read_text()
    if fmt == "torch-csv":
        assert len(list(csv.reader(text.splitlines()))) == 4
    elif fmt == "megatron-layout":
        assert text.strip() == "E,t*2|(t*2|)*2,t*2,L"
    else:
        json.loads(text)


def test_export_without_a_profile_where_one_is_needed_is_a_usage_error(plan_file):
    result = run_cli("export", plan_file, "--to", "perfetto")
    assert result.returncode == 2 and "--profile" in result.stderr


def test_usage_errors_exit_2():
    assert run_cli().returncode == 2
    assert run_cli("baseline", "--schedule", "pipedream", "--profile", "x", "--devices", 2,
                   "--microbatches", 2).returncode == 2
    assert run_cli("baseline", "--schedule", "1f1b", "--profile", "x", "--devices", "two",
                   "--microbatches", 2).returncode == 2


@pytest.mark.parametrize("args, field, option", [
    (["baseline", "--schedule", "1f1b", "--profile", "no-such-model", "--devices", 2, "--microbatches", 2],
     "profile", "--profile"),
    (["baseline", "--schedule", "1f1b", "--profile", "tiny-llama", "--devices", 0, "--microbatches", 2],
     "num_devices", None),
    (["baseline", "--schedule", "1f1b", "--profile", "tiny-llama", "--cluster", "cpu-host", "--devices", 2,
      "--microbatches", 2, "--cluster", "moon-base"], "cluster", "--cluster"),
    (["baseline", "--schedule", "1f1b", "--profile", "gemma-2-9b", "--cluster", "h100-sxm-1x8", "--devices", 9,
      "--microbatches", 2], "num_devices", None),
    (["profile", "--model", "gpt-7", "--cluster", "cpu-host"], "model", "--model"),
])
def test_invalid_input_exits_3_naming_the_field(args, field, option):
    result = run_cli(*args)
    assert result.returncode == 3, result.stderr
    error = error_of(result)
    assert error["field"] == field and error["reason"]
    assert error.get("input") == option


def test_a_bad_profile_file_names_the_field_inside_it(tmp_path, profile_file):
    doc = json.loads(profile_file.read_text())
    doc["layers"][2]["forward"] = -1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    result = run_cli("baseline", "--schedule", "1f1b", "--profile", bad, "--devices", 2, "--microbatches", 2)
    assert result.returncode == 3
    assert error_of(result) == {"field": "layers[2].forward", "reason": "must be >= 0.0, got -1",
                                "input": "--profile"}


def test_unparsable_plan_file_exits_3(tmp_path, profile_file):
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    result = run_cli("simulate", bad, "--profile", profile_file)
    assert result.returncode == 3 and error_of(result)["input"] == "plan"


def test_a_deadlocked_plan_exits_4_listing_blocked_actions(tmp_path, profile_file, plan_file):
    doc = json.loads(plan_file.read_text())
    doc["actions"][1] = list(reversed(doc["actions"][1]))   # backwards before their forwards
    bad = tmp_path / "deadlock.json"
    bad.write_text(json.dumps(doc))
    result = run_cli("simulate", bad, "--profile", profile_file)
    assert result.returncode == 4
    error = error_of(result)
    assert error["reason"] and error["blocked"]


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved-1f1b"])
def test_megatron_export_of_a_mamba_hybrid_preset_applies_megatrons_hybrid_rules(tmp_path, schedule):
    plan, out = tmp_path / "plan.json", tmp_path / "layout.txt"
    assert run_cli("baseline", "--schedule", schedule, "--profile", "tiny-hybrid", "--devices", 2,
                   "--microbatches", 4, "--out", plan).returncode == 0
    result = run_cli("export", plan, "--to", "megatron-layout", "--profile", "tiny-hybrid", "--out", out)
    if schedule == "1f1b":  # no virtual stages: written, after the note that Megatron ignores it
        assert result.returncode == 0 and out.read_text().startswith("# Megatron-LM's hybrid (Mamba) models ignore")
    else:
        assert result.returncode == 3 and error_of(result)["field"] == "format"
        assert "refuse a --pipeline-model-parallel-layout with virtual stages" in error_of(result)["reason"]


def test_megatron_export_of_a_v_shape_exits_3(tmp_path, profile_file):
    plan = build_baseline("zb-v", decoder_profile(8, with_ends=True), 2, 4)
    path = tmp_path / "zbv.json"
    path.write_text(json.dumps(plan.to_dict()))
    result = run_cli("export", path, "--to", "megatron-layout", "--profile", profile_file)
    assert result.returncode == 3 and error_of(result)["field"] == "stages"
