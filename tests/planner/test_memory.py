"""Memory accounting: 18 bytes per parameter of model state plus the activations in flight."""

import random

import pytest

from planner.memory import (
    GRADIENT_BYTES_PER_PARAM_BYTE,
    MODEL_STATE_BYTES_PER_PARAM_BYTE,
    OPTIMIZER_BYTES_PER_PARAM_BYTE,
    activation_curve,
    device_memory,
    layer_activation_bytes,
    peak_memory_bytes,
    stage_activation_bytes,
)
from planner.plan import Action, Plan, Stage
from planner.simulator import simulate

from sim_schedules import gpipe, interleaved_1f1b, one_f_one_b, random_profile, random_valid_plan, uniform_profile

ACTIVATION = 1_000


def held_at_forward_starts(result, profile, device):
    """Independent count from the timeline: activations whose F started and whose release has not ended."""
    plan = result.plan
    taken, released = {}, {}
    for action, (start, end) in zip(plan.actions[device], result.action_times(device)):
        key = (action.stage, action.microbatch)
        if action.type == "F":
            taken[key] = start
        elif action.type in "BW":
            released[key] = end
    stage_bytes = stage_activation_bytes(plan, layer_activation_bytes(profile))
    peak = 0
    for moment in taken.values():
        held = sum(stage_bytes[stage] for (stage, mb), start in taken.items()
                   if start <= moment < released[(stage, mb)])
        peak = max(peak, held)
    return peak


def test_model_state_is_18_bytes_per_parameter():
    # param_bytes are bf16 (2 bytes/parameter): 2 + 4 (fp32 grads) + 12 (Adam fp32 master, m, v) = 18.
    assert 2 * MODEL_STATE_BYTES_PER_PARAM_BYTE == 18
    assert 2 * GRADIENT_BYTES_PER_PARAM_BYTE == 4 and 2 * OPTIMIZER_BYTES_PER_PARAM_BYTE == 12
    memory = device_memory(one_f_one_b(2, 1), uniform_profile(2, param_bytes=2_000, activation_bytes=0))
    assert [m.model_state_bytes for m in memory] == [18_000, 18_000]
    assert memory[0].gradient_bytes == 4_000 and memory[0].optimizer_bytes == 12_000


@pytest.mark.parametrize("p, m", [(4, 8), (4, 2), (6, 12)])
def test_1f1b_device_d_holds_p_minus_d_microbatches(p, m):
    plan = one_f_one_b(p, m)
    profile = uniform_profile(p, activation_bytes=ACTIVATION, param_bytes=0)
    result = simulate(plan, profile)
    for d in range(p):
        expected = min(p - d, m) * ACTIVATION
        assert result.per_device[d].memory.activation_peak_bytes == expected
        assert held_at_forward_starts(result, profile, d) == expected


@pytest.mark.parametrize("p, m", [(3, 5), (4, 8)])
def test_gpipe_holds_every_microbatch(p, m):
    profile = uniform_profile(p, activation_bytes=ACTIVATION, param_bytes=0)
    result = simulate(gpipe(p, m), profile)
    assert [s.memory.activation_peak_bytes for s in result.per_device] == [m * ACTIVATION] * p
    assert all(held_at_forward_starts(result, profile, d) == m * ACTIVATION for d in range(p))


def test_split_backward_holds_activations_until_the_weight_gradient():
    stages = [Stage((0,), 0)]
    deferred = Plan(1, 2, stages, [[Action.parse(a) for a in ["0F0", "0I0", "0F1", "0I1", "0W0", "0W1"]]])
    eager = Plan(1, 2, stages, [[Action.parse(a) for a in ["0F0", "0I0", "0W0", "0F1", "0I1", "0W1"]]])
    profile = uniform_profile(1, activation_bytes=ACTIVATION, param_bytes=0)
    assert peak_memory_bytes(deferred, profile) == [2 * ACTIVATION]
    assert peak_memory_bytes(eager, profile) == [ACTIVATION]


def test_interleaved_sums_both_chunks_on_a_device():
    p, m, v = 4, 8, 2
    plan = interleaved_1f1b(p, m, v)
    profile = uniform_profile(p * v, activation_bytes=ACTIVATION, param_bytes=100)
    result = simulate(plan, profile)
    for d in range(p):
        assert result.per_device[d].memory.param_bytes == v * 100
        assert result.per_device[d].memory.activation_peak_bytes == held_at_forward_starts(result, profile, d)


@pytest.mark.parametrize("seed", range(20))
def test_order_scan_matches_the_timeline_count_on_random_plans(seed):
    rng = random.Random(seed)
    plan, num_layers = random_valid_plan(rng)
    profile = random_profile(rng, num_layers)
    result = simulate(plan, profile)
    for d in range(plan.num_devices):
        assert result.per_device[d].memory.activation_peak_bytes == held_at_forward_starts(result, profile, d)


def test_activation_curve_peaks_at_the_scanned_peak_and_ends_empty():
    plan = one_f_one_b(4, 8)
    profile = uniform_profile(4, activation_bytes=ACTIVATION)
    result = simulate(plan, profile)
    times = result.action_times(1)
    curve = activation_curve(plan, stage_activation_bytes(plan, layer_activation_bytes(profile)), 1,
                             [start for start, _ in times], [end for _, end in times])
    assert max(held for _, held in curve) == result.per_device[1].memory.activation_peak_bytes
    assert curve[-1][1] == 0
    assert all(a[0] <= b[0] for a, b in zip(curve, curve[1:]))
