"""Whole-plan validation: partition, placement, action completeness and dependency satisfiability.

``planner.plan.load_plan`` only checks the document's shape; this module checks that the plan can run.
The rules (each failure names the field and the reason):

- ``stages`` hold contiguous runs of layer indices in model order that cover ``0..num_layers-1``
  exactly, each on one device in ``0..num_devices-1``;
- ``actions`` has one list per device; every action's stage and micro-batch exist and the action sits
  on the device that owns its stage; no action appears twice;
- every stage x micro-batch has one ``F`` and either one ``B`` or one ``I`` and one ``W``;
- the per-device orders respect the dependencies (``F(s,m)`` after ``F(s-1,m)``; ``B/I(s,m)`` after
  ``F(s,m)`` and ``B/I(s+1,m)``; ``W(s,m)`` after ``I(s,m)``) without a deadlock.
"""

from __future__ import annotations

from planner.actions import ACTION_KINDS
from planner.errors import PlanError
from planner.plan import Plan

MISSING_LISTED = 5


def validate_plan(plan: Plan, num_layers: int) -> None:
    """Raise ``PlanError`` naming the first broken rule; return ``None`` for a plan that can run."""
    check_plan_structure(plan, num_layers)
    # Imported here: the simulator's structural pass calls back into this module.
    from planner.simulator.program import compile_programs
    from planner.simulator.engine import execute

    execute(compile_programs(plan, costs=None), plan)


def check_plan_structure(plan: Plan, num_layers: int) -> None:
    """Every rule except dependency satisfiability (which needs a run of the dependency graph)."""
    if plan.num_devices < 1:
        raise PlanError(f"must be >= 1, got {plan.num_devices}", field="num_devices")
    if plan.num_microbatches < 1:
        raise PlanError(f"must be >= 1, got {plan.num_microbatches}", field="num_microbatches")
    check_partition(plan, num_layers)
    check_actions(plan)


def check_partition(plan: Plan, num_layers: int) -> None:
    if not plan.stages:
        raise PlanError("must hold at least one stage", field="stages")
    next_layer = 0
    for index, stage in enumerate(plan.stages):
        field = f"stages[{index}]"
        if not stage.layers:
            raise PlanError("must hold at least one layer", field=f"{field}.layers")
        if stage.layers[0] != next_layer:
            where = "the model's first layer" if index == 0 else f"where stages[{index - 1}] ends"
            raise PlanError(f"must start at layer {next_layer} ({where}), got {stage.layers[0]}",
                            field=f"{field}.layers")
        for position in range(1, len(stage.layers)):
            if stage.layers[position] != stage.layers[position - 1] + 1:
                raise PlanError(f"must be consecutive layer indices, got {stage.layers[position]} after "
                                f"{stage.layers[position - 1]}", field=f"{field}.layers[{position}]")
        next_layer = stage.layers[-1] + 1
        if not 0 <= stage.device < plan.num_devices:
            raise PlanError(f"must be a device in 0..{plan.num_devices - 1}, got {stage.device}",
                            field=f"{field}.device")
    if next_layer != num_layers:
        raise PlanError(f"the stages cover layers 0..{next_layer - 1} but the model has {num_layers} layers "
                        f"(0..{num_layers - 1})", field="stages")


def check_actions(plan: Plan) -> None:
    num_stages, num_microbatches = plan.num_stages, plan.num_microbatches
    if len(plan.actions) != plan.num_devices:
        raise PlanError(f"needs one action list per device ({plan.num_devices}), got {len(plan.actions)}",
                        field="actions")
    stage_device = [stage.device for stage in plan.stages]
    # One byte per (stage, micro-batch, kind), at the kind's code: has that action been seen yet.
    present = bytearray(num_stages * num_microbatches * len(ACTION_KINDS))
    for device, device_actions in enumerate(plan.actions):
        for position, action in enumerate(device_actions):
            stage, microbatch = action.stage, action.microbatch
            if not 0 <= stage < num_stages:
                raise PlanError(f"{action}: stage {stage} does not exist (the plan has {num_stages} stages)",
                                field=f"actions[{device}][{position}]")
            if not 0 <= microbatch < num_microbatches:
                raise PlanError(f"{action}: micro-batch {microbatch} does not exist (the plan has "
                                f"{num_microbatches} micro-batches)", field=f"actions[{device}][{position}]")
            if stage_device[stage] != device:
                raise PlanError(f"{action}: stage {stage} runs on device {stage_device[stage]}, not on "
                                f"device {device}", field=f"actions[{device}][{position}]")
            slot = (stage * num_microbatches + microbatch) * len(ACTION_KINDS) + action.type.code
            if present[slot]:
                raise PlanError(f"{action} appears twice (first at {_first_position(plan, action)})",
                                field=f"actions[{device}][{position}]")
            present[slot] = 1
    _check_completeness(plan, present)


def _check_completeness(plan: Plan, present: bytearray) -> None:
    missing: list[str] = []
    num_microbatches = plan.num_microbatches
    for stage in range(plan.num_stages):
        for microbatch in range(num_microbatches):
            base = (stage * num_microbatches + microbatch) * len(ACTION_KINDS)
            has_f, has_b, has_i, has_w = present[base:base + len(ACTION_KINDS)]
            if has_b and (has_i or has_w):
                raise PlanError(f"stage {stage} micro-batch {microbatch} has both a full backward "
                                f"({stage}B{microbatch}) and a split one (I/W); use one or the other",
                                field="actions")
            if not has_f:
                missing.append(f"{stage}F{microbatch}")
            if has_i and not has_w:
                missing.append(f"{stage}W{microbatch}")
            elif has_w and not has_i:
                missing.append(f"{stage}I{microbatch}")
            elif not (has_b or has_i):
                missing.append(f"{stage}B{microbatch} (or {stage}I{microbatch} + {stage}W{microbatch})")
    if missing:
        listed = ", ".join(missing[:MISSING_LISTED])
        more = f" and {len(missing) - MISSING_LISTED} more" if len(missing) > MISSING_LISTED else ""
        raise PlanError(f"every stage x micro-batch needs one F and one B (or one I and one W); missing: "
                        f"{listed}{more}", field="actions")


def _first_position(plan: Plan, action) -> str:
    for device, device_actions in enumerate(plan.actions):
        if action in device_actions:
            return f"actions[{device}][{device_actions.index(action)}]"
    return "?"
