"""Placement: which device runs each pipeline stage (a stage→device map, one entry per stage)."""

from planner.placement.shapes import (
    explicit_placement,
    loop_placement,
    placement_shape,
    v_shape_placement,
)

__all__ = ["explicit_placement", "loop_placement", "placement_shape", "v_shape_placement"]
