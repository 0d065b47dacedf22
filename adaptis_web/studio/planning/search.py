"""Planning a pipeline job: its search settings' checks, and ``planner.service.plan_pipeline_job`` with the
search's progress written to the job row and its cancellation read from it (``planning.jobs`` stores the plans
and ends the job).

Both callbacks run inside the search loop (once per scored candidate), so each touches the database at most
every ``ROW_IO_INTERVAL_S``: progress is written, and ``cancel_requested`` read, with that throttle.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from adaptis_web.studio.models import PlanningJob
from planner import service as planner_service
from planner.errors import SpecError

ROW_IO_INTERVAL_S = 0.5
MAX_SEED = 2**31 - 1
DEFAULT_TIME_BUDGET_S = 60.0
MIN_TIME_BUDGET_S, MAX_TIME_BUDGET_S = 1.0, 600.0


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def search_settings_check(*, seed: int, time_budget_s: float, memory_limit_bytes: int | None,
                          cluster: planner_service.ClusterSpec) -> None:
    """SpecError naming the field unless the search settings are in range (checked for every job request)."""
    if not _is_integer(seed) or not 0 <= seed <= MAX_SEED:
        raise SpecError("seed", f"must be an integer between 0 and {MAX_SEED}; got {seed!r}")
    if isinstance(time_budget_s, bool) or not isinstance(time_budget_s, (int, float)) \
            or not math.isfinite(time_budget_s) or not MIN_TIME_BUDGET_S <= time_budget_s <= MAX_TIME_BUDGET_S:
        raise SpecError("time_budget_s", f"must be between {MIN_TIME_BUDGET_S:g} and {MAX_TIME_BUDGET_S:g} "
                                         f"seconds; got {time_budget_s!r}")
    device_bytes = cluster.device.memory_bytes
    if memory_limit_bytes is not None and (not _is_integer(memory_limit_bytes)
                                           or not 1 <= memory_limit_bytes <= device_bytes):
        raise SpecError("memory_limit_bytes", f"must be a number of bytes between 1 and the {cluster.device.name}'s "
                                              f"{device_bytes:,} ({device_bytes / 2**30:g} GiB), or empty for all "
                                              f"of it; got {memory_limit_bytes!r}")


class _Throttle:
    def __init__(self, interval_s: float = ROW_IO_INTERVAL_S):
        self.interval_s = interval_s
        self.last = float("-inf")

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.interval_s:
            return False
        self.last = now
        return True


def job_progress_writer(job_id: int, start: float, end: float) -> Callable[[float, str], None]:
    """A search progress callback mapping the search's 0..1 onto ``start..end`` of the job's progress."""
    throttle = _Throttle()

    def write(fraction: float, message: str) -> None:
        if throttle.due():
            PlanningJob.objects.filter(pk=job_id).update(progress=start + (end - start) * fraction,
                                                         progress_message=f"Searching: {message}"[:200])

    return write


def job_cancel_reader(job_id: int) -> Callable[[], bool]:
    """A search cancel callback: whether the job's ``cancel_requested`` is set (once set, it stays set)."""
    throttle = _Throttle()
    requested = False

    def read() -> bool:
        nonlocal requested
        if not requested and throttle.due():
            requested = PlanningJob.objects.filter(pk=job_id, cancel_requested=True).exists()
        return requested

    return read


def job_plan(*, job: PlanningJob, spec: planner_service.ModelSpec, profile: planner_service.Profile,
             cluster: planner_service.ClusterSpec,
             progress_span: tuple[float, float]) -> planner_service.PipelineJobOutcome:
    """Plan the job (``planner.service.plan_pipeline_job``), a search reporting into ``progress_span`` of the job's
    progress. SpecError (e.g. ``memory_limit_bytes`` when nothing fits) propagates."""
    return planner_service.plan_pipeline_job(
        spec=spec, cluster=cluster, profile=profile, schedule=job.schedule, partition=job.partition,
        num_devices=job.num_devices, num_microbatches=job.num_microbatches, seed=job.seed,
        time_budget_s=job.time_budget_s, memory_limit_bytes=job.memory_limit_bytes,
        progress=job_progress_writer(job.pk, *progress_span), cancel=job_cancel_reader(job.pk))
