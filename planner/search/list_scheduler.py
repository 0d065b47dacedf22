"""A priority-driven list scheduler: per-device action orders for any partition and placement.

It is an event-driven simulation of the pipeline that decides as it goes. Whenever a device can start
something, it looks at the actions whose dependencies are met (per stage: the next F, the next B or I,
the next W, each in micro-batch order) and starts the one the policy ranks first. Decisions are taken
in global start-time order (the device whose next start is earliest goes first), so when a device
decides, every action that could become ready before its start is already known: an undecided
dependency starts no earlier than that start and ends later. Each action therefore starts at
``max(device free, dependencies done + transfer lag)``, the simulator's rule, and the schedule's
makespan equals ``planner.simulator.simulate`` of the resulting orders (the tests check this).

Memory is respected while scheduling: a forward may start only while the stage's in-flight count is
under its limit, and a micro-batch enters a device (its forward on the device's first stage) only if
the activations it will hold on *all* the device's stages fit the byte cap next to what is held and
already promised to the micro-batches inside. Promising up front keeps a device from filling its cap
on an early stage and then starving its own later stage (which would deadlock a V or a loop). If every
device is still blocked by its caps (a cap too small for even one micro-batch), the earliest blocked
forward is let through and counted in ``cap_overrides``; the caller rejects a schedule whose peak then
breaks a hard limit.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from planner.actions import ActionKind
from planner.limits import MAX_MICROBATCHES

INFINITY = float("inf")

# Action kinds inside the scheduler are their integer codes (``planner.actions.ACTION_KINDS[code]`` is the kind).
FORWARD, FULL_BACKWARD, INPUT_BACKWARD, WEIGHT_BACKWARD = (ActionKind.F.code, ActionKind.B.code, ActionKind.I.code,
                                                           ActionKind.W.code)

FORWARD_ORDERS = ("deep", "old")


# An in-flight scale no stage's limit can bind: every stage may hold every micro-batch (memory permitting)
UNBOUNDED_INFLIGHT = float(MAX_MICROBATCHES)


@dataclass(frozen=True, order=True)
class SchedulePolicy:
    """The knobs the search turns.

    - ``split_backward``: run I and W separately (zero-bubble style) instead of one B;
    - ``backward_first``: a ready B/I beats a ready F (1F1B-like); otherwise F goes first within caps;
    - ``forward_order``: among ready forwards, ``deep`` prefers the latest stage (pushes a micro-batch
      through: less memory, backwards sooner), ``old`` the oldest micro-batch (breadth first);
    - ``inflight_scale``: a stage s may hold ``ceil(scale x (stages from s to the end))`` micro-batches,
      1F1B's warm-up depth generalised to any placement; ``UNBOUNDED_INFLIGHT`` none but memory's (a deep pipeline
      whose bottleneck is near its end must let the stages before it run ahead: GPipe's fill);
    - ``weight_lag``: deferred W's a device may owe before W outranks a forward (memory is freed at W);
    - ``reserve``: what a micro-batch entering a device must find room for under the byte cap. ``all``: its
      activations on every stage of the device, beside what is held and promised to every micro-batch inside (no
      device can starve its own later stage). ``next``: its activations on every stage beside what is held only,
      so that one micro-batch's later stages always have room, not every one's: more micro-batches in flight on a
      device with several stages, at the risk of a deadlock, which the scheduler breaks by letting a forward
      through (``cap_overrides``), and the search then rejects for its peak.
    """

    split_backward: bool = False
    backward_first: bool = True
    forward_order: str = "deep"
    inflight_scale: float = 1.0
    weight_lag: int = 1_000_000
    reserve: str = "all"

    def describe(self) -> str:
        backward = "I+W" if self.split_backward else "B"
        first = "B-first" if self.backward_first else "F-first"
        lag = "" if self.weight_lag >= 1_000_000 else f", W lag <= {self.weight_lag}"
        reserve = "" if self.reserve == "all" else f", reserve {self.reserve}"
        inflight = "unbounded" if self.inflight_scale >= UNBOUNDED_INFLIGHT else f"x{self.inflight_scale:g}"
        return f"{backward}, {first}, {self.forward_order} F, in-flight {inflight}{lag}{reserve}"

    def to_dict(self) -> dict:
        return {"split_backward": self.split_backward, "backward_first": self.backward_first,
                "forward_order": self.forward_order, "inflight_scale": self.inflight_scale,
                "weight_lag": self.weight_lag if self.weight_lag < 1_000_000 else None, "reserve": self.reserve}


@dataclass(frozen=True)
class StageTimes:
    """Per-stage inputs of one schedule: durations, transfer lags, activation bytes and placement."""

    forward: tuple[float, ...]
    backward_input: tuple[float, ...]
    backward_weight: tuple[float, ...]
    forward_lag: tuple[float, ...]      # into stage s from s-1
    gradient_lag: tuple[float, ...]     # into stage s from s+1
    activation_bytes: tuple[int, ...]
    stage_device: tuple[int, ...]
    num_devices: int


@dataclass
class Schedule:
    """The decided orders plus what the search needs to know about them."""

    orders: list[list[tuple[int, int, int]]]   # per device: (stage, type code, micro-batch)
    starts: list[list[float]]
    makespan: float
    device_busy: list[float]
    device_end: list[float]
    warmup_idle: list[float]       # idle before the device's first backward-type action
    cooldown_idle: list[float]     # idle after its last forward (or first backward, if later)
    activation_peak: list[int]
    cap_overrides: int


@dataclass(frozen=True)
class Abandoned:
    """A schedule given up part-way: it was proven to end no earlier than ``give_up_at``."""

    give_up_at: float
    committed: int          # actions scheduled before giving up


def inflight_limits(num_stages: int, scale: float) -> list[int]:
    return [max(1, int(-(-scale * (num_stages - stage) // 1))) for stage in range(num_stages)]


@dataclass(frozen=True)
class _Shape:
    """What one schedule's steps derive once from its inputs: each device's stages, caps and limits."""

    backward: tuple[float, ...]            # B, or I where the backward is split
    limit: list[int]                       # in-flight micro-batches per stage
    cap: list[float]                       # activation bytes per device
    device_stages: list[list[int]]
    entry_stage: list[int]                 # each device's first stage (-1: none)
    bytes_per_microbatch: list[int]        # activations one micro-batch takes on all of a device's stages

    @classmethod
    def of(cls, times: StageTimes, policy: SchedulePolicy, activation_cap: list[float] | None) -> _Shape:
        device_stages: list[list[int]] = [[] for _ in range(times.num_devices)]
        for stage, device in enumerate(times.stage_device):
            device_stages[device].append(stage)
        return cls(
            backward=times.backward_input if policy.split_backward else tuple(
                i + w for i, w in zip(times.backward_input, times.backward_weight)),
            limit=inflight_limits(len(times.forward), policy.inflight_scale),
            cap=activation_cap if activation_cap is not None else [INFINITY] * times.num_devices,
            device_stages=device_stages, entry_stage=[stages[0] if stages else -1 for stages in device_stages],
            bytes_per_microbatch=[sum(times.activation_bytes[stage] for stage in stages) for stages in device_stages])


@dataclass
class _Progress:
    """The schedule decided so far: lists by stage, by ``stage * m + microbatch`` or by device, shared by the steps."""

    forward_done: list[float]
    backward_done: list[float]
    next_forward: list[int]
    next_backward: list[int]
    next_weight: list[int]
    in_flight: list[int]
    held: list[int]
    promised: list[int]            # activations the micro-batches inside a device will still take there
    peak: list[int]
    owed_weights: list[int]
    free: list[float]
    busy: list[float]
    work_left: list[float]
    first_backward_start: list[float]
    last_forward_end: list[float]
    orders: list[list[tuple[int, int, int]]]
    starts: list[list[float]]

    @classmethod
    def start(cls, times: StageTimes, m: int, shape: _Shape, split: bool) -> _Progress:
        num_stages, num_devices = len(times.forward), times.num_devices
        work_left = [0.0] * num_devices
        for stage, device in enumerate(times.stage_device):
            work_left[device] += (times.forward[stage] + shape.backward[stage]
                                  + (times.backward_weight[stage] if split else 0.0)) * m
        return cls(forward_done=[0.0] * (num_stages * m), backward_done=[0.0] * (num_stages * m),
                   next_forward=[0] * num_stages, next_backward=[0] * num_stages, next_weight=[0] * num_stages,
                   in_flight=[0] * num_stages, held=[0] * num_devices, promised=[0] * num_devices,
                   peak=[0] * num_devices, owed_weights=[0] * num_devices, free=[0.0] * num_devices,
                   busy=[0.0] * num_devices, work_left=work_left, first_backward_start=[INFINITY] * num_devices,
                   last_forward_end=[0.0] * num_devices, orders=[[] for _ in range(num_devices)],
                   starts=[[] for _ in range(num_devices)])


def list_schedule(times: StageTimes, num_microbatches: int, policy: SchedulePolicy,
                  activation_cap: list[float] | None = None, give_up_at: float = INFINITY) -> Schedule | Abandoned:
    """Schedule every F, B (or I and W) of every stage and micro-batch; see the module docstring.

    With ``give_up_at``, the schedule stops (returning ``Abandoned``) as soon as it is sure to end at or
    after that time: a device that has just become free at ``t`` with ``w`` ms of its actions still to
    run ends no earlier than ``t + w``, whatever it does next. The search passes the makespan a
    neighbour must beat, so hopeless neighbours cost part of a schedule rather than all of it.
    """
    num_stages, num_devices, m = len(times.forward), times.num_devices, num_microbatches
    stage_device, last, split = times.stage_device, num_stages - 1, policy.split_backward
    shape = _Shape.of(times, policy, activation_cap)
    progress = _Progress.start(times, m, shape, split)
    choose = _chooser(times, m, policy, shape, progress)
    commit = _committer(times, m, shape, progress)
    next_forward, next_backward, work_left = progress.next_forward, progress.next_backward, progress.work_left

    # A device's decision depends only on its own stages and their neighbours' progress; every commit
    # that changes those refreshes it, so a decision still current when popped is still right.
    decided: list = [None] * num_devices
    version = [0] * num_devices
    heap: list[tuple[float, int, int]] = []

    def refresh(device: int) -> None:
        version[device] += 1
        decision = decided[device] = choose(device, False)
        if decision is not None:
            heapq.heappush(heap, (decision[0], device, version[device]))

    for device in range(num_devices):
        refresh(device)
    overrides = 0
    for committed in range(num_stages * m * (3 if split else 2)):
        while heap and heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)
        if heap:
            device = heapq.heappop(heap)[1]
            start, kind, stage, microbatch = decided[device]
        else:
            # Every device is blocked by its caps: let the earliest blocked forward through.
            decisions = [(decision, device) for device in range(num_devices)
                         if (decision := choose(device, True)) is not None]
            (start, kind, stage, microbatch), device = min(decisions)
            overrides += 1
        if commit(device, start, kind, stage, microbatch) + work_left[device] >= give_up_at * (1 + 1e-9):
            return Abandoned(give_up_at, committed + 1)    # (the margin is for float sums)
        refresh(device)
        # Only the neighbour stage waiting for exactly this micro-batch gains a candidate.
        if kind == FORWARD:
            if stage != last and stage_device[stage + 1] != device and next_forward[stage + 1] == microbatch:
                refresh(stage_device[stage + 1])
        elif kind != WEIGHT_BACKWARD:
            if stage and stage_device[stage - 1] != device and next_backward[stage - 1] == microbatch:
                refresh(stage_device[stage - 1])
    return _finished(times, shape, progress, overrides)


def _chooser(times: StageTimes, m: int, policy: SchedulePolicy, shape: _Shape, progress: _Progress):
    """``choose(device, ignore_caps)``: the action ``device`` starts next and when, or None."""
    num_stages = len(times.forward)
    last, split = num_stages - 1, policy.split_backward
    forward_lag, gradient_lag, limit, cap = times.forward_lag, times.gradient_lag, shape.limit, shape.cap
    device_stages, entry_stage = shape.device_stages, shape.entry_stage
    bytes_per_microbatch = shape.bytes_per_microbatch
    forward_done, backward_done, free = progress.forward_done, progress.backward_done, progress.free
    next_forward, next_backward, next_weight = progress.next_forward, progress.next_backward, progress.next_weight
    in_flight, held, promised = progress.in_flight, progress.held, progress.promised
    owed_weights = progress.owed_weights
    deep_first, weight_lag = policy.forward_order == "deep", policy.weight_lag
    reserve_all, stage_bytes = policy.reserve == "all", times.activation_bytes
    # Priorities are single integers (smaller runs first): a class times ``span`` plus a tie-break that
    # orders by micro-batch and stage, so comparing candidates needs no tuples.
    span = (num_stages + 1) * (m + 1)
    forward_class = (2 if policy.backward_first else 1) * span
    backward_class = (1 if policy.backward_first else 2) * span
    backward_kind = INPUT_BACKWARD if split else FULL_BACKWARD

    def choose(device: int, ignore_caps: bool):
        candidates = []
        add = candidates.append
        earliest = INFINITY
        admits = ignore_caps or (held[device] + (promised[device] if reserve_all else 0) + bytes_per_microbatch[device]
                                 <= cap[device])
        device_entry = entry_stage[device]
        for stage in device_stages[device]:
            base = stage * m
            microbatch = next_forward[stage]
            if microbatch < m and (stage == 0 or next_forward[stage - 1] > microbatch) and (
                    ignore_caps or (in_flight[stage] < limit[stage] and (
                        admits if stage == device_entry
                        else reserve_all or held[device] + stage_bytes[stage] <= cap[device]))):
                ready = forward_done[base - m + microbatch] + forward_lag[stage] if stage else 0.0
                if ready < earliest:
                    earliest = ready
                add((ready, forward_class + ((last - stage) * (m + 1) + microbatch if deep_first
                                             else microbatch * (num_stages + 1) + last - stage),
                     FORWARD, stage, microbatch))
            microbatch = next_backward[stage]
            if microbatch < next_forward[stage] and (stage == last or next_backward[stage + 1] > microbatch):
                ready = forward_done[base + microbatch]
                if stage != last:
                    from_above = backward_done[base + m + microbatch] + gradient_lag[stage]
                    if from_above > ready:
                        ready = from_above
                if ready < earliest:
                    earliest = ready
                add((ready, backward_class + microbatch * (num_stages + 1) + last - stage,
                     backward_kind, stage, microbatch))
            if split:
                microbatch = next_weight[stage]
                if microbatch < next_backward[stage]:
                    ready = backward_done[base + microbatch]
                    if ready < earliest:
                        earliest = ready
                    add((ready, (0 if owed_weights[device] > weight_lag else 3 * span)
                         + microbatch * (num_stages + 1) + stage, WEIGHT_BACKWARD, stage, microbatch))
        if not candidates:
            return None
        device_free = free[device]
        start = earliest if earliest > device_free else device_free
        best = None
        for candidate in candidates:
            if candidate[0] <= start and (best is None or candidate[1] < best[1]):
                best = candidate
        return start, best[2], best[3], best[4]

    return choose


def _committer(times: StageTimes, m: int, shape: _Shape, progress: _Progress):
    """``commit(device, start, kind, stage, microbatch)``: run the chosen action, return when the device is free."""
    forward, weight, backward = times.forward, times.backward_weight, shape.backward
    stage_bytes = times.activation_bytes
    entry_stage, bytes_per_microbatch = shape.entry_stage, shape.bytes_per_microbatch
    forward_done, backward_done, free = progress.forward_done, progress.backward_done, progress.free
    next_forward, next_backward, next_weight = progress.next_forward, progress.next_backward, progress.next_weight
    in_flight, held, promised = progress.in_flight, progress.held, progress.promised
    owed_weights = progress.owed_weights
    peak, busy, work_left = progress.peak, progress.busy, progress.work_left
    orders, starts = progress.orders, progress.starts
    first_backward_start, last_forward_end = progress.first_backward_start, progress.last_forward_end

    def commit(device: int, start: float, kind: int, stage: int, microbatch: int) -> float:
        key = stage * m + microbatch
        if kind == FORWARD:
            duration = forward[stage]
            forward_done[key] = start + duration
            next_forward[stage] += 1
            in_flight[stage] += 1
            held[device] += stage_bytes[stage]
            if stage == entry_stage[device]:
                promised[device] += bytes_per_microbatch[device] - stage_bytes[stage]
            else:
                promised[device] -= stage_bytes[stage]
            if held[device] > peak[device]:
                peak[device] = held[device]
            last_forward_end[device] = start + duration
        elif kind == WEIGHT_BACKWARD:
            duration = weight[stage]
            next_weight[stage] += 1
            in_flight[stage] -= 1
            held[device] -= stage_bytes[stage]
            owed_weights[device] -= 1
        else:
            duration = backward[stage]
            backward_done[key] = start + duration
            next_backward[stage] += 1
            if kind == FULL_BACKWARD:
                in_flight[stage] -= 1
                held[device] -= stage_bytes[stage]
            else:
                owed_weights[device] += 1
        if kind != FORWARD and start < first_backward_start[device]:
            first_backward_start[device] = start
        end = free[device] = start + duration
        busy[device] += duration
        work_left[device] -= duration
        orders[device].append((stage, kind, microbatch))
        starts[device].append(start)
        return end

    return commit


def _finished(times: StageTimes, shape: _Shape, progress: _Progress, overrides: int) -> Schedule:
    """The whole schedule, with each device's idle time split into warm-up and cool-down."""
    makespan = max(progress.free)
    warmup_idle, cooldown_idle = [], []
    for device in range(times.num_devices):
        actions = list(zip(progress.orders[device], progress.starts[device]))
        warmup_end = min(progress.first_backward_start[device], makespan)
        busy_before = sum(duration_of(times, shape.backward, times.backward_weight, action)
                          for action, start in actions if start < warmup_end)
        warmup_idle.append(max(warmup_end - busy_before, 0.0))
        cooldown_start = max(progress.last_forward_end[device], warmup_end)
        busy_after = sum(duration_of(times, shape.backward, times.backward_weight, action)
                         for action, start in actions if start >= cooldown_start)
        cooldown_idle.append(max(makespan - cooldown_start - busy_after, 0.0))
    return Schedule(orders=progress.orders, starts=progress.starts, makespan=makespan, device_busy=progress.busy,
                    device_end=progress.free, warmup_idle=warmup_idle, cooldown_idle=cooldown_idle,
                    activation_peak=progress.peak, cap_overrides=overrides)


def duration_of(times: StageTimes, backward: tuple[float, ...], weight: tuple[float, ...],
                action: tuple[int, int, int]) -> float:
    stage, kind, _ = action
    if kind == FORWARD:
        return times.forward[stage]
    if kind == WEIGHT_BACKWARD:
        return weight[stage]
    return backward[stage]
