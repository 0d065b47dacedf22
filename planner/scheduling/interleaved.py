"""Megatron's interleaved 1F1B: each device holds ``chunks`` model chunks (stage d, d+p, d+2p, ... on
device d) and works through micro-batches in groups, one group per chunk in turn — depth first.

Group size follows torch's ``ScheduleInterleaved1F1B``: ``rounds = max(1, m // p)`` groups of ``m / rounds``
micro-batches, so m need not be a multiple of p, but must be a multiple of the number of rounds.
The zero-bubble variant (torch's ``ScheduleInterleavedZeroBubble``, ZB-H1 when chunks = 1) shares the
shape with a shorter warm-up and split backwards.
"""

from planner.actions import ActionKind
from planner.errors import SpecError
from planner.placement import loop_placement
from planner.scheduling.program import (
    PipelineSchedule,
    Slot,
    number_slots,
    require_count,
    split_backward,
    warmup_steady_cooldown,
)


def microbatch_group_size(num_devices: int, num_microbatches: int) -> int:
    rounds = max(1, num_microbatches // num_devices)
    if num_microbatches % rounds:
        raise SpecError("num_microbatches", f"interleaved schedules need a multiple of the number of rounds "
                                            f"max(1, m // p) = {rounds}; got {num_microbatches}")
    return num_microbatches // rounds


def _chunk_order(chunk_stages: list[int], group_size: int, num_microbatches: int, kind: ActionKind) -> list[Slot]:
    """One group of micro-batches per chunk, chunks in the given order, repeated for every group."""
    rounds = num_microbatches // group_size
    return [(stage, kind) for _ in range(rounds) for stage in chunk_stages for _ in range(group_size)]


def _interleaved_programs(num_devices: int, num_microbatches: int, chunks: int,
                          warmup_per_hop: int) -> list[list[Slot]]:
    # With one chunk there is nothing to interleave, so any micro-batch count works.
    group_size = microbatch_group_size(num_devices, num_microbatches) if chunks > 1 else num_microbatches
    programs = []
    for device in range(num_devices):
        chunk_stages = [chunk * num_devices + device for chunk in range(chunks)]
        forwards = _chunk_order(chunk_stages, group_size, num_microbatches, ActionKind.F)
        backwards = _chunk_order(chunk_stages[::-1], group_size, num_microbatches, ActionKind.B)
        # The last device must run every earlier chunk for one group before its last chunk's first
        # backward can start; each hop further from it waits for warmup_per_hop more forwards.
        warmup = min((chunks - 1) * group_size + warmup_per_hop * (num_devices - 1 - device), len(forwards))
        programs.append(warmup_steady_cooldown(forwards, backwards, warmup))
    return programs


def interleaved_1f1b(num_devices: int, num_microbatches: int, chunks: int = 2) -> PipelineSchedule:
    require_count(num_devices, "num_devices")
    require_count(num_microbatches, "num_microbatches")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 2:
        raise SpecError("chunks", f"interleaved 1F1B needs at least 2 chunks per device, got {chunks!r}")
    programs = _interleaved_programs(num_devices, num_microbatches, chunks, warmup_per_hop=2)
    return PipelineSchedule(loop_placement(num_devices * chunks, num_devices),
                            [number_slots(program) for program in programs])


def interleaved_zero_bubble(num_devices: int, num_microbatches: int, chunks: int = 1) -> PipelineSchedule:
    """ZB-H1 (chunks = 1) and its interleaved form: backwards split into I and W, device d runs each W
    d backwards after its I, filling the bubbles 1F1B leaves, with 1F1B's activation memory."""
    require_count(num_devices, "num_devices")
    require_count(num_microbatches, "num_microbatches")
    require_count(chunks, "chunks")
    programs = _interleaved_programs(num_devices, num_microbatches, chunks, warmup_per_hop=1)
    return PipelineSchedule(loop_placement(num_devices * chunks, num_devices),
                            [number_slots(split_backward(program, weight_lag=device))
                             for device, program in enumerate(programs)])
