"""A rank's place in one process group of a hybrid run (TP, CP, EP, ...), and where the group's collectives are
timed: the run's runtime sets ``clock`` and ``record``, which turns each into a ``collective`` event."""

from __future__ import annotations

from collections.abc import Callable

import torch

# (op, start mark, end mark, bytes) -> None
Recorder = Callable[[str, object, object, int], None]


class ParallelGroup:
    def __init__(self, group, rank: int, size: int, name: str, clock=None, record: Recorder | None = None):
        self.group, self.rank, self.size, self.name = group, rank, size, name
        self.clock, self.record = clock, record

    def timed(self, op: str, run: Callable[[], object], tensor: torch.Tensor | None = None):
        """``run()``, recorded as the collective ``op`` moving ``tensor``'s bytes (where a recorder is set)."""
        if self.record is None:
            return run()
        start = self.clock.mark()
        result = run()
        self.record(op, start, self.clock.mark(), 0 if tensor is None else tensor.numel() * tensor.element_size())
        return result
