"""Partitions: Megatron's uniform split, DeepSpeed's parameter balance, and a time-balanced optimum."""

import itertools
import random

import pytest

from planner.errors import SpecError
from planner.partition import PARTITIONS, partition_layers, partition_param_balanced, partition_time_balanced, \
    partition_uniform
from planner.partition.contiguous import split_contiguous, split_min_max

from sched_checks import decoder_profile, layer, make_profile


def _is_contiguous_cover(stages, num_layers):
    flat = [index for stage in stages for index in stage]
    return flat == list(range(num_layers)) and all(stage for stage in stages)


def test_uniform_gives_equal_blocks_with_embedding_first_and_head_last():
    profile = decoder_profile(8, with_ends=True)          # embed, 8 blocks, head
    stages = partition_uniform(profile, 4)
    assert stages == [(0, 1, 2), (3, 4), (5, 6), (7, 8, 9)]


def test_uniform_gives_earlier_stages_the_extra_blocks():
    stages = partition_uniform(decoder_profile(10), 4)
    assert [len(stage) for stage in stages] == [3, 3, 2, 2]


def test_uniform_refuses_more_stages_than_blocks():
    with pytest.raises(SpecError) as error:
        partition_uniform(decoder_profile(3, with_ends=True), 4)
    assert error.value.field == "num_stages" and "time-balanced" in error.value.reason


@pytest.mark.parametrize("name", list(PARTITIONS))
def test_every_partition_refuses_more_stages_than_layers(name):
    with pytest.raises(SpecError) as error:
        partition_layers(name, decoder_profile(3), 4)
    assert error.value.field == "num_stages"


def test_unknown_partition_names_the_field():
    with pytest.raises(SpecError) as error:
        partition_layers("random", decoder_profile(3), 2)
    assert error.value.field == "partition"


def _brute_force_bottleneck(weights, parts):
    best = None
    for cuts in itertools.combinations(range(1, len(weights)), parts - 1):
        bounds = (0, *cuts, len(weights))
        heaviest = max(sum(weights[bounds[i]:bounds[i + 1]]) for i in range(parts))
        best = heaviest if best is None else min(best, heaviest)
    return best


@pytest.mark.parametrize("weights, parts", [
    ([5, 1, 1, 1, 1, 5], 3), ([1, 2, 3, 4, 5, 6, 7, 8], 4), ([10, 0, 0, 0, 10], 2), ([3, 3, 3], 3),
    ([1, 100, 1, 1, 1, 1, 1, 100], 4), ([7], 1), ([0, 0, 0, 0], 2), ([9, 1, 1, 1, 1, 1, 1, 1, 1, 9], 5),
])
def test_split_contiguous_finds_the_smallest_heaviest_part(weights, parts):
    sizes = split_contiguous(weights, parts)
    assert len(sizes) == parts and all(size >= 1 for size in sizes) and sum(sizes) == len(weights)
    starts = list(itertools.accumulate([0] + sizes))
    heaviest = max(sum(weights[starts[i]:starts[i + 1]]) for i in range(parts))
    assert heaviest == _brute_force_bottleneck(weights, parts)


@pytest.mark.parametrize("seed", range(6))
def test_split_min_max_finds_the_cheapest_costliest_part_for_any_part_cost(seed):
    rng = random.Random(seed)
    items = rng.randint(2, 9)
    parts = rng.randint(1, items)
    weights = [rng.uniform(0, 5) for _ in range(items)]

    def cost(start, end):  # not additive: a size penalty, a charge on the first part, some spans barred
        if end - start == 3 and start % 2 and parts > 1:
            return float("inf")
        return sum(weights[start:end]) * (1 + 0.3 * (end - start)) + (2.0 if start == 0 else 0.0)

    sizes, value = split_min_max(items, parts, cost)
    starts = list(itertools.accumulate([0] + sizes))
    assert len(sizes) == parts and all(size >= 1 for size in sizes) and sum(sizes) == items
    assert value == pytest.approx(max(cost(starts[i], starts[i + 1]) for i in range(parts)))
    every = [max(cost(bounds[i], bounds[i + 1]) for i in range(parts))
             for cuts in itertools.combinations(range(1, items), parts - 1) for bounds in [(0, *cuts, items)]]
    assert value == pytest.approx(min(every))


def test_split_contiguous_evens_out_the_lighter_parts():
    # Bottleneck 10 is fixed by the first item; the rest should split evenly, not greedily.
    assert split_contiguous([10, 2, 2, 2, 2, 2, 2], 3) == [1, 3, 3]
    assert split_contiguous([0, 0, 0, 0], 2) == [2, 2]


def test_time_balanced_isolates_an_expensive_head():
    blocks = [layer(f"layers.{i}", "decoder", 1.0, 1.0, 1.0) for i in range(6)]
    profile = make_profile([layer("embed", "embedding", 0.1, 0.0, 0.1)] + blocks +
                           [layer("head", "head", 3.0, 3.0, 3.0)])
    stages = partition_time_balanced(profile, 4)
    assert _is_contiguous_cover(stages, 8)
    assert stages[-1] == (7,)                       # the 9 ms head alone
    assert max(sum(3.0 for i in stage if 1 <= i <= 6) for stage in stages) <= 9.0


def test_param_balanced_weighs_parameters_not_time():
    # Slow but small layers, then fast but large ones: parameters decide.
    small_slow = [layer(f"a{i}", "decoder", 5.0, 5.0, 5.0, params=1) for i in range(4)]
    large_fast = [layer(f"b{i}", "decoder", 0.1, 0.1, 0.1, params=100) for i in range(2)]
    profile = make_profile(small_slow + large_fast)
    assert partition_param_balanced(profile, 2) == [(0, 1, 2, 3, 4), (5,)]
    assert partition_time_balanced(profile, 2) == [(0, 1), (2, 3, 4, 5)]
