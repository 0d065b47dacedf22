"""Scheduling: the per-device order of F, B (or I and W) actions of every micro-batch.

One module per schedule; ``generate_schedule`` picks one by its CLI name.
"""

from planner.errors import SpecError
from planner.scheduling.gpipe import gpipe
from planner.scheduling.interleaved import interleaved_1f1b, interleaved_zero_bubble
from planner.scheduling.one_f_one_b import one_f_one_b
from planner.scheduling.program import PipelineSchedule
from planner.scheduling.zero_bubble_v import zero_bubble_v

SCHEDULE_NAMES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v")


def chunks_per_device(name: str, chunks: int) -> int:
    """Model chunks each device holds under a schedule; only interleaved 1F1B lets the caller choose."""
    return {"interleaved-1f1b": chunks, "zb-v": 2}.get(name, 1)


def generate_schedule(name: str, num_devices: int, num_microbatches: int, *, chunks: int = 2) -> PipelineSchedule:
    if name == "gpipe":
        return gpipe(num_devices, num_microbatches)
    if name == "1f1b":
        return one_f_one_b(num_devices, num_microbatches)
    if name == "interleaved-1f1b":
        return interleaved_1f1b(num_devices, num_microbatches, chunks)
    if name == "zb-h1":
        return interleaved_zero_bubble(num_devices, num_microbatches, chunks=1)
    if name == "zb-v":
        return zero_bubble_v(num_devices, num_microbatches)
    raise SpecError("schedule", f"must be one of {', '.join(SCHEDULE_NAMES)}; got {name!r}")


__all__ = ["SCHEDULE_NAMES", "PipelineSchedule", "chunks_per_device", "generate_schedule", "gpipe",
           "interleaved_1f1b", "interleaved_zero_bubble", "one_f_one_b", "zero_bubble_v"]
