"""Megatron's default partition: the same number of blocks per stage, embedding first, head last.

The leading embedding layers join the first stage and the trailing head layers the last stage; the
blocks between (decoder, mlp, ...) are split as evenly as possible, earlier stages taking one extra
block when they do not divide evenly.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.errors import SpecError
from planner.partition.balanced import check_stage_count, stages_from_sizes
from planner.profile import Profile


def body_bounds(kinds: Sequence[str]) -> tuple[int, int]:
    """[start, end) of the layers between the leading embedding run and the trailing head run."""
    start = 0
    while start < len(kinds) and kinds[start] == "embedding":
        start += 1
    end = len(kinds)
    while end > start and kinds[end - 1] == "head":
        end -= 1
    return start, end


def uniform_stage_layers(kinds: Sequence[str], num_stages: int) -> list[tuple[int, ...]]:
    """Megatron's split of layers of these kinds into ``num_stages`` stages (see the module docstring).

    The hybrid planner's closed form calls it for any stage count; with more stages than blocks, the last
    stages get none (``partition_uniform`` refuses that for a pipeline plan)."""
    start, end = body_bounds(kinds)
    per_stage, extra = divmod(end - start, num_stages)
    sizes = [per_stage + (1 if stage < extra else 0) for stage in range(num_stages)]
    sizes[0] += start
    sizes[-1] += len(kinds) - end
    return stages_from_sizes(sizes)


def partition_uniform(profile: Profile, num_stages: int) -> list[tuple[int, ...]]:
    check_stage_count(profile, num_stages)
    kinds = [layer.kind for layer in profile.layers]
    start, end = body_bounds(kinds)
    blocks = end - start
    if num_stages > blocks:
        raise SpecError("num_stages", f"a uniform partition gives every stage at least one block, but "
                                      f"{profile.model} has {blocks} blocks between embedding and head for "
                                      f"{num_stages} stages; use the time-balanced partition")
    return uniform_stage_layers(kinds, num_stages)
