"""Plan.input_stage / output_stage: which neighbouring stage an action's boundary tensor comes from and goes to."""

import pytest

from planner.baselines import BASELINE_SCHEDULES, build_baseline
from planner.cluster import load_cluster_preset
from planner.plan import Action

from sched_checks import decoder_profile

PROFILE = decoder_profile(16, with_ends=True)


@pytest.mark.parametrize("schedule", BASELINE_SCHEDULES)
def test_every_consumed_tensor_comes_from_the_action_that_names_this_one_as_its_consumer(schedule):
    plan = build_baseline(schedule, PROFILE, 4, 8, cluster=load_cluster_preset("h100-sxm-1x8"))
    actions = {action for device_actions in plan.actions for action in device_actions}
    producers_seen = 0
    for action in actions:
        source = plan.input_stage(action)
        if source is None:
            continue
        producer_kinds = ("F",) if action.type == "F" else ("B", "I")
        producers = [Action(source, kind, action.microbatch) for kind in producer_kinds
                     if Action(source, kind, action.microbatch) in actions]
        assert len(producers) == 1, f"{action} consumes from stage {source}: producers {producers}"
        assert plan.output_stage(producers[0]) == action.stage
        producers_seen += 1
    # every F but the first stage's and every B/I but the last stage's consumes one tensor
    backwards = sum(1 for action in actions if action.type in ("B", "I"))
    assert producers_seen == 8 * (plan.num_stages - 1) + backwards - 8


def test_pipeline_ends_and_weight_gradients_have_no_neighbour():
    plan = build_baseline("zb-v", PROFILE, 2, 4, cluster=load_cluster_preset("h100-sxm-1x8"))
    last = plan.num_stages - 1
    assert plan.input_stage(Action(0, "F", 0)) is None and plan.output_stage(Action(last, "F", 0)) is None
    assert plan.input_stage(Action(last, "I", 0)) is None and plan.output_stage(Action(0, "I", 0)) is None
    assert plan.input_stage(Action(1, "W", 0)) is None and plan.output_stage(Action(1, "W", 0)) is None
    assert (plan.input_stage(Action(2, "F", 3)), plan.output_stage(Action(2, "F", 3))) == (1, 3)
    assert (plan.input_stage(Action(2, "I", 3)), plan.output_stage(Action(2, "I", 3))) == (3, 1)
