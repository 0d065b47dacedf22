"""Lowering: a Plan's compute-only action lists become per-rank programs with communication inserted.

A stage boundary crossing devices becomes a message: the activation of ``F(s, m)`` travels to the device of
stage s+1, the input gradient of ``B/I(s, m)`` to the device of stage s-1. Stages on the same device hand
tensors over locally. Each program:

- posts each receive ahead of the compute that needs it and waits on it just before that compute. When is
  ``lookahead``: that many compute ops before (0: just before the wait); ``"step"``: every receive before the
  step's first compute; ``"causal"``: right after this rank's last compute that the sender's producing
  action depends on, the latest point at which the receive is still surely posted before its send;
- sends right after the producing compute, without waiting (sends are drained at the end of the step).

Messages on one (src, dst) channel are numbered in the order the sender produces them, and the receiver
posts them in that same order. That is what keeps messages from crossing: gloo also matches on the tag
(the sequence number), NCCL matches point-to-point operations in issue order and ignores tags.

``prove_deadlock_free`` replays the programs with those semantics (posts and sends never block, a wait
blocks until the matching send was issued, a compute needs its local inputs) and fails naming the stuck ops.
Posts and sends never block the host with either backend. On NCCL a receive does hold the stream it runs
on until its data arrives, so the runtime gives every channel a process group (and a stream) of its own
(``executor.running.worker.open_channels``): a stream then carries one channel's messages in the order both ends
issue them, and nothing waits behind a receive but later receives of the same channel.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from planner.actions import ACTIVATION, ActionKind
from planner.errors import PlanError, SpecError
from planner.plan import Action, Plan
from planner.plan_check import validate_plan

# ``lookahead`` values that are not counts (see the module doc)
WHOLE_STEP = "step"
CAUSAL = "causal"


@dataclass(frozen=True)
class Message:
    """A tensor crossing devices: the ``kind`` input of ``stage`` for ``microbatch``."""

    kind: str
    stage: int
    microbatch: int
    src: int
    dst: int
    sequence: int = 0   # position on the (src, dst) channel

    def __str__(self) -> str:
        what = "act" if self.kind == ACTIVATION else "grad"
        return f"{what}(stage {self.stage}, mb {self.microbatch}) {self.src}->{self.dst} #{self.sequence}"


@dataclass(frozen=True)
class Op:
    """One instruction of a rank's program: COMPUTE an action, or POST_RECV / WAIT_RECV / SEND a message."""

    type: str
    action: Action | None = None
    message: Message | None = None

    def __str__(self) -> str:
        return f"{self.type} {self.action}" if self.action is not None else f"{self.type} {self.message}"


@dataclass
class LoweredPlan:
    plan: Plan
    programs: list[list[Op]]

    def program(self, rank: int) -> list[Op]:
        return self.programs[rank]

    def channels(self) -> list[tuple[int, int]]:
        """Every (sender, receiver) pair that carries a message, sorted."""
        return sorted({(op.message.src, op.message.dst) for program in self.programs for op in program
                       if op.type == "SEND"})

    def max_channel_length(self) -> int:
        """The most messages any (src, dst) channel carries per step (tags of step k start at k times it)."""
        return max((op.message.sequence + 1 for program in self.programs for op in program if op.type == "SEND"),
                   default=0)


def _needs_input(plan: Plan, action: Action) -> tuple[str, int] | None:
    """(kind, producing stage) of the boundary tensor ``action`` consumes, if it comes from another stage."""
    stage = plan.input_stage(action)
    return None if stage is None else (action.type.boundary, stage)


def _produces(plan: Plan, action: Action) -> tuple[str, int] | None:
    """(kind, consuming stage) of the boundary tensor ``action`` produces, if another stage consumes it."""
    stage = plan.output_stage(action)
    return None if stage is None else (action.type.boundary, stage)


