"""validate_plan rejects each broken rule with the field and the reason, and reports deadlocks."""

import pytest

from planner.errors import PlanError, SpecError
from planner.plan import Action, Plan, Stage, load_plan
from planner.simulator import simulate
from planner.plan_check import validate_plan

from sim_schedules import one_f_one_b, uniform_profile


def plan_of(stages, actions, *, num_devices=2, num_microbatches=1):
    return Plan(num_devices, num_microbatches, [Stage(tuple(layers), device) for layers, device in stages],
                [[Action.parse(text) for text in device_actions] for device_actions in actions])


def two_stage(actions, num_microbatches=1):
    return plan_of([([0, 1], 0), ([2], 1)], actions, num_microbatches=num_microbatches)


def rejects(plan, num_layers, field, reason_part):
    with pytest.raises(PlanError) as caught:
        validate_plan(plan, num_layers)
    assert caught.value.field == field
    assert reason_part in caught.value.reason
    return caught.value


def test_a_valid_plan_passes():
    validate_plan(two_stage([["0F0", "0B0"], ["1F0", "1I0", "1W0"]]), 3)
    validate_plan(one_f_one_b(4, 8), 4)


def test_first_stage_must_start_at_layer_zero():
    plan = plan_of([([1, 2], 0)], [["0F0", "0B0"], []])
    rejects(plan, 3, "stages[0].layers", "must start at layer 0")


def test_stage_layers_must_be_consecutive():
    plan = plan_of([([0, 2], 0), ([3], 1)], [["0F0", "0B0"], ["1F0", "1B0"]])
    rejects(plan, 4, "stages[0].layers[1]", "consecutive")


def test_stages_must_follow_each_other_in_model_order():
    plan = plan_of([([0, 1], 0), ([3], 1)], [["0F0", "0B0"], ["1F0", "1B0"]])
    rejects(plan, 4, "stages[1].layers", "must start at layer 2")
    overlapping = plan_of([([0, 1], 0), ([1, 2], 1)], [["0F0", "0B0"], ["1F0", "1B0"]])
    rejects(overlapping, 3, "stages[1].layers", "must start at layer 2")


def test_stages_must_cover_every_layer():
    plan = two_stage([["0F0", "0B0"], ["1F0", "1B0"]])
    rejects(plan, 5, "stages", "the model has 5 layers")
    rejects(plan, 2, "stages", "the model has 2 layers")


def test_stage_device_must_exist():
    plan = plan_of([([0], 0), ([1], 2)], [["0F0", "0B0"], ["1F0", "1B0"]])
    rejects(plan, 2, "stages[1].device", "must be a device in 0..1")


def test_one_action_list_per_device():
    plan = two_stage([["0F0", "0B0"]])
    rejects(plan, 3, "actions", "one action list per device")


def test_action_stage_must_exist():
    plan = two_stage([["0F0", "0B0"], ["1F0", "1B0", "2F0"]])
    rejects(plan, 3, "actions[1][2]", "stage 2 does not exist")


def test_action_microbatch_must_exist():
    plan = two_stage([["0F0", "0B0", "0F1"], ["1F0", "1B0"]])
    rejects(plan, 3, "actions[0][2]", "micro-batch 1 does not exist")


def test_action_must_sit_on_the_device_that_owns_its_stage():
    plan = two_stage([["0F0", "0B0", "1F0"], ["1B0"]])
    rejects(plan, 3, "actions[0][2]", "stage 1 runs on device 1, not on device 0")


def test_an_action_of_an_unknown_type_cannot_be_built():
    with pytest.raises(SpecError, match=r"^type: must be one of F, B, I, W, got 'X'$"):
        Action(1, "X", 0)


def test_duplicate_action_names_both_positions():
    plan = two_stage([["0F0", "0B0"], ["1F0", "1B0", "1F0"]])
    rejects(plan, 3, "actions[1][2]", "appears twice (first at actions[1][0])")


def test_every_forward_must_be_scheduled():
    plan = two_stage([["0F0", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]], num_microbatches=2)
    rejects(plan, 3, "actions", "missing: 0F1")


def test_every_backward_must_be_scheduled():
    plan = two_stage([["0F0"], ["1F0", "1B0"]])
    rejects(plan, 3, "actions", "missing: 0B0 (or 0I0 + 0W0)")


def test_split_backward_needs_both_halves():
    rejects(two_stage([["0F0", "0B0"], ["1F0", "1I0"]]), 3, "actions", "missing: 1W0")
    rejects(two_stage([["0F0", "0B0"], ["1F0", "1W0"]]), 3, "actions", "missing: 1I0")


def test_full_and_split_backward_cannot_mix_for_one_microbatch():
    plan = two_stage([["0F0", "0B0"], ["1F0", "1B0", "1I0", "1W0"]])
    rejects(plan, 3, "actions", "both a full backward")


def test_zero_microbatches_and_zero_devices_are_rejected():
    rejects(Plan(1, 0, [Stage((0,), 0)], [[]]), 1, "num_microbatches", ">= 1")
    rejects(Plan(0, 1, [Stage((0,), 0)], []), 1, "num_devices", ">= 1")


def test_an_action_before_its_own_dependency_deadlocks_and_names_it():
    plan = two_stage([["0F0", "0B0"], ["1B0", "1F0"]])
    error = rejects(plan, 3, "actions", "dependency deadlock")
    assert {"device": 1, "position": 0, "action": "1B0", "waits_for": "1F0"} in error.blocked
    assert {"device": 0, "position": 1, "action": "0B0", "waits_for": "1B0"} in error.blocked


def test_a_cross_device_cycle_reports_every_blocked_device():
    # Device 1 wants micro-batch 1 first; device 0 cannot send it before micro-batch 0 comes back.
    plan = two_stage([["0F0", "0B0", "0F1", "0B1"], ["1F1", "1B1", "1F0", "1B0"]], num_microbatches=2)
    error = rejects(plan, 3, "actions", "7 action(s) can never run")
    assert error.blocked == [
        {"device": 0, "position": 1, "action": "0B0", "waits_for": "1B0"},
        {"device": 1, "position": 0, "action": "1F1", "waits_for": "0F1"},
    ]
    assert "device 1: 1F1 waits for 0F1" in str(error)


def test_weight_gradient_before_its_input_gradient_deadlocks():
    plan = two_stage([["0F0", "0B0"], ["1F0", "1W0", "1I0"]])
    error = rejects(plan, 3, "actions", "dependency deadlock")
    assert {"device": 1, "position": 1, "action": "1W0", "waits_for": "1I0"} in error.blocked


def test_simulate_raises_the_same_deadlock():
    plan = two_stage([["0F0", "0B0"], ["1B0", "1F0"]])
    with pytest.raises(PlanError) as caught:
        simulate(plan, uniform_profile(3))
    assert caught.value.blocked[0]["action"] in {"0B0", "1B0"}
    assert caught.value.to_dict()["field"] == "actions"


def test_validates_a_plan_loaded_from_json():
    doc = {"format": "adaptis.plan/v1", "num_devices": 2, "num_microbatches": 1,
           "stages": [{"layers": [0], "device": 0}, {"layers": [1], "device": 1}],
           "actions": [["0F0", "0B0"], ["1F0", "1I0", "1W0"]]}
    validate_plan(load_plan(doc), 2)
