"""Megatron's default partition: the same number of blocks per stage, embedding first, head last.

The leading embedding layers join the first stage and the trailing head layers the last stage; the
blocks between (decoder, mlp, ...) are split as evenly as possible, earlier stages taking one extra
block when they do not divide evenly.
"""

from __future__ import annotations

from planner.errors import SpecError
from planner.partition.balanced import check_stage_count, stages_from_sizes
from planner.profile import Profile


def body_bounds(profile: Profile) -> tuple[int, int]:
    """[start, end) of the layers between the leading embedding run and the trailing head run."""
    kinds = [layer.kind for layer in profile.layers]
    start = 0
    while start < len(kinds) and kinds[start] == "embedding":
        start += 1
    end = len(kinds)
    while end > start and kinds[end - 1] == "head":
        end -= 1
    return start, end


def partition_uniform(profile: Profile, num_stages: int) -> list[tuple[int, ...]]:
    check_stage_count(profile, num_stages)
    start, end = body_bounds(profile)
    blocks = end - start
    if num_stages > blocks:
        raise SpecError("num_stages", f"a uniform partition gives every stage at least one block, but "
                                      f"{profile.model} has {blocks} blocks between embedding and head for "
                                      f"{num_stages} stages; use the time-balanced partition")
    per_stage, extra = divmod(blocks, num_stages)
    sizes = [per_stage + (1 if stage < extra else 0) for stage in range(num_stages)]
    sizes[0] += start
    sizes[-1] += profile.num_layers - end
    return stages_from_sizes(sizes)
