"""Liveness of running work: heartbeats while a worker runs a job or a run, and a reaper for the orphans.

A worker that dies mid-task (OOM killer, SIGKILL, a lost host) cannot record anything; its row would say
"running" forever. So while a task runs, a daemon thread stamps ``heartbeat_at`` on the row every
``WORK_HEARTBEAT_S``, whatever the task is busy with (a search, or waiting on torch ranks). Celery beat
runs ``reap_stale_work`` periodically: a running row silent for ``WORK_STALE_AFTER_S`` ends failed with
a message saying its worker was lost, so pages stop polling and users can retry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from adaptis_web.studio.models import JobStatus, PlanningJob, Run

logger = logging.getLogger(__name__)

TRACKED = (PlanningJob, Run)


def _stamp(model, pk: int) -> None:
    model.objects.filter(pk=pk, status=JobStatus.RUNNING).update(heartbeat_at=timezone.now())


@contextmanager
def heartbeat(model, pk: int, interval_s: float | None = None) -> Iterator[None]:
    """Stamp ``heartbeat_at`` on the running row now and every ``interval_s`` until the block ends."""
    interval = settings.WORK_HEARTBEAT_S if interval_s is None else interval_s
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(interval):
                try:
                    _stamp(model, pk)
                except Exception:  # a missed beat is survivable; the next one may get through
                    logger.warning("heartbeat of %s %s failed", model.__name__, pk, exc_info=True)
        finally:
            connection.close()  # this thread's own connection

    _stamp(model, pk)
    thread = threading.Thread(target=beat, name=f"heartbeat-{model.__name__}-{pk}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def reap_stale_work(*, stale_after_s: float | None = None) -> dict[str, list[int]]:
    """Fail every running job and run whose worker has been silent for ``stale_after_s``; returns their ids."""
    stale_after = settings.WORK_STALE_AFTER_S if stale_after_s is None else stale_after_s
    now = timezone.now()
    cutoff = now - timedelta(seconds=stale_after)
    silent = Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    reaped: dict[str, list[int]] = {}
    for model in TRACKED:
        rows = model.objects.filter(silent, status=JobStatus.RUNNING)
        ids = list(rows.values_list("pk", flat=True))
        if not ids:
            continue
        # The status condition again: a row that finished meanwhile keeps its outcome.
        model.objects.filter(silent, pk__in=ids, status=JobStatus.RUNNING).update(
            status=JobStatus.FAILED, finished_at=now,
            error=f"worker lost: no sign of life for more than {stale_after:g} s (the worker running it stopped "
                  "or was killed); start it again")
        if model is PlanningJob:
            PlanningJob.objects.filter(pk__in=ids, status=JobStatus.FAILED).update(progress_message="Worker lost")
        logger.warning("reaped %s %s: no heartbeat for %g s", model.__name__, ids, stale_after)
        reaped[model.__name__] = ids
    return reaped
