"""Split a sequence of non-negative integer weights into contiguous non-empty parts.

Exact dynamic programming in two passes: first the smallest possible heaviest part (the bottleneck),
then, among splits within that bottleneck, the one with the smallest sum of squared part weights (then of
squared part sizes), so the lighter parts come out as even as the heavy one allows. Integer weights keep
every comparison exact.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate


def _smallest_bottleneck(prefix: list[int], num_parts: int) -> int:
    n = len(prefix) - 1
    # best[j]: smallest heaviest part when splitting the first j items into the current number of parts.
    best = [prefix[j] for j in range(n + 1)]
    for parts in range(2, num_parts + 1):
        new_best = [0] * (n + 1)
        for j in range(parts, n + 1):
            # best[i] grows with i and the last part prefix[j] - prefix[i] shrinks, so the optimum split
            # sits where they cross: the first i (>= parts - 1) with best[i] >= last part, or the one before.
            lo, hi = parts - 1, j - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if best[mid] >= prefix[j] - prefix[mid]:
                    hi = mid
                else:
                    lo = mid + 1
            candidates = [max(best[i], prefix[j] - prefix[i]) for i in (lo - 1, lo) if parts - 1 <= i <= j - 1]
            new_best[j] = min(candidates)
        best = new_best
    return best[n]


def split_contiguous(weights: list[int], num_parts: int) -> list[int]:
    """Sizes of ``num_parts`` contiguous non-empty parts of ``weights`` minimising the heaviest part."""
    n = len(weights)
    if not 1 <= num_parts <= n:
        raise ValueError(f"cannot split {n} items into {num_parts} non-empty parts")
    prefix = [0, *accumulate(weights)]
    bottleneck = _smallest_bottleneck(prefix, num_parts)
    infinity = (float("inf"), float("inf"))
    # cost[parts][j]: (sum of squared weights, sum of squared sizes) of the best split of the first j items
    # into `parts` parts, each within the bottleneck; choice[parts][j] is where its last part starts.
    cost = [[infinity] * (n + 1) for _ in range(num_parts + 1)]
    choice = [[0] * (n + 1) for _ in range(num_parts + 1)]
    cost[0][0] = (0, 0)
    for parts in range(1, num_parts + 1):
        for j in range(parts, n - (num_parts - parts) + 1):
            # The last part [i, j) must weigh at most the bottleneck: i >= the first start that allows it.
            first_start = max(parts - 1, bisect_left(prefix, prefix[j] - bottleneck, 0, j))
            for i in range(first_start, j):
                previous = cost[parts - 1][i]
                if previous is infinity:
                    continue
                weight = prefix[j] - prefix[i]
                candidate = (previous[0] + weight * weight, previous[1] + (j - i) ** 2)
                if candidate < cost[parts][j]:
                    cost[parts][j] = candidate
                    choice[parts][j] = i
    sizes = []
    end = n
    for parts in range(num_parts, 0, -1):
        start = choice[parts][end]
        sizes.append(end - start)
        end = start
    return sizes[::-1]


def split_min_max(num_items: int, num_parts: int, part_cost) -> tuple[list[int], float]:
    """Sizes of ``num_parts`` contiguous non-empty parts of ``num_items`` items minimising the costliest part, for
    any ``part_cost(start, end)`` (not only a sum of weights, as ``split_contiguous`` needs), and that cost.
    Exact dynamic programming over every last part, ``O(parts x items^2)`` cost calls."""
    if not 1 <= num_parts <= num_items:
        raise ValueError(f"cannot split {num_items} items into {num_parts} non-empty parts")
    infinity = float("inf")
    best = [[infinity] * (num_items + 1) for _ in range(num_parts + 1)]
    choice = [[0] * (num_items + 1) for _ in range(num_parts + 1)]
    best[0][0] = 0.0
    for parts in range(1, num_parts + 1):
        for end in range(parts, num_items - (num_parts - parts) + 1):
            for start in range(parts - 1, end):
                if best[parts - 1][start] == infinity:
                    continue
                value = max(best[parts - 1][start], part_cost(start, end))
                if value < best[parts][end]:
                    best[parts][end], choice[parts][end] = value, start
    sizes, end = [], num_items
    for parts in range(num_parts, 0, -1):
        start = choice[parts][end]
        sizes.append(end - start)
        end = start
    return sizes[::-1], best[num_parts][num_items]
