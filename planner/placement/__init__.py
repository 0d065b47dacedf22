"""Placement: which device runs each pipeline stage (a stage→device map, one entry per stage)."""

from planner.placement.shapes import (
    SHAPES,
    explicit_placement,
    loop_placement,
    placement_shape,
    shape_placement,
    v_shape_placement,
)

__all__ = [
    "SHAPES", "explicit_placement", "loop_placement", "placement_shape", "shape_placement", "v_shape_placement",
]
