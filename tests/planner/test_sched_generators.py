"""Schedule generators: complete, deadlock-free orders with the shape and memory each schedule promises."""

import pytest

from planner.errors import SpecError
from planner.plan import Action
from planner.scheduling import (
    SCHEDULE_NAMES,
    chunks_per_device,
    generate_schedule,
    gpipe,
    interleaved_1f1b,
    interleaved_zero_bubble,
    one_f_one_b,
    zero_bubble_v,
)

from sched_checks import check_complete, max_in_flight, replay

SIZES = [(1, 1), (1, 4), (2, 1), (2, 2), (3, 5), (4, 4), (4, 8), (4, 6), (5, 7), (8, 16), (8, 3), (3, 7)]


def _all_schedules(p, m):
    yield "gpipe", gpipe(p, m)
    yield "1f1b", one_f_one_b(p, m)
    yield "zb-h1", interleaved_zero_bubble(p, m)
    yield "zb-v", zero_bubble_v(p, m)
    for chunks in (2, 3):
        rounds = max(1, m // p)
        if m % rounds == 0:
            yield f"interleaved-{chunks}", interleaved_1f1b(p, m, chunks)
            yield f"interleaved-zb-{chunks}", interleaved_zero_bubble(p, m, chunks)


@pytest.mark.parametrize("p, m", SIZES)
def test_every_schedule_is_complete_and_runs_without_deadlock(p, m):
    for name, schedule in _all_schedules(p, m):
        assert len(schedule.actions) == p, name
        check_complete(schedule.actions, schedule.stage_devices, m)
        replay(schedule.actions, schedule.num_stages)


def test_gpipe_runs_all_forwards_before_any_backward():
    schedule = gpipe(3, 4)
    for device, actions in enumerate(schedule.actions):
        assert [str(a) for a in actions] == [f"{device}F{i}" for i in range(4)] + [f"{device}B{i}" for i in range(4)]
    assert max_in_flight(schedule.actions[0]) == 4


@pytest.mark.parametrize("p, m", [(4, 8), (4, 2), (8, 16)])
def test_1f1b_keeps_at_most_p_minus_d_microbatches_in_flight(p, m):
    schedule = one_f_one_b(p, m)
    for device, actions in enumerate(schedule.actions):
        assert max_in_flight(actions) == min(m, p - device)
        warmup = next(i for i, a in enumerate(actions) if a.type == "B")
        assert warmup == min(m, p - device)   # p-1-d warm-up forwards, then the first steady forward


def test_1f1b_steady_state_alternates_forward_and_backward():
    actions = one_f_one_b(4, 8).actions[1]
    steady = actions[2:2 + 2 * 6]
    assert [a.type for a in steady] == ["F", "B"] * 6


def test_1f1b_with_uniform_costs_finishes_in_the_textbook_number_of_steps():
    # Unit-time F and B: the last device runs 2m steps after waiting p-1 steps for its first input, and
    # the first device then needs p-1 more steps for the last backward to come back: 2m + 2(p-1) rounds.
    for p, m in [(4, 8), (3, 3), (5, 12)]:
        assert replay(one_f_one_b(p, m).actions, p) == 2 * m + 2 * (p - 1)


def test_interleaved_places_stage_k_on_device_k_mod_p_and_works_depth_first():
    schedule = interleaved_1f1b(4, 8, 2)
    assert schedule.stage_devices == (0, 1, 2, 3, 0, 1, 2, 3)
    # Device 0: a group of p micro-batches on chunk 0, then the same group on chunk 1.
    assert [str(a) for a in schedule.actions[0][:8]] == ["0F0", "0F1", "0F2", "0F3", "4F0", "4F1", "4F2", "4F3"]


def test_interleaved_holds_more_activations_on_the_first_device_than_1f1b():
    # Megatron's known cost: device 0 warms up (v-1)*p + 2(p-1) forwards of 1/v-sized chunks.
    p, m, v = 4, 8, 2
    actions = interleaved_1f1b(p, m, v).actions[0]
    first_backward = next(i for i, a in enumerate(actions) if a.type == "B")
    assert first_backward == (v - 1) * p + 2 * (p - 1) + 1


@pytest.mark.parametrize("m", [9, 11, 13])
def test_interleaved_rejects_microbatches_not_a_multiple_of_the_rounds(m):
    with pytest.raises(SpecError) as error:
        interleaved_1f1b(4, m, 2)
    assert error.value.field == "num_microbatches"


def test_interleaved_accepts_microbatches_not_a_multiple_of_devices_when_rounds_divide():
    schedule = interleaved_1f1b(4, 10, 2)   # 2 rounds of 5 micro-batches
    check_complete(schedule.actions, schedule.stage_devices, 10)
    replay(schedule.actions, schedule.num_stages)


def test_interleaved_needs_at_least_two_chunks():
    with pytest.raises(SpecError) as error:
        interleaved_1f1b(4, 8, 1)
    assert error.value.field == "chunks"


def test_zb_h1_splits_backward_and_keeps_1f1b_activation_memory():
    p, m = 4, 8
    zb, baseline = interleaved_zero_bubble(p, m), one_f_one_b(p, m)
    for device in range(p):
        assert {a.type for a in zb.actions[device]} == {"F", "I", "W"}
        # Forwards and input-gradient backwards come in 1F1B's order; W is what moves.
        assert [(a.type, a.microbatch) for a in zb.actions[device] if a.type != "W"] == \
               [("I" if a.type == "B" else "F", a.microbatch) for a in baseline.actions[device]]


def test_zb_h1_device_d_runs_each_weight_gradient_d_backwards_late():
    p, m = 4, 8
    for device, actions in enumerate(interleaved_zero_bubble(p, m).actions):
        input_positions = [i for i, a in enumerate(actions) if a.type == "I"]
        for microbatch in range(m - device):
            w_position = actions.index(Action(device, "W", microbatch))
            assert w_position == input_positions[microbatch + device] + 1


def test_zb_h1_accepts_any_microbatch_count():
    # torch's ScheduleInterleavedZeroBubble refuses p=3, m=7 (its round rule), though one chunk has
    # nothing to interleave; ours does not.
    schedule = interleaved_zero_bubble(3, 7)
    check_complete(schedule.actions, schedule.stage_devices, 7)
    replay(schedule.actions, 3)


def test_zb_v_places_two_chunks_in_a_v():
    schedule = zero_bubble_v(4, 8)
    assert schedule.stage_devices == (0, 1, 2, 3, 3, 2, 1, 0)
    assert {a.stage for a in schedule.actions[0]} == {0, 7}


def test_zb_v_with_fewer_microbatches_than_it_is_written_for_drops_the_extra_ones():
    schedule = zero_bubble_v(4, 2)
    check_complete(schedule.actions, schedule.stage_devices, 2)
    assert all(a.microbatch < 2 for actions in schedule.actions for a in actions)


def test_generate_schedule_dispatches_by_name_and_reports_chunks():
    for name in SCHEDULE_NAMES:
        schedule = generate_schedule(name, 4, 8, chunks=3)
        assert schedule.num_stages == 4 * chunks_per_device(name, 3)
    assert chunks_per_device("zb-v", 3) == 2 and chunks_per_device("1f1b", 3) == 1


@pytest.mark.parametrize("call, field", [
    (lambda: generate_schedule("pipedream", 4, 8), "schedule"),
    (lambda: one_f_one_b(0, 8), "num_devices"),
    (lambda: gpipe(2, 0), "num_microbatches"),
    (lambda: zero_bubble_v(2, -1), "num_microbatches"),
])
def test_bad_arguments_name_the_field(call, field):
    with pytest.raises(SpecError) as error:
        call()
    assert error.value.field == field
