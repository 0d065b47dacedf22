"""Baseline schedules reach the textbook bubble ratios when every layer costs the same.

One layer per stage with F = I = W = 1 ms and free transfers, so each formula below is the known closed
form of the schedule (computed here by hand, not by the simulator): the work per device is
chunks x m x (F + B) and the idle time is what the pipeline fill and drain cost.
"""

import pytest

from planner.baselines import build_baseline

from sched_checks import decoder_profile

F = I = W = 1.0


def _build(schedule, p, m, chunks=1):
    return build_baseline(schedule, decoder_profile(p * chunks, forward=F, backward_input=I, backward_weight=W),
                          p, m, chunks=max(chunks, 2))


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", [(2, 4), (4, 4), (4, 8), (8, 16), (4, 2)])
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(schedule, p, m):
    plan = _build(schedule, p, m)
    assert plan.predicted["bubble_ratio"] == pytest.approx((p - 1) / (m + p - 1))
    assert plan.predicted["iteration_ms"] == pytest.approx((m + p - 1) * (F + I + W))


@pytest.mark.parametrize("p, m, v", [(2, 4, 2), (4, 8, 2), (4, 8, 3), (4, 16, 2), (8, 16, 2), (4, 4, 4)])
def test_interleaved_divides_the_fill_and_drain_by_the_chunk_count(p, m, v):
    # Megatron's result: the bubble stays (p-1) chunk-steps while the work grows v-fold.
    plan = _build("interleaved-1f1b", p, m, v)
    assert plan.predicted["bubble_ratio"] == pytest.approx((p - 1) / (v * m + p - 1))


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 4), (8, 16), (3, 7)])
def test_zb_h1_bubble_is_p_minus_1_times_f_plus_i_minus_w(p, m):
    # Zero Bubble paper, ZB-H1: each device idles (p-1)(T_F + T_I - T_W).
    plan = _build("zb-h1", p, m)
    idle = (p - 1) * (F + I - W)
    work = m * (F + I + W)
    for device in plan.predicted["per_device"]:
        assert device["bubble_ms"] == pytest.approx(idle)
    assert plan.predicted["bubble_ratio"] == pytest.approx(idle / (work + idle))


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 7), (3, 9), (8, 16)])
def test_zb_v_idles_only_to_fill_and_drain_the_v(p, m):
    # With at least 2p-1 micro-batches, device d waits d chunk-forwards for its first input and finishes
    # p-1-d steps before the end: p-1 idle steps everywhere, none in the steady state.
    plan = _build("zb-v", p, m, 2)
    for device, stats in enumerate(plan.predicted["per_device"]):
        assert stats["steady_bubble_ms"] == pytest.approx(0.0)
        assert stats["bubble_ms"] == pytest.approx((p - 1) * F)
    assert plan.predicted["bubble_ratio"] == pytest.approx((p - 1) / (2 * m * (F + I + W) + p - 1))
