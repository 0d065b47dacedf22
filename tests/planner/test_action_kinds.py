"""The action vocabulary: its spellings, and that what each kind consumes, produces, holds and frees is what the
simulator and the memory model do with it."""

import json

import pytest

from planner.actions import ACTION_KINDS, ActionKind
from planner.errors import SpecError
from planner.memory import activation_curve, activation_peaks
from planner.plan import Action, Plan, Stage, load_plan
from planner.simulator.costs import stage_costs
from planner.simulator.program import compile_programs

from sim_schedules import uniform_profile


def actions(*texts):
    return [Action.parse(text) for text in texts]


def three_stages_one_split():
    """Stages 0, 1, 2 on devices 0, 1, 2; the middle one splits its backward into I and W."""
    return Plan(3, 1, [Stage((stage,), stage) for stage in range(3)],
                [actions("0F0", "0B0"), actions("1F0", "1I0", "1W0"), actions("2F0", "2B0")])


@pytest.mark.parametrize("text", ["F", "B", "I", "W"])
def test_each_letter_parses_to_its_kind_and_spells_itself(text):
    kind = ActionKind.parse(text)
    assert kind is ActionKind(text) and kind == text and f"{kind}" == text and json.dumps(kind) == f'"{text}"'


@pytest.mark.parametrize("text", ["", "FB", "f", "X", "forward", None, 0])
def test_any_other_spelling_is_rejected_naming_the_field(text):
    with pytest.raises(SpecError) as caught:
        ActionKind.parse(text, "events[3].kind")
    assert caught.value.field == "events[3].kind"
    assert caught.value.reason == f"must be one of F, B, I, W, got {text!r}"
    assert text not in ACTION_KINDS


def test_a_plan_document_round_trips_byte_for_byte():
    doc = three_stages_one_split().to_dict()
    loaded = load_plan(json.loads(json.dumps(doc)))
    assert json.dumps(loaded.to_dict()) == json.dumps(doc)
    assert all(type(action.type) is ActionKind for device_actions in loaded.actions for action in device_actions)


def test_each_kind_waits_in_the_simulator_on_what_the_table_says_it_consumes():
    plan = three_stages_one_split()
    programs = compile_programs(plan, costs=None)
    for device, device_actions in enumerate(plan.actions):
        for action, (_, _, dependency, _, other_dependency, _) in zip(device_actions, programs.devices[device]):
            waits = {programs.describe_slot(slot, plan) for slot in (dependency, other_dependency)
                     if slot != programs.always_done}
            expected = set()
            if action.type.needs_first is not None:
                expected.add(str(Action(action.stage, action.type.needs_first, action.microbatch)))
            offset = action.type.receives_from
            if offset is not None and 0 <= action.stage + offset < plan.num_stages:
                producer, = (other for other in plan.actions[action.stage + offset]
                             if other.type.boundary == action.type.boundary)
                expected.add(str(producer))
            assert waits == expected, action


def test_each_kind_runs_the_profile_parts_the_table_names():
    profile = uniform_profile(1, forward=1.0, backward_input=2.0, backward_weight=4.0)
    layer = profile.layers[0]
    plan = Plan(1, 2, [Stage((0,), 0)], [actions("0F0", "0F1", "0B0", "0I1", "0W1")])
    durations = [instruction[0] for instruction in compile_programs(plan, stage_costs(plan, profile)).devices[0]]
    assert durations == [sum(getattr(layer, part) for part in action.type.profile_parts)
                         for action in plan.actions[0]]
    assert durations == [1.0, 1.0, 6.0, 2.0, 4.0]


def test_activations_are_taken_and_freed_by_the_kinds_the_table_names():
    plan = Plan(1, 2, [Stage((0,), 0)], [actions("0F0", "0F1", "0B0", "0I1", "0W1")])
    starts, ends = [0.0, 1.0, 2.0, 3.0, 4.0], [0.5, 1.5, 2.5, 3.5, 4.5]
    curve = activation_curve(plan, [7], 0, starts, ends)
    held, expected = 0, [(0.0, 0)]
    for action, start, end in zip(plan.actions[0], starts, ends):
        if action.type.takes_activations:
            held += 7
            expected.append((start, held))
        elif action.type.frees_activations:
            held -= 7
            expected.append((end, held))
    assert curve == expected == [(0.0, 0), (0.0, 7), (1.0, 14), (2.5, 7), (4.5, 0)]
    assert activation_peaks(plan, [7]) == [14]

