"""1F1B (PipeDream-Flush / Megatron): device d runs p-1-d warm-up forwards, then alternates one forward
and one backward, so at most p-d micro-batches hold activations at once."""

from planner.actions import ActionKind
from planner.placement import loop_placement
from planner.scheduling.program import PipelineSchedule, number_slots, require_count, warmup_steady_cooldown


def one_f_one_b(num_devices: int, num_microbatches: int) -> PipelineSchedule:
    require_count(num_devices, "num_devices")
    require_count(num_microbatches, "num_microbatches")
    actions = []
    for device in range(num_devices):
        warmup = min(num_microbatches, num_devices - 1 - device)
        program = warmup_steady_cooldown([(device, ActionKind.F)] * num_microbatches,
                                         [(device, ActionKind.B)] * num_microbatches, warmup)
        actions.append(number_slots(program))
    return PipelineSchedule(loop_placement(num_devices, num_devices), actions)
