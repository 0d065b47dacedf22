"""The simulator agrees with two independent computations on random plans, costs and links.

1. A longest path over the dependency DAG (device-order edges plus data edges with transfer time),
   evaluated by memoised recursion straight from the profile and the cluster.
2. A brute-force clock: integer durations, advance time one millisecond at a time, and start any idle
   device's next action once all its inputs have arrived.
"""

import math
import random
import sys

import pytest

from planner.cluster import ClusterSpec, DeviceType, Link
from planner.plan import Action
from planner.simulator import simulate
from planner.plan_check import validate_plan

from sim_schedules import random_profile, random_valid_plan

# 1 byte per millisecond and whole-millisecond latencies keep every transfer an integer number of ms.
CLUSTER = ClusterSpec("2x2", nodes=2, devices_per_node=2, device=DeviceType("t", 10**12, 10.0, 0.5, 100.0),
                      intra_node=Link(bandwidth_gb_s=1e-6, latency_us=1000.0),
                      inter_node=Link(bandwidth_gb_s=0.5e-6, latency_us=2000.0))


def action_duration(profile, plan, action):
    layers = [profile.layers[index] for index in plan.stages[action.stage].layers]
    parts = {"F": ("forward",), "B": ("backward_input", "backward_weight"), "I": ("backward_input",),
             "W": ("backward_weight",)}[action.type]
    return sum(getattr(layer, part) for layer in layers for part in parts)


def data_inputs(plan, profile, cluster, action):
    """(producer action, transfer ms) pairs this action waits on."""
    s, m = action.stage, action.microbatch
    planned = {a for device_actions in plan.actions for a in device_actions}

    def transfer(src_stage, dst_stage, boundary_stage):
        if cluster is None:
            return 0.0
        nbytes = profile.layers[plan.stages[boundary_stage].layers[-1]].output_bytes
        return cluster.transfer_ms(plan.stages[src_stage].device, plan.stages[dst_stage].device, nbytes)

    if action.type == "F":
        return [(Action(s - 1, "F", m), transfer(s - 1, s, s - 1))] if s > 0 else []
    if action.type == "W":
        return [(Action(s, "I", m), 0.0)]
    inputs = [(Action(s, "F", m), 0.0)]
    if s < plan.num_stages - 1:
        upstream = Action(s + 1, "I", m) if Action(s + 1, "I", m) in planned else Action(s + 1, "B", m)
        inputs.append((upstream, transfer(s + 1, s, s)))
    return inputs


def longest_path_finish_times(plan, profile, cluster):
    previous = {}
    for device_actions in plan.actions:
        for before, after in zip(device_actions, device_actions[1:]):
            previous[after] = before
    finish = {}

    def finish_of(action):
        if action not in finish:
            start = finish_of(previous[action]) if action in previous else 0.0
            for producer, lag in data_inputs(plan, profile, cluster, action):
                start = max(start, finish_of(producer) + lag)
            finish[action] = start + action_duration(profile, plan, action)
        return finish[action]

    return {action: finish_of(action) for device_actions in plan.actions for action in device_actions}


def clock_finish_times(plan, profile, cluster):
    finish, next_index, busy_until = {}, [0] * plan.num_devices, [0] * plan.num_devices
    lags = {}
    for device_actions in plan.actions:
        for action in device_actions:
            lags[action] = [(producer, round(lag))
                            for producer, lag in data_inputs(plan, profile, cluster, action)]
    remaining, now = plan.num_actions(), 0
    while remaining:
        for device, device_actions in enumerate(plan.actions):
            if busy_until[device] > now or next_index[device] >= len(device_actions):
                continue
            action = device_actions[next_index[device]]
            if all(producer in finish and finish[producer] + lag <= now for producer, lag in lags[action]):
                finish[action] = now + round(action_duration(profile, plan, action))
                busy_until[device] = finish[action]
                next_index[device] += 1
                remaining -= 1
        now += 1
        assert now < 100_000, "the clock simulation found no way forward"
    return finish


def simulated_finish_times(result):
    finish = {}
    for device, device_actions in enumerate(result.plan.actions):
        for action, (_, end) in zip(device_actions, result.action_times(device)):
            finish[action] = end
    return finish


@pytest.mark.parametrize("seed", range(60))
def test_simulator_matches_longest_path_on_random_plans(seed):
    rng = random.Random(seed)
    plan, num_layers = random_valid_plan(rng)
    profile = random_profile(rng, num_layers)
    cluster = CLUSTER if seed % 3 else None
    validate_plan(plan, num_layers)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    expected = longest_path_finish_times(plan, profile, cluster)
    result = simulate(plan, profile, cluster)
    observed = simulated_finish_times(result)
    assert observed == pytest.approx(expected)
    assert result.iteration_ms == pytest.approx(max(expected.values()))


@pytest.mark.parametrize("seed", range(40))
def test_simulator_matches_a_millisecond_clock_on_random_plans(seed):
    rng = random.Random(1000 + seed)
    plan, num_layers = random_valid_plan(rng, max_microbatches=4)
    profile = random_profile(rng, num_layers, integer_times=True)
    expected = clock_finish_times(plan, profile, CLUSTER)
    assert simulated_finish_times(simulate(plan, profile, CLUSTER)) == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(30))
