"""Lowering inserts the right messages, keeps every channel in order, and proves programs deadlock-free."""

from __future__ import annotations

import pytest

from executor.config import RunConfig
from executor.lowering import WHOLE_STEP, LoweredPlan, Op, lower_plan, prove_deadlock_free
from executor_plans import gpipe, list_schedule, one_f_one_b
from planner.errors import PlanError, SpecError
from planner.plan import Action, Plan, Stage


def ops(program, kind):
    return [op for op in program if op.type == kind]


def test_gpipe_sends_each_activation_and_gradient_once_across_the_boundary():
    lowered = lower_plan(gpipe([[0, 1], [2, 3]], [0, 1], num_microbatches=3), num_layers=4)
    first, second = lowered.programs
    assert [(m.message.kind, m.message.microbatch) for m in ops(first, "SEND")] == [("activation", mb) for mb in range(3)]
    assert [(m.message.kind, m.message.microbatch) for m in ops(second, "SEND")] == [("gradient", mb) for mb in range(3)]
    assert {op.message for op in ops(second, "POST_RECV")} == {op.message for op in ops(first, "SEND")}
    assert {op.message for op in ops(first, "WAIT_RECV")} == {op.message for op in ops(second, "SEND")}


def test_stages_on_one_device_hand_over_locally_without_messages():
    plan = list_schedule([[0], [1], [2, 3]], [0, 0, 1], num_microbatches=2)
    lowered = lower_plan(plan, num_layers=4)
    messages = [op.message for program in lowered.programs for op in ops(program, "SEND")]
    assert all({message.stage, message.stage + (1 if message.kind == "gradient" else -1)} == {1, 2}
               for message in messages)
    assert len(messages) == 4   # stage 1 <-> stage 2 only: 2 activations, 2 gradients


def test_receives_are_posted_one_compute_ahead_and_waited_just_before_use():
    lowered = lower_plan(one_f_one_b([[0, 1], [2, 3]], num_microbatches=3), num_layers=4)
    program = lowered.programs[1]
    for index, op in enumerate(program):
        if op.type == "WAIT_RECV":
            consumer = next(o for o in program[index:] if o.type == "COMPUTE")
            posted_at = program.index(Op("POST_RECV", message=op.message))
            computes_between = [o for o in program[posted_at:index] if o.type == "COMPUTE"]
            assert program[index + 1] is consumer
            assert len(computes_between) <= 1


@pytest.mark.parametrize("plan", [gpipe([[0, 1], [2, 3]], [0, 1], num_microbatches=4),
                                  one_f_one_b([[0], [1, 2], [3]], num_microbatches=5),
                                  list_schedule([[0], [1], [2], [3]], [0, 1, 1, 0], num_microbatches=3,
                                                split_backward=True)])
def test_whole_step_lookahead_posts_every_receive_before_the_first_compute(plan):
    lowered = lower_plan(plan, num_layers=4, lookahead=WHOLE_STEP)
    ahead_one = lower_plan(plan, num_layers=4, lookahead=1)
    for program, other in zip(lowered.programs, ahead_one.programs):
        first_compute = next(index for index, op in enumerate(program) if op.type == "COMPUTE")
        posted = [op.message for op in program[:first_compute] if op.type == "POST_RECV"]
        assert posted == [op.message for op in ops(other, "POST_RECV")]   # all of them, in channel order
        assert not ops(program[first_compute:], "POST_RECV")
        # every wait still sits just before the compute that needs the message
        for index, op in enumerate(program):
            if op.type == "WAIT_RECV":
                assert program[index + 1].type == "COMPUTE"


def test_each_backend_posts_receives_at_its_own_default_and_a_run_can_override_it():
    assert RunConfig(backend="gloo").receive_lookahead == WHOLE_STEP
    assert RunConfig(backend="nccl").receive_lookahead == 0
    assert RunConfig(backend="gloo", lookahead=0).receive_lookahead == 0


@pytest.mark.parametrize("lookahead", [-1, "soon", 1.5, True])
def test_a_bad_lookahead_is_refused_naming_the_field(lookahead):
    with pytest.raises(SpecError) as error:
        RunConfig(lookahead=lookahead)
    assert error.value.field == "lookahead"
    with pytest.raises(SpecError, match="lookahead"):
        lower_plan(gpipe([[0, 1], [2, 3]], [0, 1], num_microbatches=2), num_layers=4, lookahead=lookahead)


def test_receives_follow_channel_order_even_when_consumed_out_of_order():
    stages = [Stage((0, 1), 0), Stage((2, 3), 1)]
    actions = [[Action(0, "F", 0), Action(0, "F", 1), Action(0, "B", 0), Action(0, "B", 1)],
               # Device 1 runs micro-batch 1 first; the activations still arrive (and are posted) 0 then 1.
               [Action(1, "F", 1), Action(1, "B", 1), Action(1, "F", 0), Action(1, "B", 0)]]
    lowered = lower_plan(Plan(2, 2, stages, actions), num_layers=4)
    posted = [op.message for op in ops(lowered.programs[1], "POST_RECV")]
    assert [(m.microbatch, m.sequence) for m in posted] == [(0, 0), (1, 1)]


def test_a_program_that_waits_before_it_sends_is_reported_as_a_deadlock_naming_the_stuck_ops():
    lowered = lower_plan(gpipe([[0, 1], [2, 3]], [0, 1], num_microbatches=1), num_layers=4)
    first = lowered.programs[0]
    send = ops(first, "SEND")[0]
    broken = [op for op in first if op is not send] + [send]   # the activation now leaves after the grad wait
    with pytest.raises(PlanError) as caught:
        prove_deadlock_free(LoweredPlan(lowered.plan, [broken, lowered.programs[1]]))
    assert "deadlock" in caught.value.reason
    assert any(entry.startswith("device 0: WAIT_RECV grad") for entry in caught.value.blocked)
    assert any(entry.startswith("device 1: WAIT_RECV act") for entry in caught.value.blocked)


def test_posting_a_channel_out_of_order_is_rejected():
    lowered = lower_plan(gpipe([[0, 1], [2, 3]], [0, 1], num_microbatches=2), num_layers=4)
    second = list(lowered.programs[1])
    posts = [i for i, op in enumerate(second) if op.type == "POST_RECV"]
    second[posts[0]], second[posts[1]] = second[posts[1]], second[posts[0]]
    with pytest.raises(PlanError, match="out of channel order"):
        prove_deadlock_free(LoweredPlan(lowered.plan, [lowered.programs[0], second]))


def test_plans_with_dependency_cycles_are_refused_before_lowering():
    stages = [Stage((0,), 0), Stage((1,), 1)]
    actions = [[Action(0, "B", 0), Action(0, "F", 0)], [Action(1, "F", 0), Action(1, "B", 0)]]
    with pytest.raises(PlanError):
        lower_plan(Plan(2, 1, stages, actions), num_layers=2)
