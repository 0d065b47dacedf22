"""The lower bound: its three parts computed by hand, and no simulated plan beats it."""

import random

import pytest

from planner.bounds import lower_bound_ms
from planner.errors import SpecError
from planner.plan import Action, Plan
from planner.profile import LayerProfile, Profile
from planner.simulator import simulate

from sim_schedules import one_f_one_b, random_profile, random_valid_plan


def profile_of(*costs):
    return Profile("m", "d", tuple(LayerProfile(f"l{i}", "decoder", f, bi, bw, 0, 0, 0)
                                   for i, (f, bi, bw) in enumerate(costs)))


def test_parts_by_hand():
    profile = profile_of((1.0, 1.0, 1.0), (2.0, 3.0, 1.0), (0.5, 0.5, 0.5))
    bound = lower_bound_ms(profile, num_devices=2, num_microbatches=4)
    assert bound["work_per_device_ms"] == pytest.approx((3 + 6 + 1.5) * 4 / 2)
    assert bound["heaviest_layer_ms"] == pytest.approx(6 * 4)
    assert bound["microbatch_chain_ms"] == pytest.approx(3.5 + 4.5 + 1.0)
    assert bound["lower_bound_ms"] == pytest.approx(24.0)


def test_one_microbatch_chain_dominates_with_few_microbatches():
    profile = profile_of(*[(1.0, 1.0, 1.0)] * 8)
    bound = lower_bound_ms(profile, num_devices=8, num_microbatches=1)
    assert bound["lower_bound_ms"] == bound["microbatch_chain_ms"] == pytest.approx(8 + 8 + 1)


@pytest.mark.parametrize("seed", range(40))
def test_no_random_plan_beats_the_bound(seed):
    rng = random.Random(seed)
    plan, num_layers = random_valid_plan(rng)
    profile = random_profile(rng, num_layers)
    bound = lower_bound_ms(profile, plan.num_devices, plan.num_microbatches)
    assert simulate(plan, profile).iteration_ms >= bound["lower_bound_ms"] - 1e-9


def test_the_chain_bound_is_reached_by_a_split_backward_pipeline():
    profile = profile_of(*[(1.0, 1.0, 1.0)] * 4)
    plan = one_f_one_b(4, 1, split=True)
    assert simulate(plan, profile).iteration_ms == pytest.approx(lower_bound_ms(profile, 4, 1)["lower_bound_ms"])


def test_the_heaviest_layer_bound_is_reached_when_one_layer_dominates():
    profile = profile_of((10.0, 10.0, 10.0))
    plan = Plan(1, 3, [one_f_one_b(1, 3).stages[0]], [[Action(0, t, m) for m in range(3) for t in "FB"]])
    assert simulate(plan, profile).iteration_ms == pytest.approx(lower_bound_ms(profile, 1, 3)["lower_bound_ms"])


def test_rejects_nonpositive_counts():
    with pytest.raises(SpecError) as caught:
        lower_bound_ms(profile_of((1, 1, 1)), 0, 1)
    assert caught.value.field == "num_devices"
