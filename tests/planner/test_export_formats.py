"""torch CSV (loaded back by torch itself), Megatron layout strings and plan JSON."""

import json
import re
from unittest import mock

import pytest

from planner.baselines import build_baseline
from planner.errors import SpecError
from planner.exports import EXPORT_FORMATS, export_plan, megatron_layout, torch_csv
from planner.plan import load_plan

from sched_checks import decoder_profile, layer, make_profile

PROFILE = decoder_profile(16, with_ends=True)


# ---- torch CSV -----------------------------------------------------------------------------------------

def _torch_load(schedule_class, path, num_devices, stages_per_rank, num_microbatches):
    from torch.distributed.pipelining.stage import PipelineStage
    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.submod = 0, num_devices, None
    stage.num_stages = num_devices * stages_per_rank
    schedule = schedule_class([stage] * stages_per_rank, num_microbatches)
    schedule._load_csv(str(path))   # compute-only: torch validates, infers stage→rank, lowers comms
    return schedule


@pytest.mark.parametrize("schedule_name, class_name, stages_per_rank", [
    ("interleaved-1f1b", "ScheduleInterleaved1F1B", 2),
    ("zb-v", "ScheduleZBVZeroBubble", 2),
    ("zb-h1", "ScheduleInterleavedZeroBubble", 1),
    ("1f1b", "ScheduleInterleavedZeroBubble", 1),
])
def test_torch_loads_our_csv_into_the_same_order(tmp_path, schedule_name, class_name, stages_per_rank):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    plan = build_baseline(schedule_name, PROFILE, 4, 8, partition="time-balanced")
    path = tmp_path / "schedule.csv"
    path.write_text(torch_csv(plan))
    loaded = _torch_load(getattr(schedules, class_name), path, 4, stages_per_rank, 8)
    for device in range(4):
        assert [str(a) for a in loaded.pipeline_order[device]] == [str(a) for a in plan.actions[device]]
        assert loaded.pipeline_order_with_comms[device], "torch lowered the schedule with its comms"
    expected_map = {index: stage.device for index, stage in enumerate(plan.stages)}
    assert loaded.stage_index_to_group_rank == expected_map


def test_torch_csv_has_one_row_per_rank():
    plan = build_baseline("1f1b", PROFILE, 4, 8)
    rows = torch_csv(plan).splitlines()
    assert len(rows) == 4 and rows[3].split(",")[:2] == ["3F0", "3B0"]


# ---- Megatron layout ------------------------------------------------------------------------------------

def megatron_parse(layout):
    """Megatron-LM's ``PipelineParallelLayerLayout.parse_str_to_list``, restated: commas are cosmetic,
    ``(...)*n`` then ``x*n`` unroll, ``|`` separates virtual stages."""
    layout = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        layout = re.sub(pattern, lambda match: match.group(1) * int(match.group(2)), layout)
    assert set(layout) <= set("ELtm|")
    return [list(stage) for stage in layout.split("|")]


def test_megatron_reference_parser_reads_megatrons_own_example():
    assert megatron_parse("Ettt|(tt|)*29,m|L") == [list("Ettt")] + [list("tt")] * 29 + [["m"], ["L"]]


@pytest.mark.parametrize("schedule, devices, chunks, partition", [
    ("1f1b", 4, 2, "uniform"), ("interleaved-1f1b", 4, 2, "uniform"), ("interleaved-1f1b", 2, 4, "uniform"),
    ("gpipe", 8, 2, "time-balanced"), ("zb-h1", 4, 2, "param-balanced"), ("1f1b", 1, 2, "uniform"),
])
def test_megatron_layout_parses_back_to_the_plans_stages(schedule, devices, chunks, partition):
    plan = build_baseline(schedule, PROFILE, devices, 8, chunks=chunks, partition=partition)
    layout = megatron_layout(plan, PROFILE)
    letters = {"embedding": "E", "decoder": "t", "head": "L"}
    expected = [[letters[PROFILE.layers[i].kind] for i in stage.layers] for stage in plan.stages]
    assert megatron_parse(layout) == expected
    assert len(expected) % devices == 0   # Megatron's check: PP x VPP virtual stages


def test_megatron_layout_folds_repeated_stages():
    plan = build_baseline("1f1b", PROFILE, 4, 8)
    assert megatron_layout(plan, PROFILE) == "E,t*4|(t*4|)*2,t*4,L"


def test_megatron_layout_refuses_a_v_shape_placement():
    plan = build_baseline("zb-v", PROFILE, 4, 8)
    with pytest.raises(SpecError) as error:
        megatron_layout(plan, PROFILE)
    assert error.value.field == "stages" and "rank k mod p" in error.value.reason


def test_megatron_layout_needs_embedding_first_and_head_last():
    no_ends = decoder_profile(8)
    plan = build_baseline("1f1b", no_ends, 2, 4)
    with pytest.raises(SpecError) as error:
        megatron_layout(plan, no_ends)
    assert error.value.field == "layers[0].kind"


def test_megatron_layout_refuses_layer_kinds_it_has_no_letter_for():
    profile = make_profile([layer("embed", "embedding"), layer("vision", "vision_encoder"),
                            layer("layers.0", "decoder"), layer("head", "head")])
    plan = build_baseline("1f1b", profile, 2, 2, partition="time-balanced")
    with pytest.raises(SpecError) as error:
        megatron_layout(plan, profile)
    assert error.value.field == "layers[1].kind"


# ---- plan JSON and dispatch -----------------------------------------------------------------------------

def test_plan_json_round_trips():
    plan = build_baseline("zb-v", PROFILE, 2, 4)
    again = load_plan(json.loads(export_plan("plan-json", plan, PROFILE)))
    assert again.to_dict() == plan.to_dict()


def test_export_plan_rejects_unknown_formats_naming_the_field():
    plan = build_baseline("1f1b", PROFILE, 2, 4)
    assert "megatron-layout" in EXPORT_FORMATS
    with pytest.raises(SpecError) as error:
        export_plan("onnx", plan, PROFILE)
    assert error.value.field == "to"
