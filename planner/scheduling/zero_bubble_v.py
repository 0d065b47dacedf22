"""ZB-V: two chunks per device in a V (device d holds stages d and 2p-1-d), backwards split into I and W.

The last stage sits on device 0 next to the first, so the backward turns around where the forward
ended. Phases follow torch's ``ScheduleZBVZeroBubble`` (the handcrafted schedule of the Zero Bubble paper,
section 6). It is written for at least 2p-1 micro-batches; with fewer, the extra ones are dropped.
"""

from planner.actions import ActionKind
from planner.placement import v_shape_placement
from planner.scheduling.program import PipelineSchedule, number_slots, require_count


def zero_bubble_v(num_devices: int, num_microbatches: int) -> PipelineSchedule:
    require_count(num_devices, "num_devices")
    require_count(num_microbatches, "num_microbatches")
    p = num_devices
    padded = max(2 * p - 1, num_microbatches)
    actions = []
    for device in range(p):
        down, up = device, 2 * p - 1 - device   # the chunk going down the V and the one coming back
        f_down, i_down, w_down = (down, ActionKind.F), (down, ActionKind.I), (down, ActionKind.W)
        f_up, i_up, w_up = (up, ActionKind.F), (up, ActionKind.I), (up, ActionKind.W)
        warmup = ([f_down] * (2 * (p - device) - 1)
                  + [f_up, f_down] * device
                  + [f_up, i_up, w_up] * (p - device))
        steady = ([f_down, i_down, w_down, f_up, i_up, w_up] * (padded - 2 * p + device + 1)
                  + [i_down, w_down, f_up, i_up, w_up] * (p - device - 1))
        cooldown = ([i_down, i_up] * device
                    + [i_down, w_down] * (p - device)
                    + [w_up] * device
                    + [w_down] * device)
        actions.append(number_slots(warmup + steady + cooldown, num_microbatches))
    return PipelineSchedule(v_shape_placement(p, 2), actions)