def _remote_messages(plan: Plan) -> dict[tuple[str, int, int], Message]:
    """Every cross-device message keyed by (kind, consuming stage, micro-batch), numbered per channel."""
    messages: dict[tuple[str, int, int], Message] = {}
    channel_length: dict[tuple[int, int], int] = defaultdict(int)
    for device, actions in enumerate(plan.actions):
        for action in actions:
            produced = _produces(plan, action)
            if produced is None:
                continue
            kind, consumer = produced
            dst = plan.stage_device(consumer)
            if dst == device:
                continue
            sequence = channel_length[device, dst]
            channel_length[device, dst] += 1
            messages[kind, consumer, action.microbatch] = Message(kind, consumer, action.microbatch, device, dst,
                                                                  sequence)
    return messages


def _full_backwards(plan: Plan) -> set[tuple[int, int]]:
    """(stage, micro-batch) of every full backward B (the others are split into I and W)."""
    return {(a.stage, a.microbatch) for actions in plan.actions for a in actions if a.type is ActionKind.B}


def _producer(plan: Plan, action: Action, full_backwards: set[tuple[int, int]]) -> Action | None:
    """The neighbouring stage's action whose boundary tensor ``action`` consumes (None if none)."""
    need = _needs_input(plan, action)
    if need is None:
        return None
    kind, stage = need
    if kind == ACTIVATION:
        return Action(stage, ActionKind.F, action.microbatch)
    full = (stage, action.microbatch) in full_backwards
    return Action(stage, ActionKind.B if full else ActionKind.I, action.microbatch)


def _causal_horizons(plan: Plan) -> dict[Action, list[int]]:
    """For every action, per device, the position in that device's order of the last action it depends on,
    itself included (-1: none), through the devices' orders and the tensors the actions hand over. Actions
    on a dependency cycle get none (``prove_deadlock_free`` reports them)."""
    full_backwards = _full_backwards(plan)
    horizon: dict[Action, list[int]] = {}
    position = [0] * plan.num_devices
    progressed = True
    while progressed:
        progressed = False
        for device, actions in enumerate(plan.actions):
            while position[device] < len(actions):
                action = actions[position[device]]
                needs = _local_dependencies(plan, action, full_backwards)
                needs += [actions[position[device] - 1]] if position[device] else []
                producer = _producer(plan, action, full_backwards)
                needs += [producer] if producer is not None else []
                if any(need not in horizon for need in needs):
                    break
                latest = [max(positions) for positions in zip([-1] * plan.num_devices,
                                                               *(horizon[need] for need in needs))]
                latest[device] = position[device]
                horizon[action] = latest
                position[device] += 1
                progressed = True
    return horizon


def _program(plan: Plan, device: int, messages: dict, lookahead: int | str,
             horizons: dict[Action, list[int]]) -> list[Op]:
    actions = plan.actions[device]
    incoming = [None] * len(actions)
    for position, action in enumerate(actions):
        need = _needs_input(plan, action)
        if need is not None:
            incoming[position] = messages.get((need[0], action.stage, action.microbatch))
    # Receives posted right after the compute at a position (-1: before the first compute).
    post_after: dict[int, list[Message]] = defaultdict(list)
    if lookahead == WHOLE_STEP:
        post_after[-1] = list(filter(None, incoming))
        lookahead = 0
    elif lookahead == CAUSAL:
        full_backwards = _full_backwards(plan)
        for action, message in zip(actions, incoming):
            if message is not None:
                sender = _producer(plan, action, full_backwards)
                post_after[horizons[sender][device] if sender in horizons else -1].append(message)
        lookahead = 0
    # Receives this rank will post, per source channel, in channel order.
    channel_queue: dict[int, list[Message]] = defaultdict(list)
    for message in sorted(filter(None, incoming), key=lambda m: (m.src, m.sequence)):
        channel_queue[message.src].append(message)
    posted: set[Message] = set()

    def post(message: Message, program: list[Op]) -> None:
        # Post every earlier message of the channel first, so receives go out in channel order.
        queue = channel_queue[message.src]
        while message not in posted:
            earlier = queue.pop(0)
            posted.add(earlier)
            program.append(Op("POST_RECV", message=earlier))

    program: list[Op] = []
    for message in post_after[-1]:
        post(message, program)
    for position, action in enumerate(actions):
        ahead = incoming[position + lookahead] if lookahead and position + lookahead < len(actions) else None
        if position == 0:
            for early in incoming[:lookahead + 1]:
                if early is not None:
                    post(early, program)
        if ahead is not None:
            post(ahead, program)
        if incoming[position] is not None:
            post(incoming[position], program)
            program.append(Op("WAIT_RECV", message=incoming[position]))
        program.append(Op("COMPUTE", action=action))
        produced = _produces(plan, action)
        if produced is not None:
            outgoing = messages.get((produced[0], produced[1], action.microbatch))
            if outgoing is not None:
                program.append(Op("SEND", message=outgoing))
        for message in post_after[position]:
            post(message, program)
    return program


