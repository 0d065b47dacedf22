"""Stage timings: each stage of a plan timed as its rank runs it, right after another kind of work and right
after the same kind."""

from __future__ import annotations

from unittest.mock import patch

from executor.model import linear
from executor.model.linear import weight_grad_deferral
from executor.measuring.stage_timing import measure_stage_timings, time_device_stages
from planner.baselines import build_baseline
from planner.calibrate import recalibrate_durations, stage_durations
from planner.cluster import load_cluster_preset
from planner.cost import analytic_profile
from planner.spec.presets import load_model_preset

SPEC = load_model_preset("tiny-llama")
PROFILE = analytic_profile(SPEC, load_cluster_preset("cpu-host"))


def _kinds_on(plan, device):
    return {(action.stage, action.type) for action in plan.actions[device]}


def test_every_stage_and_kind_a_device_runs_is_timed_and_its_micro_batches_drained():
    plan = build_baseline("zb-v", PROFILE, 2, 4, cluster=load_cluster_preset("cpu-host"))
    timings = time_device_stages(plan, SPEC, 1, repeats=2, warmup=1)
    assert set(timings) == _kinds_on(plan, 1) == {(1, "F"), (1, "I"), (1, "W"), (2, "F"), (2, "I"), (2, "W")}
    assert all(cold > 0 and warm > 0 for cold, warm in timings.values())


def test_the_ranks_deferral_setting_is_used_and_the_callers_restored():
    plan = build_baseline("1f1b", PROFILE, 2, 4, cluster=load_cluster_preset("cpu-host"))
    seen = []
    with weight_grad_deferral(True):
        with patch("executor.measuring.stage_timing.weight_grad_deferral",
                   side_effect=lambda enabled: seen.append(enabled) or weight_grad_deferral(enabled)):
            timings = time_device_stages(plan, SPEC, 0, repeats=2, warmup=0)
        assert linear._deferral_enabled is True
    assert seen == [False] and set(timings) == {(0, "F"), (0, "B")}


def test_two_devices_are_timed_at_once_and_give_a_profile_for_the_plan():
    plan = build_baseline("1f1b", PROFILE, 2, 4, cluster=load_cluster_preset("cpu-host"))
    timings = measure_stage_timings(plan, SPEC, repeats=2, warmup=1, timeout_s=240)
    assert set(timings) == _kinds_on(plan, 0) | _kinds_on(plan, 1)
    scaled = recalibrate_durations(PROFILE, plan, stage_durations(plan, timings))
    for stage_index, stage in enumerate(plan.stages):
        cold, warm = timings[(stage_index, "F")]
        # each layer is scaled separately, so the stage's sum may land a rounding step outside [min, max]
        rounding = 1e-9 * max(cold, warm)
        stage_forward = sum(scaled.layers[index].forward for index in stage.layers)
        assert min(cold, warm) - rounding <= stage_forward <= max(cold, warm) + rounding
