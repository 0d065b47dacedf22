"""Per-device time accounting over an execution: busy time, the bubble and its phases, communication.

Definitions (all per device d, the iteration running from 0 to the makespan T over all devices):

- busy: the sum of d's action compute times; bubble: ``T - busy`` (time inside the iteration d does not
  compute: idle, or handling messages when the cluster's links charge an overhead per message).
- message handling: the part of the bubble d spends on the messages it sends and receives.
- warm-up bubble: idle time before d's first backward-type action (B, I or W) starts; the whole
  iteration when d runs no backward.
- cool-down bubble: idle time after ``max(end of d's last F, start of its first backward)`` until T.
- steady bubble: the idle time in between; warm-up + steady + cool-down = bubble exactly.
- exposed communication: the part of d's idle time that would vanish if transfers were free while
  every dependency still finished when it did; i.e. before each action, ``start - max(device free,
  dependencies done)`` when the action had to wait.
- overlapped communication: the transfer time into d's actions that did not delay them
  (incoming transfer time - exposed).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.simulator.engine import Execution
from planner.simulator.program import Programs


@dataclass(frozen=True)
class DeviceTime:
    busy_ms: float
    warmup_bubble_ms: float
    steady_bubble_ms: float
    cooldown_bubble_ms: float
    exposed_comm_ms: float
    overlapped_comm_ms: float
    message_ms: float = 0.0

    @property
    def bubble_ms(self) -> float:
        return self.warmup_bubble_ms + self.steady_bubble_ms + self.cooldown_bubble_ms


def device_times(programs: Programs, execution: Execution) -> list[DeviceTime]:
    makespan = execution.makespan
    first_backward_slot = programs.num_stages * programs.num_microbatches
    times = []
    for device, program in enumerate(programs.devices):
        starts = execution.starts[device]
        durations = [instruction[0] for instruction in program]
        compute = programs.compute_time(device)
        count = len(program)
        first_backward = next((index for index, instruction in enumerate(program)
                               if instruction[1] >= first_backward_slot), count)
        last_forward = next((index for index in range(count - 1, -1, -1)
                             if program[index][1] < first_backward_slot), -1)
        warmup_end = starts[first_backward] if first_backward < count else makespan
        last_forward_end = starts[last_forward] + durations[last_forward] if last_forward >= 0 else 0.0
        if last_forward_end >= warmup_end:
            cooldown_start, cooldown_first = last_forward_end, last_forward + 1
        else:
            cooldown_start, cooldown_first = warmup_end, first_backward
        busy_before_warmup_end = sum(compute[:first_backward])
        busy_steady = sum(compute[first_backward:cooldown_first])
        busy_cooldown = sum(compute[cooldown_first:])
        incoming_transfer = sum(instruction[3] + instruction[5] for instruction in program)
        exposed = execution.exposed_comm[device]
        times.append(DeviceTime(
            busy_ms=busy_before_warmup_end + busy_steady + busy_cooldown,
            warmup_bubble_ms=warmup_end - busy_before_warmup_end,
            steady_bubble_ms=(cooldown_start - warmup_end) - busy_steady,
            cooldown_bubble_ms=(makespan - cooldown_start) - busy_cooldown,
            exposed_comm_ms=exposed,
            overlapped_comm_ms=max(incoming_transfer - exposed, 0.0),
            message_ms=sum(durations) - sum(compute),
        ))
    return times
