"""The discrete-event core: run every device's program in order, as early as its dependencies allow.

An instruction starts at ``max(device free, dep_a done + lag_a, dep_b done + lag_b)``. Because each
device's order is fixed, these start times do not depend on the order in which the engine evaluates
devices, so the engine needs no event queue: it advances a device until its next instruction waits on
an unfinished slot, parks the device on that slot, and wakes it when the slot is filled (a ready stack).
Each instruction is examined once, plus once per dependency it had to wait for. When no device can
move and some have instructions left, the plan deadlocks and ``PlanError`` names every stuck device's
next action and what it waits for.

Each slot records one waiting device. Two devices can wait on the same slot only when one of them
is the device that fills it, parked on it while the filling action sits later in its own order; that
slot never fills, so which waiter is recorded cannot change the outcome (a deadlock either way).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import PlanError
from planner.plan import Plan
from planner.simulator.program import Programs


@dataclass(frozen=True)
class Execution:
    starts: list[list[float]]       # per device, the start time of each action in its order
    device_end: list[float]         # per device, when its last action ends
    exposed_comm: list[float]       # per device, idle time that only a transfer explains

    @property
    def makespan(self) -> float:
        return max(self.device_end, default=0.0)


def execute(programs: Programs, plan: Plan) -> Execution:
    device_programs = programs.devices
    num_devices = len(device_programs)
    done = [-1.0] * programs.num_slots
    done[programs.always_done] = 0.0
    waiter = [-1] * programs.num_slots
    cursor = [0] * num_devices
    device_free = [0.0] * num_devices
    exposed = [0.0] * num_devices
    starts: list[list[float]] = [[] for _ in range(num_devices)]
    ready_devices = list(range(num_devices - 1, -1, -1))
    pop, push = ready_devices.pop, ready_devices.append
    while ready_devices:
        device = pop()
        program = device_programs[device]
        length = len(program)
        position = cursor[device]
        free = device_free[device]
        idle_on_transfers = exposed[device]
        record_start = starts[device].append
        while position < length:
            duration, writes, dep_a, lag_a, dep_b, lag_b = program[position]
            done_a = done[dep_a]
            if done_a < 0.0:
                waiter[dep_a] = device
                break
            done_b = done[dep_b]
            if done_b < 0.0:
                waiter[dep_b] = device
                break
            ready_a = done_a + lag_a
            ready_b = done_b + lag_b
            start = ready_a if ready_a > ready_b else ready_b
            if start > free:
                # The device idles from `free` to `start`; what lies after the later of `free` and the
                # dependencies' own completion is time spent only on the wire.
                without_transfer = done_a if done_a > done_b else done_b
                if free > without_transfer:
                    without_transfer = free
                idle_on_transfers += start - without_transfer
            else:
                start = free
            record_start(start)
            free = start + duration
            done[writes] = free
            woken = waiter[writes]
            if woken >= 0:
                waiter[writes] = -1
                push(woken)
            position += 1
        cursor[device] = position
        device_free[device] = free
        exposed[device] = idle_on_transfers
    if any(cursor[device] < len(device_programs[device]) for device in range(num_devices)):
        raise _deadlock(programs, plan, cursor, done)
    return Execution(starts, device_free, exposed)


def _deadlock(programs: Programs, plan: Plan, cursor: list[int], done: list[float]) -> PlanError:
    blocked = []
    for device, program in enumerate(programs.devices):
        position = cursor[device]
        if position >= len(program):
            continue
        _, _, dep_a, _, dep_b, _ = program[position]
        waits_for = dep_a if done[dep_a] < 0.0 else dep_b
        blocked.append({"device": device, "position": position, "action": str(plan.actions[device][position]),
                        "waits_for": programs.describe_slot(waits_for, plan)})
    left = sum(len(program) - cursor[device] for device, program in enumerate(programs.devices))
    summary = "; ".join(f"device {entry['device']}: {entry['action']} waits for {entry['waits_for']}"
                        for entry in blocked)
    return PlanError(f"dependency deadlock, {left} action(s) can never run ({summary})", field="actions",
                     blocked=blocked)
