"""``python -m executor run`` (self-launched, under torchrun, verified against one process) and
``python -m executor profile``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from unittest.mock import patch

import pytest
import torch

from executor.cli import main
from executor.running.reference import compare_to_reference, reference_training
from test_launch import assert_run_order
from executor_plans import every_kind_spec, one_f_one_b
from planner.errors import SpecError
from planner.profile import load_profile

REPO_ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).with_name("torchrun")


@pytest.fixture
def tiny_llama_plan(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(one_f_one_b([[0, 1, 2], [3, 4, 5]], num_microbatches=2).to_dict()))
    return path


def test_run_prints_the_summary_and_writes_every_event(tiny_llama_plan, tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["run", str(tiny_llama_plan), "--model", "tiny-llama", "--steps", "2", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert len(printed["losses"]) == 2 and printed["summary"]["per_device"][1]["busy_ms"] > 0
    assert len(json.loads(out.read_text())["events"]) == 2 * 8


def test_under_torchrun_each_process_is_one_rank_and_rank_zero_reports(tiny_llama_plan, tmp_path):
    events = tmp_path / "events.jsonl"
    completed = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "executor", "run", str(tiny_llama_plan),
         "--model", "tiny-llama", "--events", str(events)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert json.loads(completed.stdout)["summary"]["iteration_ms"] > 0
    streamed = [json.loads(line) for line in events.read_text().splitlines()]
    assert [event["type"] for event in streamed].count("action") == 8
    assert_run_order(streamed)


def test_bad_plan_file_is_reported_with_its_field(tmp_path, capsys):
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    assert main(["run", str(bad), "--model", "tiny-llama"]) == 2
    assert "plan:" in capsys.readouterr().err


def test_verify_repeats_the_run_in_one_process_and_finds_it_equal(tmp_path, capsys):
    model = tmp_path / "model.json"
    model.write_text(json.dumps(every_kind_spec().to_dict()))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7]], num_microbatches=2).to_dict()))
    assert main(["run", str(plan), "--model", str(model), "--lr", "0.5", "--verify"]) == 0
    verdict = capsys.readouterr().out.splitlines()[-1]
    assert verdict.startswith("verified: largest difference ") and verdict.endswith(" tensors, losses match")
    assert int(verdict.split(" over ")[1].split()[0]) > 40


REFERENCE_SETTINGS = dict(num_microbatches=2, steps=1, seed=3, lr=0.5, optimizer="sgd")


def _save_reference_as_a_run_would(spec, directory):
    trained, _, _ = reference_training(spec, **REFERENCE_SETTINGS)
    for layer, state in trained.items():
        torch.save(state, directory / f"layer{layer:04d}.pt")
    return trained


def test_verification_names_the_tensor_a_run_got_wrong_and_by_how_much(tmp_path):
    spec = every_kind_spec()
    trained = _save_reference_as_a_run_would(spec, tmp_path)
    same = compare_to_reference(tmp_path, spec, data_parallel=1, dtype="fp64", **REFERENCE_SETTINGS)
    assert same.largest_difference == 0 and same.compared > 40
    assert same.loss_relative(same.losses, same.balancing_losses) == 0
    name = next(iter(trained[3]))
    trained[3][name].view(-1)[1] += 0.25
    torch.save(trained[3], tmp_path / "layer0003.pt")
    wrong = compare_to_reference(tmp_path, spec, data_parallel=1, dtype="fp64", **REFERENCE_SETTINGS)
    assert wrong.worst == f"layer 3 {name}" and wrong.largest_difference == pytest.approx(0.25, rel=1e-12)
    assert wrong.largest_relative > 1e-3 and wrong.compared == same.compared
    assert wrong.loss_relative([loss * 1.01 for loss in wrong.losses], wrong.balancing_losses) == pytest.approx(0.01)


def test_verification_refuses_a_run_that_saved_no_file_for_a_layer(tmp_path):
    spec = every_kind_spec()
    _save_reference_as_a_run_would(spec, tmp_path)
    (tmp_path / "layer0005.pt").unlink()
    with pytest.raises(SpecError, match="layer 5: the run saved no layer0005.pt"):
        compare_to_reference(tmp_path, spec, data_parallel=1, dtype="fp64", **REFERENCE_SETTINGS)


def test_profile_measures_every_layer_and_writes_a_loadable_profile(tmp_path):
    out = tmp_path / "profile.json"
    assert main(["profile", "--model", "tiny-llama", "--repeats", "2", "--warmup", "1", "--out", str(out)]) == 0
    profile = load_profile(json.loads(out.read_text()))
    assert profile.source == "measured" and profile.num_layers == 6
    embed, *decoders, head = profile.layers
    assert embed.backward_input == 0.0 and embed.backward_weight > 0
    hidden_bytes = 1 * 32 * 64 * 4   # micro-batch x seq x hidden, float32
    for layer in decoders:
        assert layer.forward > 0 and layer.backward_input > 0 and layer.backward_weight > 0
        assert layer.output_bytes == hidden_bytes
        assert layer.activation_bytes > hidden_bytes   # a block saves several hidden-sized tensors
    assert head.output_bytes == 4 and head.param_bytes == (512 * 64 + 64) * 4


def test_profile_with_a_full_backward_puts_each_layers_whole_backward_in_i(tmp_path):
    out = tmp_path / "profile.json"
    assert main(["profile", "--model", "tiny-llama", "--repeats", "2", "--warmup", "1", "--full-backward",
                 "--out", str(out)]) == 0
    _, *decoders, _ = load_profile(json.loads(out.read_text())).layers
    for layer in decoders:
        assert layer.backward_input > 0 and layer.backward_weight == 0.0


def test_profile_as_two_local_ranks_runs_two_profilers_at_once(tmp_path):
    out = tmp_path / "profile.json"
    assert main(["profile", "--model", "tiny-llama", "--repeats", "2", "--warmup", "1", "--ranks", "2",
                 "--out", str(out)]) == 0
    profile = load_profile(json.loads(out.read_text()))
    assert profile.num_layers == 6 and profile.device.endswith("2 processes at once")
    assert all(layer.forward > 0 for layer in profile.layers)


def test_profile_refuses_ranks_it_cannot_time(tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert main(["profile", "--model", "tiny-llama", "--ranks", "0", "--out", str(out)]) == 2
    assert "ranks: must be >= 1" in capsys.readouterr().err
    assert main(["profile", "--model", "tiny-llama", "--ranks", "2", "--dtype", "bf16", "--out", str(out)]) == 2
    assert "ranks: profiling several local ranks at once is for CPU ranks in float32" in capsys.readouterr().err
    assert not out.exists()


def test_profile_with_a_plan_scales_each_stage_to_the_times_of_its_actions(tiny_llama_plan, tmp_path):
    from statistics import fmean

    from planner.calibrate import stage_durations
    from planner.plan import load_plan

    plan = load_plan(json.loads(Path(tiny_llama_plan).read_text()))
    # cold and warm times distinct per stage and kind: the CLI must charge each action the one it will pay
    timings = {(stage, kind): (1.0 + stage + offset, 0.5 + stage + offset)
               for stage in range(plan.num_stages) for kind, offset in (("F", 0.0), ("B", 10.0))}
    out = tmp_path / "profile.json"
    with patch("executor.measuring.stage_timing.measure_stage_timings", return_value=timings) as measure:
        assert main(["profile", "--model", "tiny-llama", "--repeats", "1", "--warmup", "0", "--full-backward",
                     "--plan", str(tiny_llama_plan), "--out", str(out)]) == 0
    assert measure.call_args.args[0].to_dict() == plan.to_dict()
    profile = load_profile(json.loads(out.read_text()))
    durations = stage_durations(plan, timings)
    for index, stage in enumerate(plan.stages):
        layers = [profile.layers[layer] for layer in stage.layers]
        assert sum(layer.forward for layer in layers) == pytest.approx(fmean(durations[(index, "F")]))
        assert sum(layer.backward for layer in layers) == pytest.approx(fmean(durations[(index, "B")]))


def test_profile_refuses_a_plan_it_cannot_time(tiny_llama_plan, tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert main(["profile", "--model", "tiny-llama", "--dtype", "bf16", "--plan", str(tiny_llama_plan),
                 "--out", str(out)]) == 2
    assert "plan: timing a plan's stages is for CPU ranks in float32" in capsys.readouterr().err
    assert main(["profile", "--model", "tiny-hybrid", "--plan", str(tiny_llama_plan), "--out", str(out)]) == 2
    assert "stages: the stages cover layers 0..5 but the model has" in capsys.readouterr().err
    assert not out.exists()
