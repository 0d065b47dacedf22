"""stage_durations: each action charged its stage's cold or warm time by what runs before it on its device;
recalibrate_durations: the profile scaled to them."""

import pytest

from planner.baselines import build_baseline
from planner.calibrate import recalibrate_durations, stage_durations
from planner.errors import SpecError
from planner.plan import Action, Plan, Stage
from tests.planner.search_profiles import hybrid_profile, small_cluster


def _timings(plan):
    """Distinct (cold, warm) per (stage, type): cold = 100 * stage + code, warm = cold + 0.5."""
    codes = {"F": 1.0, "B": 2.0, "I": 3.0, "W": 4.0}
    return {(stage, kind): (100.0 * stage + code, 100.0 * stage + code + 0.5)
            for stage in range(plan.num_stages) for kind, code in codes.items()}


def test_an_action_after_one_of_its_own_type_is_warm_and_every_other_one_cold():
    # one device, written out by hand: 0F0 0F1 1F0 1F1 1B0 1B1 0I0 0I1 0W0 0W1
    plan = Plan(1, 2, [Stage((0,), 0), Stage((1,), 0)],
                [[Action(0, "F", 0), Action(0, "F", 1), Action(1, "F", 0), Action(1, "F", 1), Action(1, "B", 0),
                  Action(1, "B", 1), Action(0, "I", 0), Action(0, "I", 1), Action(0, "W", 0), Action(0, "W", 1)]])
    timings = _timings(plan)
    durations = stage_durations(plan, timings)
    assert durations == {
        (0, "F"): [1.0, 1.5],            # the device's first action is cold, the next F warm
        (1, "F"): [101.5, 101.5],        # F after F, even of another stage
        (1, "B"): [102.0, 102.5],        # the first B follows an F
        (0, "I"): [3.0, 3.5],
        (0, "W"): [4.0, 4.5],
    }


def test_a_message_between_two_actions_of_one_type_makes_the_second_cold():
    # a V: stages 0 and 3 on device 0, stages 1 and 2 on device 1 (written out by hand)
    plan = Plan(2, 2, [Stage((0,), 0), Stage((1,), 1), Stage((2,), 1), Stage((3,), 0)],
                [[Action(0, "F", 0), Action(0, "F", 1), Action(3, "F", 0), Action(3, "F", 1)],
                 [Action(1, "F", 0), Action(2, "F", 0), Action(1, "F", 1), Action(2, "F", 1)]])
    durations = stage_durations(plan, _timings(plan))
    assert durations[(0, "F")] == [1.0, 1.0]        # 0F0 sent its activation to device 1 before 0F1
    assert durations[(3, "F")] == [301.0, 301.0]    # each receives from device 1
    assert durations[(1, "F")] == [101.0, 101.0]    # the first action; then 2F0 sent to device 0
    assert durations[(2, "F")] == [201.5, 201.5]    # handed over on the device: no message in between


def test_one_f_one_b_on_several_devices_is_cold_throughout():
    plan = build_baseline("1f1b", hybrid_profile(), 4, 8, cluster=small_cluster())
    timings = _timings(plan)
    durations = stage_durations(plan, timings)
    assert all(values == [timings[key][0]] * len(values) for key, values in durations.items())


def test_a_missing_timing_is_named():
    plan = build_baseline("gpipe", hybrid_profile(), 2, 2, cluster=small_cluster())
    timings = _timings(plan)
    del timings[(1, "B")]
    with pytest.raises(SpecError) as error:
        stage_durations(plan, timings)
    assert error.value.field == "timings" and "stage 1's B" in str(error.value)


def test_the_profile_is_scaled_to_the_mean_duration_of_each_stage_and_type():
    profile = hybrid_profile()
    plan = build_baseline("1f1b", profile, 2, 4, cluster=small_cluster())
    durations = {(0, "F"): [2.0, 4.0], (0, "B"): [9.0], (1, "F"): [1.0], (1, "B"): [5.0, 7.0]}
    scaled = recalibrate_durations(profile, plan, durations)
    for (stage, kind), values in durations.items():
        layers = [scaled.layers[index] for index in plan.stages[stage].layers]
        total = sum(layer.forward if kind == "F" else layer.backward_input + layer.backward_weight
                    for layer in layers)
        assert total == pytest.approx(sum(values) / len(values))
