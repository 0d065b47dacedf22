"""Balanced partitions: contiguous stages that minimise the heaviest stage under some per-layer weight."""

from __future__ import annotations

from planner.errors import SpecError
from planner.partition.contiguous import split_contiguous
from planner.profile import Profile

NANOSECONDS_PER_MS = 1_000_000


def check_stage_count(profile: Profile, num_stages: int) -> None:
    if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1:
        raise SpecError("num_stages", f"must be an integer >= 1, got {num_stages!r}")
    if num_stages > profile.num_layers:
        raise SpecError("num_stages", f"{num_stages} stages need at least {num_stages} layers; "
                                      f"the profile of {profile.model} has {profile.num_layers}")


def stages_from_sizes(sizes: list[int]) -> list[tuple[int, ...]]:
    stages, start = [], 0
    for size in sizes:
        stages.append(tuple(range(start, start + size)))
        start += size
    return stages


def partition_param_balanced(profile: Profile, num_stages: int) -> list[tuple[int, ...]]:
    """DeepSpeed's ``partition_method="parameters"``: balance parameter bytes across stages."""
    check_stage_count(profile, num_stages)
    weights = [layer.param_bytes for layer in profile.layers]
    return stages_from_sizes(split_contiguous(weights, num_stages))


def partition_time_balanced(profile: Profile, num_stages: int) -> list[tuple[int, ...]]:
    """Mist-like: minimise the slowest stage's forward + backward time (what bounds 1F1B's steady state)."""
    check_stage_count(profile, num_stages)
    weights = [round((layer.forward + layer.backward) * NANOSECONDS_PER_MS) for layer in profile.layers]
    return stages_from_sizes(split_contiguous(weights, num_stages))
