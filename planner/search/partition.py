"""Partition for a placement: stage boundaries that balance the work each *device* gets.

Several stages can share a device, so balancing stages is not enough: the search starts from the
exact min-max split into stages (``planner.partition.contiguous``) and then shifts boundaries while
that lowers the heaviest device load (ties broken by the sum of squared loads, so the lighter devices
even out too).
"""

from __future__ import annotations

from functools import lru_cache

from planner.partition.contiguous import split_contiguous
from planner.search.layouts import Layout

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
