"""Building blocks every schedule generator shares.

A generator writes each device's program as *slots* — ``(stage, kind)`` pairs such as ``(2, ActionKind.F)``
— and ``number_slots`` hands out micro-batches: the k-th ``F`` slot of a stage runs micro-batch k of that stage.
That keeps a generator to the idea it encodes (how many warm-up forwards, which chunk next) instead of
micro-batch bookkeeping.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Iterable

from planner.actions import ActionKind
from planner.errors import SpecError
from planner.plan import Action

Slot = tuple[int, ActionKind]


@dataclass(frozen=True)
class PipelineSchedule:
    """A placement (device of every stage) and every device's compute order."""

    stage_devices: tuple[int, ...]
    actions: list[list[Action]]

    @property
    def num_stages(self) -> int:
        return len(self.stage_devices)


def number_slots(slots: Iterable[Slot], num_microbatches: int | None = None) -> list[Action]:
    """Give each slot the next micro-batch of its stage and type; drop slots past ``num_microbatches``."""
    next_microbatch: dict[Slot, int] = defaultdict(int)
    actions = []
    for slot in slots:
        microbatch = next_microbatch[slot]
        next_microbatch[slot] = microbatch + 1
        if num_microbatches is None or microbatch < num_microbatches:
            actions.append(Action(slot[0], slot[1], microbatch))
    return actions


def warmup_steady_cooldown(forwards: list[Slot], backwards: list[Slot], warmup: int) -> list[Slot]:
    """The 1F1B shape: ``warmup`` forwards, then one forward and one backward in turn, then the
    remaining backwards."""
    steady = len(forwards) - warmup
    program = list(forwards[:warmup])
    for forward, backward in zip(forwards[warmup:], backwards[:steady]):
        program += [forward, backward]
    program += backwards[steady:]
    return program


def split_backward(program: list[Slot], weight_lag: int) -> list[Slot]:
    """Zero-bubble split: every full backward B becomes its input part I; the weight part W of a
    backward runs right after the I ``weight_lag`` backwards later (W has no consumer, so it can wait and
    fill what would otherwise be bubble); the W still owed at the end run last, in order."""
    full, input_part, weight_part = ActionKind.B, ActionKind.I, ActionKind.W
    split: list[Slot] = []
    owed_weights: deque[int] = deque()
    for stage, kind in program:
        if kind is not full:
            split.append((stage, kind))
            continue
        split.append((stage, input_part))
        owed_weights.append(stage)
        if len(owed_weights) > weight_lag:
            split.append((owed_weights.popleft(), weight_part))
    split.extend((stage, weight_part) for stage in owed_weights)
    return split


def require_count(value: int, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(field, f"must be an integer >= 1, got {value!r}")
