"""Lowering inserts the right messages, keeps every channel in order, and proves programs deadlock-free."""

from __future__ import annotations

import pytest

from executor.cli import build_parser
from executor.running.config import RunConfig
from executor.running.lowering import CAUSAL, WHOLE_STEP, LoweredPlan, Op, lower_plan, prove_deadlock_free
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


def test_each_kind_receives_and_sends_the_boundary_tensor_its_action_kind_names():
    # stage k runs on device k, so a message's source device is the producing stage
    plan = Plan(3, 1, [Stage((stage,), stage) for stage in range(3)],
                [[Action.parse(text) for text in device_actions]
                 for device_actions in (["0F0", "0B0"], ["1F0", "1I0", "1W0"], ["2F0", "2B0"])])
    for program in lower_plan(plan, num_layers=3).programs:
        padded = [None, *program, None]
        for before, op, after in zip(padded, padded[1:], padded[2:]):
            if op.type != "COMPUTE":
                continue
            kind, stage = op.action.type, op.action.stage
            received = before.message if before is not None and before.type == "WAIT_RECV" else None
            sent = after.message if after is not None and after.type == "SEND" else None
            source = None if kind.receives_from is None else stage + kind.receives_from
            destination = None if kind.sends_to is None else stage + kind.sends_to
            assert (received and (received.kind, received.src)) == ((kind.boundary, source) if source in range(3)
                                                                    else None), op
            assert (sent and (sent.kind, sent.stage)) == ((kind.boundary, destination) if destination in range(3)
                                                          else None), op


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


def _posts_before_compute(program) -> list[tuple[str, list[tuple[str, int]]]]:
    """Each compute of ``program`` with the (kind, micro-batch) of the receives posted right after it
    (and after its send), the first entry holding those posted before the first compute."""
    listing, posts, current = [], [], "start"
    for op in program:
        if op.type == "COMPUTE":
            listing.append((current, posts))
            current, posts = str(op.action), []
        elif op.type == "POST_RECV":
            posts.append((op.message.kind[:3], op.message.microbatch))
    listing.append((current, posts))
    return [(compute, posted) for compute, posted in listing if posted]


def test_causal_posting_puts_each_receive_right_after_the_last_local_compute_its_sender_depends_on():
    # GPipe: every gradient's producer (device 1's B) runs after device 1's last F, which needs device 0's last
    # F; device 1's activations depend on nothing of device 1, so it posts them all at the start.
    lowered = lower_plan(gpipe([[0, 1], [2, 3]], [0, 1], num_microbatches=3), num_layers=4, lookahead=CAUSAL)
    assert _posts_before_compute(lowered.programs[0]) == [("0F2", [("gra", 0), ("gra", 1), ("gra", 2)])]
    assert _posts_before_compute(lowered.programs[1]) == [("start", [("act", 0), ("act", 1), ("act", 2)])]
    # 1F1B on 2 devices: gradient m is produced after device 1's F m, which needs device 0's F m; device 0's
    # F m+2 waits in device 0's order for its B m, which needs device 1's B m.
    lowered = lower_plan(one_f_one_b([[0, 1], [2, 3]], num_microbatches=4), num_layers=4, lookahead=CAUSAL)
    assert _posts_before_compute(lowered.programs[0]) == [("0F0", [("gra", 0)]), ("0F1", [("gra", 1)]),
                                                          ("0F2", [("gra", 2)]), ("0F3", [("gra", 3)])]
    assert _posts_before_compute(lowered.programs[1]) == [("start", [("act", 0), ("act", 1)]),
                                                          ("1B0", [("act", 2)]), ("1B1", [("act", 3)])]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v"])
def test_causal_posting_is_never_later_than_the_sender_can_send(schedule):
    """No compute runs on the receiving rank between the last compute the message's send depends on and the
    receive's post: the post follows that compute at once, while the send still waits for a message to reach
    the sender and for the producing compute to run."""
    from planner.baselines import build_baseline
    from planner.cluster import load_cluster_preset
    from planner.cost import analytic_profile
    from planner.spec.presets import load_model_preset

    spec = load_model_preset("tiny-llama")
    plan = build_baseline(schedule, analytic_profile(spec, load_cluster_preset("cpu-host")), 2, 6)
    programs = lower_plan(plan, num_layers=spec.num_layers, lookahead=CAUSAL).programs
    # Replay the programs, tracking for each op the set of ops that happen before it (a WAIT after its SEND).
    position = [0] * len(programs)
    history: list[set] = [set() for _ in programs]
    before_send: dict = {}
    last_compute_before_post: dict = {}
    progressed = True
    while progressed:
        progressed = False
        for rank, program in enumerate(programs):
            while position[rank] < len(program):
                op = program[position[rank]]
                if op.type == "WAIT_RECV":
                    if op.message not in before_send:
                        break
                    history[rank] |= before_send[op.message]
                if op.type == "SEND":
                    before_send[op.message] = set(history[rank])
                elif op.type == "POST_RECV":
                    computes = [i for i, o in enumerate(program[:position[rank]]) if o.type == "COMPUTE"]
                    last_compute_before_post[op.message] = (rank, computes[-1]) if computes else None
                history[rank].add((rank, position[rank]))
                position[rank] += 1
                progressed = True
    assert all(position[rank] == len(program) for rank, program in enumerate(programs))
    assert last_compute_before_post.keys() == before_send.keys() and before_send
    for message, compute in last_compute_before_post.items():
        assert compute is None or compute in before_send[message], f"{message} is posted after a compute that " \
                                                                   f"its send does not wait for"


def test_runs_post_receives_causally_unless_the_command_line_says_otherwise():
    assert RunConfig().lookahead == RunConfig(backend="nccl").lookahead == CAUSAL
    parser = build_parser()
    run = ["run", "plan.json", "--model", "tiny-llama"]
    assert parser.parse_args(run).lookahead == CAUSAL
    assert parser.parse_args(run + ["--lookahead", "2"]).lookahead == 2
    assert parser.parse_args(run + ["--lookahead", WHOLE_STEP]).lookahead == WHOLE_STEP
    with pytest.raises(SystemExit):
        parser.parse_args(run + ["--lookahead", "soon"])


@pytest.mark.parametrize("lookahead", [-1, "soon", "Causal", 1.5, True])
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
