"""``python -m planner calibrate``: a run's events in, the profile (and cluster) to plan the next run with out.

The "run" is an independent simulation: the plan on a profile whose stages were slowed by hand and on a
cluster whose messages cost each end ``TRUE_OVERHEAD_US``, written as the executor writes events (one JSON
object per line, with the run's start and finish records), after a first step ten times slower that
``--warmup`` must leave out (with two steps, any mean or median that took it in would be the mean of both).
Calibrating must then reproduce the slowed profile and the overhead exactly.
"""

import json
from dataclasses import replace

import pytest

from planner.baselines import build_baseline
from planner.calibrate import with_message_overhead
from planner.cluster import load_cluster, load_cluster_preset
from planner.profile import load_profile
from planner.simulator import simulate

from sched_checks import decoder_profile
from test_cli import error_of, run_cli

DEVICES, MICROBATCHES, STEPS = 2, 6, 2
TRUE_OVERHEAD_US = 400.0
STAGE_FACTORS = (1.5, 2.5)   # how much slower each stage's layers ran than the profile says


def _scaled(profile, plan, factors):
    layers = list(profile.layers)
    for stage, factor in zip(plan.stages, factors):
        for index in stage.layers:
            layer = layers[index]
            layers[index] = replace(layer, forward=layer.forward * factor,
                                    backward_input=layer.backward_input * factor,
                                    backward_weight=layer.backward_weight * factor)
    return replace(profile, layers=tuple(layers))


def _action_events(result, step, offset_ms):
    return [{"type": "action", "rank": entry["device"], "device": entry["device"], "action": entry["action"],
             "stage": entry["stage"], "kind": entry["type"], "microbatch": entry["microbatch"], "step": step,
             "start_ms": entry["start_ms"] + offset_ms, "end_ms": entry["end_ms"] + offset_ms}
            for entry in result.timeline()]


@pytest.fixture
def recorded(tmp_path):
    cluster = load_cluster_preset("cpu-host")
    profile = decoder_profile(8, with_ends=True)
    plan = build_baseline("1f1b", profile, DEVICES, MICROBATCHES, cluster=cluster)
    real_cluster = with_message_overhead(cluster, TRUE_OVERHEAD_US)
    truth = simulate(plan, _scaled(profile, plan, STAGE_FACTORS), real_cluster)
    cold = simulate(plan, _scaled(profile, plan, [10 * factor for factor in STAGE_FACTORS]), real_cluster)
    events, offset = [{"type": "run_started", "world_size": DEVICES}], 0.0
    for step in range(STEPS):
        result = cold if step == 0 else truth
        events += _action_events(result, step, offset)
        offset += result.iteration_ms + 5.0
    events.append({"type": "run_finished", "summary": {}})
    files = {"plan": tmp_path / "plan.json", "profile": tmp_path / "profile.json", "events": tmp_path / "run.jsonl"}
    files["plan"].write_text(json.dumps(plan.to_dict()))
    files["profile"].write_text(json.dumps(profile.to_dict()))
    files["events"].write_text("".join(json.dumps(event) + "\n" for event in events))
    return files, plan, profile, truth, events, cold


def test_calibrating_from_a_run_recovers_its_compute_and_its_message_overhead(recorded, tmp_path):
    files, plan, profile, truth, *_ = recorded
    out, cluster_out = tmp_path / "calibrated.json", tmp_path / "cluster.json"
    result = run_cli("calibrate", files["plan"], "--profile", files["profile"], "--events", files["events"],
                     "--cluster", "cpu-host", "--out", out, "--cluster-out", cluster_out)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    calibrated = load_profile(json.loads(out.read_text()))
    expected = _scaled(profile, plan, STAGE_FACTORS)
    assert calibrated.source == "calibrated"
    for got, want in zip(calibrated.layers, expected.layers):
        for part in ("forward", "backward_input", "backward_weight"):
            assert getattr(got, part) == pytest.approx(getattr(want, part), rel=1e-9)
    cluster = load_cluster(json.loads(cluster_out.read_text()))
    assert cluster.intra_node.overhead_us == pytest.approx(TRUE_OVERHEAD_US, rel=1e-9)
    assert summary["message_overhead_us"] == pytest.approx(TRUE_OVERHEAD_US, rel=1e-9)
    assert summary["observed_iteration_ms"] == pytest.approx(truth.iteration_ms, rel=1e-12)
    assert summary["predicted_after_ms"] == pytest.approx(truth.iteration_ms, rel=1e-9)
    before = simulate(plan, profile, load_cluster_preset("cpu-host")).iteration_ms
    assert summary["predicted_before_ms"] == pytest.approx(before, rel=1e-12)


def test_the_executor_result_file_is_read_as_well_and_warmup_leaves_the_cold_step_out(recorded, tmp_path):
    files, plan, profile, truth, events, cold = recorded
    result_file = tmp_path / "result.json"
    result_file.write_text(json.dumps({"events": events, "summary": {}}))
    out = tmp_path / "calibrated.json"
    result = run_cli("calibrate", files["plan"], "--profile", files["profile"], "--events", result_file,
                     "--out", out)
    assert result.returncode == 0, result.stderr
    warm = json.loads(result.stdout)
    assert warm["observed_iteration_ms"] == pytest.approx(truth.iteration_ms, rel=1e-12)
    # counting the cold first step too, every median is the mean of the cold and the warm step
    result = run_cli("calibrate", files["plan"], "--profile", files["profile"], "--events", result_file,
                     "--warmup", "0", "--out", out)
    assert result.returncode == 0, result.stderr
    both = json.loads(result.stdout)
    assert both["observed_iteration_ms"] == pytest.approx((truth.iteration_ms + cold.iteration_ms) / 2, rel=1e-12)
    assert both["predicted_after_ms"] > 2 * warm["predicted_after_ms"]


def test_bad_events_name_the_option_and_the_reason(recorded, tmp_path):
    files, *_ = recorded
    common = ["calibrate", files["plan"], "--profile", files["profile"]]
    broken = tmp_path / "broken.jsonl"
    broken.write_text(files["events"].read_text().splitlines()[1] + "\n{not json\n")
    result = run_cli(*common, "--events", broken)
    assert result.returncode == 3 and error_of(result)["input"] == "--events"
    assert "line 2 is not a JSON event" in error_of(result)["reason"]

    result = run_cli(*common, "--events", tmp_path / "missing.jsonl")
    assert result.returncode == 3 and error_of(result)["input"] == "--events"
    assert error_of(result)["reason"].startswith(f"cannot read {tmp_path / 'missing.jsonl'}")

    alien = tmp_path / "alien.jsonl"
    alien.write_text(json.dumps({"type": "action", "action": "7F0", "step": 0, "start_ms": 0, "end_ms": 1}) + "\n")
    result = run_cli(*common, "--events", alien)
    assert result.returncode == 3 and error_of(result)["input"] == "--events"
    assert error_of(result)["field"] == "observed_events[0].action" and "stage 7" in error_of(result)["reason"]

    result = run_cli(*common, "--events", files["events"], "--warmup", "2")
    assert result.returncode == 3 and "after the first 2 step(s)" in error_of(result)["reason"]

    result = run_cli(*common, "--events", files["events"], "--cluster-out", tmp_path / "c.json")
    assert result.returncode == 2 and "--cluster-out needs --cluster" in result.stderr
