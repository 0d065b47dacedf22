"""Lower a plan to per-device programs of integer-indexed instructions for the event engine.

Every action becomes one tuple ``(duration, writes, dep_a, lag_a, dep_b, lag_b)``: how long it holds its
device (compute plus the handling of the messages it receives and sends), the slot of the completion-time
table it fills and the (at most two) slots it waits on, each with the transfer lag
added to that dependency's completion. Slots, for S stages and M micro-batches (k = s*M + m):

- ``k``          F(s, m) done (the activation of stage s for micro-batch m exists);
- ``S*M + k``    B(s, m) or I(s, m) done (the input gradient of stage s exists);
- ``2*S*M + k``  W(s, m) done;
- ``3*S*M``      a slot that is always done at time 0, used for "no dependency".

Tuples and flat lists keep the engine's hot loop free of attribute look-ups and allocations.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.actions import ACTIVATION, GRADIENT, ActionKind
from planner.plan import Plan
from planner.simulator.costs import StageCosts

Instruction = tuple[float, int, int, float, int, float]


@dataclass(frozen=True)
class Programs:
    devices: list[list[Instruction]]
    num_stages: int
    num_microbatches: int
    message_time: list[list[float]] | None = None   # per device, per instruction: the part of its duration
                                                    # spent on messages rather than compute (None: all 0)

    def compute_time(self, device: int) -> list[float]:
        """Each of ``device``'s instructions' compute time: its duration less its message handling."""
        durations = [instruction[0] for instruction in self.devices[device]]
        if self.message_time is None:
            return durations
        return [duration - message for duration, message in zip(durations, self.message_time[device])]

    @property
    def num_slots(self) -> int:
        return 3 * self.num_stages * self.num_microbatches + 1

    @property
    def always_done(self) -> int:
        return 3 * self.num_stages * self.num_microbatches

    def describe_slot(self, slot: int, plan: Plan) -> str:
        """The action that fills ``slot``, in plan notation (for deadlock reports)."""
        per_kind = self.num_stages * self.num_microbatches
        kind, key = divmod(slot, per_kind)
        stage, microbatch = divmod(key, self.num_microbatches)
        if kind == 0:
            return f"{stage}{ActionKind.F}{microbatch}"
        if kind == 2:
            return f"{stage}{ActionKind.W}{microbatch}"
        split = any(action.type is ActionKind.I and action.stage == stage and action.microbatch == microbatch
                    for action in plan.actions[plan.stage_device(stage)])
        return f"{stage}{ActionKind.I if split else ActionKind.B}{microbatch}"


def compile_programs(plan: Plan, costs: StageCosts | None) -> Programs:
    """Assumes ``planner.plan_check.check_plan_structure`` passed. ``costs=None`` gives zero durations."""
    num_stages, num_microbatches = plan.num_stages, plan.num_microbatches
    per_kind = num_stages * num_microbatches
    gradient_base, weight_base, always_done = per_kind, 2 * per_kind, 3 * per_kind
    last_stage = num_stages - 1
    zeros = (0.0,) * num_stages
    if costs is None:
        forward = backward_input = backward_weight = forward_lag = gradient_lag = zeros
    else:
        forward, backward_input, backward_weight = costs.forward, costs.backward_input, costs.backward_weight
        forward_lag, gradient_lag = costs.forward_lag, costs.gradient_lag
    # message handling holds the device too: per stage, around its F and around its B/I (W sends nothing)
    with_messages = costs is not None and any(costs.forward_pre + costs.forward_post)
    if with_messages:
        forward_messages = [pre + post for pre, post in zip(costs.forward_pre, costs.forward_post)]
        backward_messages = [pre + post for pre, post in zip(costs.backward_pre, costs.backward_post)]
        forward = [f + message for f, message in zip(forward, forward_messages)]
        backward_input = [i + message for i, message in zip(backward_input, backward_messages)]
    backward = [i + w for i, w in zip(backward_input, backward_weight)]

    forward_kind, full_backward_kind, weight_kind = ActionKind.F, ActionKind.B, ActionKind.W  # locals: the loop is hot
    devices = []
    for device_actions in plan.actions:
        program = []
        append = program.append
        for action in device_actions:
            stage = action.stage
            key = stage * num_microbatches + action.microbatch
            action_type = action.type
            if action_type is forward_kind:
                append((forward[stage], key, key - num_microbatches if stage else always_done,
                        forward_lag[stage], always_done, 0.0))
            elif action_type is weight_kind:
                append((backward_weight[stage], weight_base + key, gradient_base + key, 0.0, always_done, 0.0))
            else:
                duration = backward[stage] if action_type is full_backward_kind else backward_input[stage]
                upstream = gradient_base + key + num_microbatches if stage != last_stage else always_done
                append((duration, gradient_base + key, key, 0.0, upstream, gradient_lag[stage]))
        devices.append(program)
    message_time = None
    if with_messages:
        per_boundary = {ACTIVATION: forward_messages, GRADIENT: backward_messages}
        message_time = [[per_boundary[action.type.boundary][action.stage] if action.type.boundary else 0.0
                         for action in device_actions] for device_actions in plan.actions]
    return Programs(devices, num_stages, num_microbatches, message_time)