def lower_plan(plan: Plan, num_layers: int, *, lookahead: int | str = 1) -> LoweredPlan:
    """Validate ``plan``, insert communication, and prove the result deadlock-free (else ``PlanError``).

    ``lookahead``: when each receive is posted, a count of compute ops ahead, ``WHOLE_STEP`` or ``CAUSAL``
    (see the module doc).
    """
    check_lookahead(lookahead)
    validate_plan(plan, num_layers)
    messages = _remote_messages(plan)
    horizons = _causal_horizons(plan) if lookahead == CAUSAL else {}
    lowered = LoweredPlan(plan, [_program(plan, device, messages, lookahead, horizons)
                                 for device in range(plan.num_devices)])
    prove_deadlock_free(lowered)
    return lowered


def check_lookahead(lookahead) -> None:
    """SpecError on ``lookahead`` unless it is a count >= 0, ``WHOLE_STEP`` or ``CAUSAL``."""
    if lookahead in (WHOLE_STEP, CAUSAL):
        return
    if isinstance(lookahead, bool) or not isinstance(lookahead, int) or lookahead < 0:
        raise SpecError("lookahead", f"must be a number of compute ops >= 0, {WHOLE_STEP!r} or {CAUSAL!r}, "
                                    f"got {lookahead!r}")


def _local_dependencies(plan: Plan, action: Action, full_backwards: set[tuple[int, int]]) -> list[Action]:
    """Same-device actions whose results ``action`` consumes: its own F (or I for a W) and local hand-offs."""
    first = action.type.needs_first
    needs = [] if first is None else [Action(action.stage, first, action.microbatch)]
    producer = _producer(plan, action, full_backwards)
    if producer is not None and plan.stage_device(producer.stage) == plan.stage_device(action.stage):
        needs.append(producer)
    return needs


def prove_deadlock_free(lowered: LoweredPlan) -> None:
    """Replay the programs; raise PlanError listing each rank's blocking op if they cannot all finish."""
    plan = lowered.plan
    programs = lowered.programs
    full_backwards = _full_backwards(plan)
    position = [0] * len(programs)
    sent: set[Message] = set()
    done: set[Action] = set()
    next_posted: dict[tuple[int, int], int] = defaultdict(int)

    def ready(op: Op) -> bool:
        if op.type == "WAIT_RECV":
            return op.message in sent
        if op.type == "COMPUTE":
            return all(needed in done for needed in _local_dependencies(plan, op.action, full_backwards))
        return True

    progressed = True
    while progressed:
        progressed = False
        for device, program in enumerate(programs):
            while position[device] < len(program) and ready(program[position[device]]):
                op = program[position[device]]
                if op.type == "POST_RECV":
                    channel = (op.message.src, device)
                    if op.message.sequence != next_posted[channel]:
                        raise PlanError(f"device {device} posts {op.message} out of channel order "
                                        f"(expected #{next_posted[channel]})", blocked=[str(op)])
                    next_posted[channel] += 1
                elif op.type == "SEND":
                    sent.add(op.message)
                elif op.type == "COMPUTE":
                    done.add(op.action)
                position[device] += 1
                progressed = True
    stuck = [f"device {device}: {program[position[device]]}"
             for device, program in enumerate(programs) if position[device] < len(program)]
    if stuck:
        raise PlanError("the lowered program deadlocks: every remaining rank waits on an op that can never "
                        "complete (" + "; ".join(stuck) + ")", field="actions", blocked=stuck)