def test_device_accounting_adds_up_on_random_plans(seed):
    rng = random.Random(5000 + seed)
    plan, num_layers = random_valid_plan(rng)
    profile = random_profile(rng, num_layers)
    result = simulate(plan, profile, CLUSTER)
    finish = longest_path_finish_times(plan, profile, CLUSTER)
    for device, stats in enumerate(result.per_device):
        durations = [action_duration(profile, plan, action) for action in plan.actions[device]]
        time = stats.time
        assert time.busy_ms == pytest.approx(sum(durations))
        assert time.bubble_ms == pytest.approx(result.iteration_ms - sum(durations))
        for phase in (time.warmup_bubble_ms, time.steady_bubble_ms, time.cooldown_bubble_ms):
            assert phase >= -1e-9
        incoming = sum(lag for action in plan.actions[device]
                       for _, lag in data_inputs(plan, profile, CLUSTER, action))
        assert time.exposed_comm_ms + time.overlapped_comm_ms == pytest.approx(incoming)
        # Exposed communication is idle time: it never exceeds the device's bubble.
        assert time.exposed_comm_ms <= time.bubble_ms + 1e-9
        # Warm-up: idle time before the first backward-type action starts (recomputed from finishes).
        backward_positions = [i for i, a in enumerate(plan.actions[device]) if a.type != "F"]
        if backward_positions:
            first = backward_positions[0]
            first_start = finish[plan.actions[device][first]] - durations[first]
            assert time.warmup_bubble_ms == pytest.approx(first_start - sum(durations[:first]))
        else:
            assert time.warmup_bubble_ms == pytest.approx(result.iteration_ms)
    assert not math.isnan(result.bubble_ratio)


# The same links, plus a per-message overhead on each end (LogP's o) on the devices' own streams.
CLUSTER_WITH_OVERHEAD = ClusterSpec(
    "2x2+o", nodes=2, devices_per_node=2, device=DeviceType("t", 10**12, 10.0, 0.5, 100.0),
    intra_node=Link(bandwidth_gb_s=1e-6, latency_us=1000.0, overhead_us=300.0),
    inter_node=Link(bandwidth_gb_s=0.5e-6, latency_us=2000.0, overhead_us=700.0))


def message_handling(plan, cluster, action):
    """(before, after) ms the action's device spends receiving its inputs and sending its output, written
    from the message flow: F receives from stage s-1 and sends to s+1; B/I receives from s+1, sends to s-1."""
    s = action.stage

    def cost(other):
        if not 0 <= other < plan.num_stages or plan.stages[other].device == plan.stages[s].device:
            return 0.0
        return cluster.link(plan.stages[s].device, plan.stages[other].device).overhead_us / 1000

    if action.type == "W":
        return 0.0, 0.0
    if action.type == "F":
        return cost(s - 1), cost(s + 1)
    return cost(s + 1), cost(s - 1)


def longest_path_with_overhead(plan, profile, cluster):
    """Compute-end times when each action holds its device for receive handling + compute + send handling."""
    previous = {}
    for device_actions in plan.actions:
        for before, after in zip(device_actions, device_actions[1:]):
            previous[after] = before
    released = {}

    def released_at(action):           # when the action lets go of its device (its messages are posted)
        if action not in released:
            start = released_at(previous[action]) if action in previous else 0.0
            for producer, lag in data_inputs(plan, profile, cluster, action):
                start = max(start, released_at(producer) + lag)
            before, after = message_handling(plan, cluster, action)
            released[action] = start + before + action_duration(profile, plan, action) + after
        return released[action]

    return {action: released_at(action) - message_handling(plan, cluster, action)[1]
            for device_actions in plan.actions for action in device_actions}


@pytest.mark.parametrize("seed", range(40))
def test_message_overhead_matches_longest_path_on_random_plans(seed):
    rng = random.Random(9000 + seed)
    plan, num_layers = random_valid_plan(rng)
    profile = random_profile(rng, num_layers)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    expected = longest_path_with_overhead(plan, profile, CLUSTER_WITH_OVERHEAD)
    result = simulate(plan, profile, CLUSTER_WITH_OVERHEAD)
    assert simulated_finish_times(result) == pytest.approx(expected)
    released = max(end + message_handling(plan, CLUSTER_WITH_OVERHEAD, action)[1]
                   for action, end in expected.items())
    assert result.iteration_ms == pytest.approx(released)
    for device, stats in enumerate(result.per_device):
        durations = [action_duration(profile, plan, action) for action in plan.actions[device]]
        handling = sum(sum(message_handling(plan, CLUSTER_WITH_OVERHEAD, action)) for action in plan.actions[device])
        # busy is compute only; message handling is part of the bubble, reported on its own as well
        assert stats.time.busy_ms == pytest.approx(sum(durations))
        assert stats.time.bubble_ms == pytest.approx(result.iteration_ms - sum(durations))
        assert stats.time.message_ms == pytest.approx(handling)
        assert stats.time.message_ms <= stats.time.bubble_ms + 1e-9
