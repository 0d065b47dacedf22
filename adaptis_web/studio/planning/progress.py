"""A planning job's progress: the one home of every write to its ``progress``, ``progress_message`` and end state.

The bar runs 0 → 1 with a message: waiting (0, set at creation), claimed by a worker (0.05), its inputs loaded
(0.1–0.4), the search reporting into ``SEARCH_SPAN`` through a throttled callback, storing (0.9), and the end:
succeeded or cancelled (1.0, one UPDATE that honours a cancel asked meanwhile), failed, or lost with its worker
(``work.liveness``). The search's cancel callback reads the row with the same throttle.

Both callbacks run inside the search loop (once per scored candidate), so each touches the database at most
every ``ROW_IO_INTERVAL_S``.
"""

from __future__ import annotations

import time
from typing import Callable

from django.db.models import Case, Value, When
from django.utils import timezone

from adaptis_web.studio.models import JobStatus, MeasuredProfile, PlanningJob

ROW_IO_INTERVAL_S = 0.5
SEARCH_SPAN = (0.2, 0.85)  # the share of the job's progress bar the search reports into
HYBRID_SEARCH_SPAN = (0.1, 0.85)   # a hybrid job loads nothing before its search
CLAIMED, STORING = 0.05, 0.9
MESSAGE_LENGTH = 200       # PlanningJob.progress_message's max_length


def waiting_message(measured: MeasuredProfile | None) -> str:
    """A new job's message: what it waits for."""
    if measured is None or measured.is_finished:
        return "Waiting for a worker"
    return f"Waiting for profile {measured.pk}, measured on the runs' host"


def cancelled_while_queued() -> dict:
    """The fields a job cancelled before any worker took it ends with (``work.cancelling``)."""
    return {"progress_message": "Cancelled before a worker started it"}


def claim(job_id: int) -> bool:
    """Take a queued job for this worker (RUNNING); False when it is not queued (cancelled, or taken already)."""
    return bool(PlanningJob.objects.filter(pk=job_id, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING, started_at=timezone.now(), progress=CLAIMED,
        progress_message="Loading the model spec and cluster"))


def report(job_id: int, fraction: float, message: str) -> None:
    PlanningJob.objects.filter(pk=job_id).update(progress=fraction, progress_message=message[:MESSAGE_LENGTH])


def finish(job_id: int, *, done: str, cancelled: str, result: dict) -> None:
    """Succeeded, or cancelled when a cancel was asked for meanwhile: one UPDATE, so a request arriving
    now either lands before it (and is honoured) or finds the job finished (and is refused)."""
    PlanningJob.objects.filter(pk=job_id).update(
        status=Case(When(cancel_requested=True, then=Value(JobStatus.CANCELLED)), default=Value(JobStatus.SUCCEEDED)),
        progress_message=Case(When(cancel_requested=True, then=Value(cancelled)), default=Value(done)),
        progress=1.0, result=result, finished_at=timezone.now())


def fail(job_id: int, error: str) -> None:
    PlanningJob.objects.filter(pk=job_id).update(status=JobStatus.FAILED, error=error, finished_at=timezone.now(),
                                                 progress_message="Failed")


def lost_fields() -> dict:
    """The fields a job the warden fails, because its worker stopped, ends with besides its status and error
    (``work.liveness`` writes them in the same UPDATE, so no one reads the failure without them)."""
    return {"progress_message": "Worker lost"}


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


def search_reporter(job_id: int, start: float = SEARCH_SPAN[0],
                    end: float = SEARCH_SPAN[1]) -> Callable[[float, str], None]:
    """A search progress callback mapping the search's 0..1 onto ``start..end`` of the job's progress."""
    throttle = _Throttle()

    def write(fraction: float, message: str) -> None:
        if throttle.due():
            report(job_id, start + (end - start) * fraction, f"Searching: {message}")

    return write


def cancel_reader(job_id: int) -> Callable[[], bool]:
    """A search cancel callback: whether the job's ``cancel_requested`` is set (once set, it stays set)."""
    throttle = _Throttle()
    requested = False

    def read() -> bool:
        nonlocal requested
        if not requested and throttle.due():
            requested = PlanningJob.objects.filter(pk=job_id, cancel_requested=True).exists()
        return requested

    return read
