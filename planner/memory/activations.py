"""Activations: what one micro-batch keeps per stage, and how many micro-batches the schedule keeps in flight.

A layer's activations for one micro-batch are held from the start of its forward until the end of that
micro-batch's backward of the layer: the end of ``B``, or of ``W`` when the backward is split (``I`` keeps them:
the weight gradient still needs the inputs). A device holds the activations of every micro-batch in flight on
every stage it runs. Since a device runs its actions one after another, the order alone fixes the peak: it is
reached at the start of some forward, so the peak is a scan over the device's order (``activation_peaks``) and
does not depend on timings. Without an order (the hybrid planner's closed form), Megatron's schedules fix the
count (``in_flight_activation_bytes``). Temporary buffers inside one action (attention workspaces, gradient
scratch) are not counted here (``planner.memory.buffers``).
"""

from __future__ import annotations

from planner.plan import Plan


def stage_activation_bytes(plan: Plan, layer_activation_bytes: list[float]) -> list[float]:
    """Activation bytes one micro-batch holds on each stage while it is in flight there."""
    return [sum(layer_activation_bytes[index] for index in stage.layers) for stage in plan.stages]


def activation_peaks(plan: Plan, stage_activation: list[float]) -> list[float]:
    """Peak in-flight activation bytes per device, scanning each device's order (see module doc)."""
    peaks = []
    for device_actions in plan.actions:
        held = peak = 0
        for action in device_actions:
            action_type = action.type
            if action_type.takes_activations:
                held += stage_activation[action.stage]
                if held > peak:
                    peak = held
            elif action_type.frees_activations:
                held -= stage_activation[action.stage]
        peaks.append(peak)
    return peaks


def in_flight_activation_bytes(per_microbatch: float, *, rank: int, pp: int, num_microbatches: int,
                               chunks: int) -> float:
    """Peak activations of pipeline rank ``rank`` under Megatron's 1F1B (``chunks`` 1) or interleaved 1F1B,
    ``per_microbatch`` being one micro-batch's activations over all the rank's chunks.

    1F1B's warm-up keeps ``pp - rank`` micro-batches; the interleaved schedule's keeps
    ``2 (pp - rank - 1) + (chunks - 1) pp + 1`` chunk-micro-batches (Narayanan et al. 2021; Megatron's
    ``get_num_microbatches_to_warmup`` plus the one in its steady state), each ``1/chunks`` of the rank's layers.
    """
    if chunks == 1:
        return min(num_microbatches, pp - rank) * per_microbatch
    warm_up = 2 * (pp - rank - 1) + (chunks - 1) * pp + 1
    return min(num_microbatches * chunks, warm_up) * per_microbatch / chunks


def activation_curve(plan: Plan, stage_activation: list[float], device: int, starts: list[float],
                     ends: list[float]) -> list[tuple[float, float]]:
    """Step curve ``(time_ms, held_bytes)`` of one device's activations, given its actions' timings.

    Activations are taken at an F's start and released at the end of the B or W that frees them.
    """
    held = 0
    curve = [(0.0, 0)]
    for action, start, end in zip(plan.actions[device], starts, ends):
        if action.type.takes_activations:
            held += stage_activation[action.stage]
            curve.append((start, held))
        elif action.type.frees_activations:
            held -= stage_activation[action.stage]
            curve.append((end, held))
    return curve
