"""Phase-by-phase tuning: read the bottleneck off a candidate's timeline and adjust the matching phase.

``diagnose`` ranks three symptoms by the idle time they explain:

- ``imbalance``: the busiest device's excess over the mean load (partition is off);
- ``fill``: warm-up and cool-down idle (placement and stage count decide how fast the pipe fills);
- ``gaps``: the idle left in the steady state (the schedule: backward split, W filling, in-flight caps).

``moves`` proposes the neighbours for a phase: boundary shifts off the bottleneck device (partition),
other stage counts, shapes and re-homed stages (placement), policy changes (schedule). The search
verifies each with the scheduler and keeps a neighbour only when it is better (roll back otherwise).
"""

from __future__ import annotations

import random
from dataclasses import replace

from planner.layout import Layout
from planner.placement import SHAPES, shape_placement
from planner.search.evaluate import Candidate
from planner.search.list_scheduler import FORWARD_ORDERS, SchedulePolicy
from planner.search.partition import balanced_starts, rebalance_devices

PHASES = ("imbalance", "fill", "gaps")
INFLIGHT_SCALES = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)


def diagnose(candidate: Candidate) -> list[str]:
    """Phases ordered by how much idle time their symptom explains (largest first)."""
    schedule = candidate.schedule
    busy = schedule.device_busy
    makespan = schedule.makespan
    mean_busy = sum(busy) / len(busy)
    imbalance = (max(busy) - mean_busy) * len(busy)
    fill = sum(schedule.warmup_idle) + sum(schedule.cooldown_idle)
    gaps = max(makespan * len(busy) - sum(busy) - fill, 0.0)
    symptoms = {"imbalance": imbalance, "fill": fill, "gaps": gaps}
    return sorted(PHASES, key=lambda phase: -symptoms[phase])


def shifted(layout: Layout, boundary: int, shift: int) -> Layout | None:
    """Move the start of stage ``boundary`` by ``shift`` layers, keeping every stage non-empty."""
    starts = list(layout.starts)
    new_start = starts[boundary] + shift
    if new_start <= starts[boundary - 1] or new_start >= layout.stage_end(boundary):
        return None
    starts[boundary] = new_start
    return layout.with_starts(tuple(starts))


def partition_moves(candidate: Candidate, device_work: list[float]) -> list[Layout]:
    """Shift the boundaries of the busiest devices' stages by one or two layers, away from them."""
    layout = candidate.layout
    order = sorted(range(len(device_work)), key=lambda device: -device_work[device])
    moves: list[Layout] = []
    for device in order[:2]:
        for stage, owner in enumerate(layout.stage_device):
            if owner != device:
                continue
            for step in (1, 2):
                if stage > 0 and layout.stage_device[stage - 1] != device:
                    moves.append(shifted(layout, stage, step))        # give the first layers to the left
                if stage + 1 < layout.num_stages and layout.stage_device[stage + 1] != device:
                    moves.append(shifted(layout, stage + 1, -step))   # give the last layers to the right
    # The pipe's ends set the fill: a lighter first or last stage starts the backward sooner.
    if layout.num_stages > 1:
        moves += [shifted(layout, 1, -1), shifted(layout, layout.num_stages - 1, 1)]
    return [move for move in moves if move is not None]


def restructure(num_layers: int, num_devices: int, num_stages: int, shape: str,
                 work_prefix: list[float]) -> Layout:
    """A layout of ``num_stages`` stages in ``shape``, partitioned so device loads balance."""
    return rebalance_devices(_restructured(num_layers, num_devices, num_stages, shape, work_prefix), work_prefix,
                             num_devices)


def _restructured(num_layers: int, num_devices: int, num_stages: int, shape: str,
                  work_prefix: list[float]) -> Layout:
    weights = [work_prefix[index + 1] - work_prefix[index] for index in range(num_layers)]
    return Layout(balanced_starts(weights, num_stages), shape_placement(shape, num_stages, num_devices), num_layers)


def placement_moves(candidate: Candidate, num_devices: int, work_prefix: list[float], rng: random.Random,
                    limit: int) -> list[Layout]:
    """Up to ``limit`` of: other stage counts and shapes, and single stages re-homed onto a neighbour's
    device, drawn at random, each with its boundaries then rebalanced over the devices (only the drawn
    ones: rebalancing costs more than drawing)."""
    layout = candidate.layout
    num_layers, num_stages = layout.num_layers, layout.num_stages
    moves = []
    for stages in sorted({num_stages - num_devices, num_stages - 1, num_stages + 1, num_stages + num_devices}):
        if num_devices <= stages <= num_layers:
            for shape in SHAPES:
                moves.append(_restructured(num_layers, num_devices, stages, shape, work_prefix))
    used = set(layout.stage_device)
    for stage in range(num_stages):
        for neighbour in (stage - 1, stage + 1):
            if not 0 <= neighbour < num_stages:
                continue
            devices = list(layout.stage_device)
            devices[stage] = layout.stage_device[neighbour]
            # Keep every device busy: a re-home may not empty a device.
            if devices[stage] != layout.stage_device[stage] and set(devices) == used:
                moves.append(Layout(layout.starts, tuple(devices), num_layers))
    drawn = rng.sample(moves, min(len(moves), limit))
    return [rebalance_devices(move, work_prefix, num_devices) for move in drawn]


def policy_moves(policy: SchedulePolicy, num_devices: int, reserve: bool = True) -> list[SchedulePolicy]:
    """The schedule's neighbours: each knob of ``policy`` turned; the reserve knob only with ``reserve``."""
    moves = [replace(policy, split_backward=not policy.split_backward),
             replace(policy, backward_first=not policy.backward_first)]
    moves += [replace(policy, forward_order=order) for order in FORWARD_ORDERS if order != policy.forward_order]
    moves += [replace(policy, inflight_scale=scale) for scale in INFLIGHT_SCALES if scale != policy.inflight_scale]
    if reserve:
        moves.append(replace(policy, reserve="next" if policy.reserve == "all" else "all"))
    if policy.split_backward:
        moves += [replace(policy, weight_lag=lag) for lag in (num_devices, 2 * num_devices, 1_000_000)
                  if lag != policy.weight_lag]
    return moves


def perturbed(layout: Layout, rng: random.Random, num_devices: int, work_prefix: list[float]) -> Layout:
    """A random restart near ``layout``: a few boundaries shifted, then device loads rebalanced."""
    candidate = layout
    for _ in range(max(2, layout.num_stages // 4)):
        if candidate.num_stages < 2:
            break
        moved = shifted(candidate, rng.randrange(1, candidate.num_stages), rng.choice((-2, -1, 1, 2)))
        candidate = moved or candidate
    return rebalance_devices(candidate, work_prefix, num_devices)
