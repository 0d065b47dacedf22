"""The human form of a plan: a Megatron-style layout string that parses back to the same partition."""

import random

import pytest

from planner.errors import SpecError
from planner.layout import (
    compress,
    layer_codes_from_profile,
    parse_layout_string,
    placement_kind,
    plan_layout_string,
    schedule_description,
)
from planner.plan import Plan, Stage
from planner.profile import LayerProfile, Profile

from sim_schedules import gpipe, interleaved_1f1b, one_f_one_b, random_valid_plan


def plan_with(stage_sizes, devices, num_devices):
    stages, start = [], 0
    for size, device in zip(stage_sizes, devices):
        stages.append(Stage(tuple(range(start, start + size)), device))
        start += size
    return Plan(num_devices, 1, stages, [[] for _ in range(num_devices)])


def test_megatron_style_layout_for_a_plain_pipeline():
    codes = ["E"] + ["t"] * 14 + ["L"]
    plan = plan_with([4, 4, 4, 4], [0, 1, 2, 3], 4)
    assert plan_layout_string(plan, codes) == "E,t*3|t*4|t*4|t*3,L"


def test_devices_are_printed_only_where_they_leave_the_round_robin():
    codes = ["t"] * 8
    interleaved = plan_with([1] * 8, [0, 1, 2, 3, 0, 1, 2, 3], 4)
    v_shape = plan_with([1] * 8, [0, 1, 2, 3, 3, 2, 1, 0], 4)
    assert plan_layout_string(interleaved, codes) == "t|t|t|t|t|t|t|t"
    assert plan_layout_string(v_shape, codes) == "t|t|t|t|t@3|t@2|t@1|t@0"


def test_repeated_patterns_fold():
    assert compress(["m", "d", "m", "d", "m", "d", "t"]) == "(m,d)*3,t"
    assert compress(["d", "t", "t", "t", "d", "t", "t", "t"]) == "(d,t*3)*2"
    assert compress(["E"]) == "E"


def test_parser_expands_repeats_and_devices():
    layout, layer_codes = parse_layout_string("E,(m,d)*2|t*2,L@0", num_devices=2)
    assert layer_codes == ["E", "m", "d", "m", "d", "t", "t", "L"]
    assert layout.stages() == [Stage((0, 1, 2, 3, 4), 0), Stage((5, 6, 7), 0)]


@pytest.mark.parametrize("seed", range(25))
def test_layout_round_trips_random_partitions_and_placements(seed):
    rng = random.Random(seed)
    plan, num_layers = random_valid_plan(rng, max_layers=30)
    codes = [rng.choice(["t", "m", "d", "te", "s"]) for _ in range(num_layers)]
    text = plan_layout_string(plan, codes)
    layout, layer_codes = parse_layout_string(text, num_devices=plan.num_devices)
    assert layout.stages() == plan.stages
    assert layer_codes == codes


@pytest.mark.parametrize("text, reason", [
    ("", "is empty"),
    ("t|", "expected a layer code or '('"),
    ("t*", "expected a number"),
    ("(t,d", "expected ')'"),
    ("t#", "unexpected character '#'"),
    ("t*0", "repeat count must be >= 1"),
    ("t|t@5", "placed on device 5"),
])
def test_parser_names_the_problem(text, reason):
    with pytest.raises(SpecError) as caught:
        parse_layout_string(text, num_devices=2)
    assert caught.value.field == "layout"
    assert reason in caught.value.reason


def test_layer_codes_need_one_code_per_layer():
    with pytest.raises(SpecError) as caught:
        plan_layout_string(plan_with([2, 2], [0, 1], 2), ["t"] * 3)
    assert caught.value.field == "layer_codes"


def test_profile_kinds_give_codes():
    layers = tuple(LayerProfile(name, kind, 1, 1, 1, 0, 0, 0) for name, kind in
                   [("embed", "embedding"), ("a", "decoder"), ("b", "mlp"), ("head", "head")])
    assert layer_codes_from_profile(Profile("m", "d", layers)) == ["E", "t", "d", "L"]


def test_placement_kinds():
    assert placement_kind(one_f_one_b(4, 4)) == "sequential"
    assert placement_kind(interleaved_1f1b(4, 4, 2)) == "interleaved"
    assert placement_kind(plan_with([1] * 4, [0, 1, 1, 0], 2)) == "v-shape"
    assert placement_kind(plan_with([1] * 3, [1, 0, 1], 2)) == "custom"


def test_schedule_description_shows_the_1f1b_and_gpipe_shapes():
    description = schedule_description(one_f_one_b(4, 8))
    assert description.startswith("4 stages on 4 devices (sequential), 8 micro-batches, full backward")
    assert "d0: F*4,(B,F)*4,B*4" in description
    assert "d3: (F,B)*8" in description
    assert "d1: F*8,B*8" in schedule_description(gpipe(2, 8))
    assert "split backward" in schedule_description(one_f_one_b(2, 2, split=True))
