"""build_baseline: complete, valid, simulated plans for every schedule x partition."""

import pytest

from planner.baselines import BASELINE_SCHEDULES, PARTITIONS, build_baseline
from planner.cluster import load_cluster_preset
from planner.errors import SpecError
from planner.plan import load_plan
from planner.simulator import simulate

from sched_checks import check_complete, decoder_profile, replay

PROFILE = decoder_profile(16, with_ends=True)


@pytest.mark.parametrize("schedule", BASELINE_SCHEDULES)
@pytest.mark.parametrize("partition", PARTITIONS)
def test_baseline_is_a_complete_plan_whose_prediction_is_the_simulators(schedule, partition):
    cluster = load_cluster_preset("h100-sxm-1x8")
    plan = build_baseline(schedule, PROFILE, 4, 8, cluster=cluster, partition=partition)
    assert plan.strategy == schedule and plan.num_devices == 4 and plan.num_microbatches == 8
    assert [index for stage in plan.stages for index in stage.layers] == list(range(PROFILE.num_layers))
    check_complete(plan.actions, [stage.device for stage in plan.stages], 8)
    replay(plan.actions, plan.num_stages)
    expected = simulate(plan, PROFILE, cluster).to_dict(include_timeline=False)
    assert plan.predicted == expected
    assert "timeline" not in plan.predicted
    assert plan.meta["partition"] == partition and plan.meta["cluster"] == cluster.name


def test_baseline_meta_records_chunks_placement_and_layout():
    plan = build_baseline("interleaved-1f1b", PROFILE, 4, 8, chunks=2)
    assert plan.meta["chunks"] == 2 and plan.meta["placement"] == "loop"
    assert plan.meta["layout"] == "E,t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2,L"
    zbv = build_baseline("zb-v", PROFILE, 4, 8, chunks=3)
    assert zbv.meta["chunks"] == 2 and zbv.meta["placement"] == "v-shape"
    assert [stage.device for stage in zbv.stages] == [0, 1, 2, 3, 3, 2, 1, 0]


def test_baseline_plan_round_trips_through_json():
    plan = build_baseline("zb-h1", PROFILE, 4, 8)
    again = load_plan(plan.to_dict())
    assert again.actions == plan.actions and again.stages == plan.stages and again.predicted == plan.predicted


def test_uniform_baseline_puts_embedding_first_and_head_last():
    plan = build_baseline("1f1b", PROFILE, 4, 8)
    assert plan.stages[0].layers[0] == 0 and plan.stages[-1].layers[-1] == PROFILE.num_layers - 1
    assert [len(stage.layers) for stage in plan.stages] == [5, 4, 4, 5]


def test_transfers_slow_the_prediction_down_with_a_cluster():
    slow = load_cluster_preset("h100-sxm-2x8")
    without = build_baseline("1f1b", PROFILE, 4, 8)
    with_cluster = build_baseline("1f1b", PROFILE, 4, 8, cluster=slow)
    assert with_cluster.predicted["iteration_ms"] > without.predicted["iteration_ms"]


@pytest.mark.parametrize("kwargs, field", [
    (dict(schedule="dualpipe"), "schedule"),
    (dict(partition="greedy"), "partition"),
    (dict(num_devices=9, cluster="h100-sxm-1x8"), "num_devices"),
    (dict(num_devices=0), "num_devices"),
    (dict(num_microbatches=0), "num_microbatches"),
    (dict(schedule="interleaved-1f1b", chunks=1), "chunks"),
    (dict(schedule="interleaved-1f1b", num_microbatches=9), "num_microbatches"),
    (dict(num_devices=8, schedule="interleaved-1f1b", chunks=3, num_microbatches=16), "num_stages"),
])
def test_bad_requests_name_the_field(kwargs, field):
    arguments = dict(schedule="1f1b", num_devices=4, num_microbatches=8, cluster=None, partition="uniform")
    arguments.update(kwargs)
    if isinstance(arguments["cluster"], str):
        arguments["cluster"] = load_cluster_preset(arguments["cluster"])
    with pytest.raises(SpecError) as error:
        build_baseline(arguments.pop("schedule"), PROFILE, arguments.pop("num_devices"),
                       arguments.pop("num_microbatches"), **arguments)
    assert error.value.field == field
