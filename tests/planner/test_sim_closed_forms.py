"""The simulator reproduces the textbook pipeline bubbles when every stage costs the same."""

import pytest

from planner.cluster import ClusterSpec, DeviceType, Link
from planner.simulator import simulate
from planner.plan_check import validate_plan

from sim_schedules import gpipe, interleaved_1f1b, one_f_one_b, uniform_profile


@pytest.mark.parametrize("p, m", [(2, 1), (4, 4), (4, 8), (8, 32), (5, 3)])
@pytest.mark.parametrize("f, b", [(1.0, 2.0), (1.5, 1.5)])
def test_1f1b_bubble_matches_closed_form(p, m, f, b):
    profile = uniform_profile(p, forward=f, backward_input=b / 2, backward_weight=b / 2)
    plan = one_f_one_b(p, m)
    validate_plan(plan, p)
    result = simulate(plan, profile)
    assert result.iteration_ms == pytest.approx((m + p - 1) * (f + b))
    assert result.bubble_ratio == pytest.approx((p - 1) / (m + p - 1))


@pytest.mark.parametrize("p, m", [(2, 2), (4, 8), (8, 16)])
def test_gpipe_takes_as_long_as_1f1b(p, m):
    profile = uniform_profile(p, forward=1.0, backward_input=1.2, backward_weight=0.8)
    one_f_one_b_ms = simulate(one_f_one_b(p, m), profile).iteration_ms
    assert simulate(gpipe(p, m), profile).iteration_ms == pytest.approx(one_f_one_b_ms)


@pytest.mark.parametrize("p, m, v", [(2, 2, 2), (4, 4, 2), (4, 8, 2), (4, 8, 3), (8, 16, 2), (8, 32, 4)])
def test_interleaved_bubble_matches_closed_form(p, m, v):
    # v chunks per device, each a 1/v share of the per-device work (f = 1, b = 2 per device).
    profile = uniform_profile(p * v, forward=1.0 / v, backward_input=1.0 / v, backward_weight=1.0 / v)
    plan = interleaved_1f1b(p, m, v)
    validate_plan(plan, p * v)
    result = simulate(plan, profile)
    assert result.bubble_ratio == pytest.approx((p - 1) / (v * m + p - 1))
    assert result.iteration_ms == pytest.approx((v * m + p - 1) * 3.0 / v)


@pytest.mark.parametrize("p, m", [(3, 4), (4, 6)])
def test_gpipe_bubble_phases_per_device(p, m):
    f, b = 1.0, 2.0
    result = simulate(gpipe(p, m), uniform_profile(p, forward=f, backward_input=1.5, backward_weight=0.5))
    for d, stats in enumerate(result.per_device):
        # Device d waits d forwards to start, then (p-1-d) F+B round trips for the first gradient,
        # and finishes d backwards before the last device 0 backward ends.
        assert stats.time.warmup_bubble_ms == pytest.approx(d * f + (p - 1 - d) * (f + b))
        assert stats.time.steady_bubble_ms == pytest.approx(0.0)
        assert stats.time.cooldown_bubble_ms == pytest.approx(d * b)
        assert stats.time.bubble_ms == pytest.approx((p - 1) * (f + b))


@pytest.mark.parametrize("p", [1, 3, 6])
def test_split_backward_hands_the_gradient_on_before_the_weight_gradient(p):
    f, bi, bw = 1.0, 1.3, 0.7
    profile = uniform_profile(p, forward=f, backward_input=bi, backward_weight=bw)
    # One micro-batch: with B the chain pays every W; with I then W only stage 0's W is on it.
    assert simulate(one_f_one_b(p, 1), profile).iteration_ms == pytest.approx(p * (f + bi + bw))
    assert simulate(one_f_one_b(p, 1, split=True), profile).iteration_ms == pytest.approx(p * (f + bi) + bw)


def test_one_microbatch_across_two_devices_pays_each_transfer_once():
    f, b, lag = 1.0, 2.0, 0.25
    # 1000 bytes over 4 GB/s plus 0 latency = 0.25 us ... scaled: 1e6 bytes / 4 GB/s = 0.25 ms.
    link = Link(bandwidth_gb_s=4.0, latency_us=0.0)
    cluster = ClusterSpec("two", 1, 2, DeviceType("d", 10**10, 100.0, 0.5, 1000.0), link, link)
    profile = uniform_profile(2, forward=f, backward_input=b, backward_weight=0.0, output_bytes=1_000_000)
    result = simulate(one_f_one_b(2, 1), profile, cluster)
    assert result.iteration_ms == pytest.approx(2 * f + 2 * b + 2 * lag)
    device0, device1 = result.per_device
    assert device1.time.exposed_comm_ms == pytest.approx(lag)    # waits for the activation
    assert device0.time.exposed_comm_ms == pytest.approx(lag)    # waits for the gradient
    assert device0.time.overlapped_comm_ms == pytest.approx(0.0)


@pytest.mark.parametrize("p", [2, 3, 5])
def test_one_microbatch_chain_pays_message_overhead_at_both_ends_of_every_boundary(p):
    f, b, lag, o = 1.0, 2.0, 0.25, 0.1
    link = Link(bandwidth_gb_s=4.0, latency_us=0.0, overhead_us=o * 1000)
    cluster = ClusterSpec("chain", 1, p, DeviceType("d", 10**10, 100.0, 0.5, 1000.0), link, link)
    profile = uniform_profile(p, forward=f, backward_input=b, backward_weight=0.0, output_bytes=1_000_000)
    result = simulate(one_f_one_b(p, 1), profile, cluster)
    # p - 1 boundaries, crossed forward and backward; each crossing costs a send, a transfer and a receive.
    assert result.iteration_ms == pytest.approx(p * (f + b) + 2 * (p - 1) * (lag + 2 * o))
    for device, stats in enumerate(result.per_device):
        ends = 1 if device in (0, p - 1) else 2          # neighbours this device exchanges with
        assert stats.time.message_ms == pytest.approx(2 * ends * o)
        assert stats.time.busy_ms == pytest.approx(f + b)
    # Device 1's forward computes after device 0's F, its send, the transfer and its own receive.
    (forward_start, forward_end), _ = result.action_times(1)
    assert forward_start == pytest.approx(f + o + lag + o)
    assert forward_end == pytest.approx(forward_start + f)
    first_transfer = result.transfers()[0]
    assert first_transfer["start_ms"] == pytest.approx(f + o)


def test_message_overhead_is_not_charged_between_stages_on_one_device():
    link = Link(bandwidth_gb_s=4.0, latency_us=50.0, overhead_us=400.0)
    cluster = ClusterSpec("one", 1, 1, DeviceType("d", 10**10, 100.0, 0.5, 1000.0), link, link)
    profile = uniform_profile(2, forward=1.0, backward_input=1.0, backward_weight=1.0)
    plan = interleaved_1f1b(1, 2, 2)
    result = simulate(plan, profile, cluster)
    assert result.iteration_ms == pytest.approx(2 * 2 * 3.0)
    assert result.per_device[0].time.message_ms == 0.0
