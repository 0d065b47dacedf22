"""Partition for a placement: stage boundaries that balance the work each *device* gets.

Several stages can share a device, so balancing stages is not enough: the search starts from the
exact min-max split into stages (``planner.partition.contiguous``) and then shifts boundaries while
that lowers the heaviest device load (ties broken by the sum of squared loads, so the lighter devices
even out too).
"""

from __future__ import annotations

from functools import lru_cache

from planner.partition.contiguous import split_contiguous
from planner.layout import Layout

WEIGHT_RESOLUTION = 1_000_000  # integer weights in nanoseconds keep the contiguous split exact
CASCADE = 4                     # boundaries one rebalancing move may shift together


def balanced_starts(layer_weights: list[float], num_stages: int) -> tuple[int, ...]:
    return _balanced_starts(tuple(round(weight * WEIGHT_RESOLUTION) for weight in layer_weights), num_stages)


@lru_cache(maxsize=4096)
def _balanced_starts(weights: tuple[int, ...], num_stages: int) -> tuple[int, ...]:
    # Cached: the search asks for the same few stage counts of one profile again and again.
    sizes = split_contiguous(list(weights), num_stages)
    starts, position = [], 0
    for size in sizes:
        starts.append(position)
        position += size
    return tuple(starts)


def device_loads(layout: Layout, prefix: list[float], num_devices: int) -> list[float]:
    loads = [0.0] * num_devices
    for stage, device in enumerate(layout.stage_device):
        loads[device] += prefix[layout.stage_end(stage)] - prefix[layout.starts[stage]]
    return loads


def rebalance_devices(layout: Layout, prefix: list[float], num_devices: int, max_rounds: int = 10_000) -> Layout:
    """Shift boundaries while the (max load, sum of squared loads) pair drops.

    A move shifts a run of up to ``CASCADE`` consecutive boundaries by one layer in the same direction:
    one layer leaves a stage, each stage in between trades a layer at one end for one at the other, and
    the stage past the run gains one. Cascades pass load across a device that is itself balanced, which
    single shifts cannot do without first making that device the bottleneck.
    """
    starts = list(layout.starts)
    devices = layout.stage_device
    num_stages, num_layers = len(starts), layout.num_layers
    loads = device_loads(layout, prefix, num_devices)

    def objective(values: list[float]) -> tuple[float, float]:
        return max(values), sum(value * value for value in values)

    current = objective(loads)
    for _ in range(max_rounds):
        best = None
        for first in range(1, num_stages):
            for shift in (-1, 1):
                moved = list(loads)
                for last_boundary in range(first, min(first + CASCADE, num_stages)):
                    new_start = starts[last_boundary] + shift
                    stage_end = starts[last_boundary + 1] if last_boundary + 1 < num_stages else num_layers
                    if new_start <= starts[last_boundary - 1] or new_start >= stage_end:
                        break
                    # shift +1: the boundary layer joins the stage on the left; -1: the stage on the right.
                    layer = starts[last_boundary] if shift == 1 else new_start
                    weight = prefix[layer + 1] - prefix[layer]
                    moved[devices[last_boundary - 1]] += weight if shift == 1 else -weight
                    moved[devices[last_boundary]] -= weight if shift == 1 else -weight
                    value = objective(moved)
                    if value < current and (best is None or value < best[0]):
                        best = (value, first, last_boundary, shift, list(moved))
        if best is None:
            break
        current, first, last_boundary, shift, loads = best
        for boundary in range(first, last_boundary + 1):
            starts[boundary] += shift
    return layout.with_starts(tuple(starts))


def layer_devices(layout: Layout) -> list[int]:
    """The device of every layer."""
    devices: list[int] = []
    for stage in range(layout.num_stages):
        devices += [layout.stage_device[stage]] * (layout.stage_end(stage) - layout.starts[stage])
    return devices


def layout_from_layer_devices(devices: list[int]) -> Layout:
    """Stages are the maximal runs of consecutive layers on one device."""
    starts = [0] + [layer for layer in range(1, len(devices)) if devices[layer] != devices[layer - 1]]
    return Layout(tuple(starts), tuple(devices[start] for start in starts), len(devices))


def exchange_layers(layout: Layout, layer_work: list[float], num_devices: int, max_rounds: int = 10_000) -> Layout:
    """Move or swap single layers between devices while the heaviest device's load drops.

    Boundary shifts keep stages contiguous, so they cannot balance lumpy stacks: MiniMax-01's softmax
    layers every 8th position, a heavy LM head next to equal decoder layers. Here any layer may leave the
    heaviest device, alone or swapped for a lighter layer of another device, which may split stages
    into new ones; each step takes the exchange whose two new loads have the smallest maximum. Every
    step lowers the sum of squared loads, so it ends; the result never has a heavier device than
    ``layout``. The scheduler then decides whether the extra stages (and transfers) pay.
    """
    devices = layer_devices(layout)
    loads = [0.0] * num_devices
    for layer, device in enumerate(devices):
        loads[device] += layer_work[layer]
    for _ in range(max_rounds):
        heavy = max(range(num_devices), key=loads.__getitem__)
        best: tuple[float, int, int, int | None] | None = None
        own = [layer for layer, device in enumerate(devices) if device == heavy]
        for other in range(num_devices):
            if other == heavy:
                continue
            theirs = [layer for layer, device in enumerate(devices) if device == other]
            for layer in own:
                for swapped in [None, *theirs]:
                    delta = layer_work[layer] - (0.0 if swapped is None else layer_work[swapped])
                    if delta <= 0:
                        continue
                    worst = max(loads[heavy] - delta, loads[other] + delta)
                    if worst < loads[heavy] - 1e-9 and (best is None or worst < best[0]):
                        best = (worst, layer, other, swapped)
        if best is None:
            break
        _, layer, other, swapped = best
        delta = layer_work[layer] - (0.0 if swapped is None else layer_work[swapped])
        devices[layer] = other
        if swapped is not None:
            devices[swapped] = heavy
        loads[heavy] -= delta
        loads[other] += delta
    return layout_from_layer_devices(devices)
