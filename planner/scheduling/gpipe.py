"""GPipe: every device runs all forwards, then all backwards (peak memory: every micro-batch in flight)."""

from planner.actions import ActionKind
from planner.placement import loop_placement
from planner.scheduling.program import PipelineSchedule, number_slots, require_count


def gpipe(num_devices: int, num_microbatches: int) -> PipelineSchedule:
    require_count(num_devices, "num_devices")
    require_count(num_microbatches, "num_microbatches")
    actions = [number_slots([(device, ActionKind.F)] * num_microbatches
                            + [(device, ActionKind.B)] * num_microbatches)
               for device in range(num_devices)]
    return PipelineSchedule(loop_placement(num_devices, num_devices), actions)
