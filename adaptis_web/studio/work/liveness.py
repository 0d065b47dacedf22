"""Liveness of work: heartbeats while a worker runs a job or a run, a reaper for the orphans, and a re-queue
for queued work whose message the broker lost.

A worker that dies mid-task (OOM killer, SIGKILL, a lost host) cannot record anything; its row would say
"running" forever. So while a task runs, a daemon thread stamps ``heartbeat_at`` on the row every
``WORK_HEARTBEAT_S``, whatever the task is busy with (a search, or waiting on torch ranks). The warden
(``manage.py watch_work``, a process of its own, so it works when every worker is dead) calls ``watch_work``
every ``WORK_WATCH_INTERVAL_S``: a running row silent for ``WORK_STALE_AFTER_S`` ends failed with a message saying
its worker was lost, so pages stop polling and users can retry; a row queued for ``WORK_QUEUED_GRACE_S`` whose
message the broker no longer holds is sent again (the task claims its row only while it is queued, so a second
message for the same row is harmless).
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

from celery import current_app

from adaptis_web.studio.models import JobStatus, MeasuredProfile, PlanningJob, Run
from adaptis_web.studio.planning import progress
from adaptis_web.studio.work.broker import pending_task_ids
from adaptis_web.studio.work.queueing import TASK_OF, send

logger = logging.getLogger(__name__)

TRACKED = (PlanningJob, Run, MeasuredProfile)
# Queued rows that hold no message on purpose: a job waiting for its measured profile is sent when that is done.
# Queued rows that wait for something other than a worker: a job for its measured profile, a cluster run for its
# user to launch its ranks (runs.cluster_runs). The re-queue leaves them alone.
WAITING = {PlanningJob: Q(measured_profile__status__in=(JobStatus.QUEUED, JobStatus.RUNNING)),
           Run: Q(target="cluster")}


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
                  "or was killed); start it again", **(progress.lost_fields() if model is PlanningJob else {}))
        logger.warning("reaped %s %s: no heartbeat for %g s", model.__name__, ids, stale_after)
        reaped[model.__name__] = ids
    never = Run.objects.filter(target="cluster", status=JobStatus.QUEUED,
                               created_at__lt=now - timedelta(seconds=settings.CLUSTER_RUN_START_TIMEOUT_S))
    never_ids = list(never.values_list("pk", flat=True))
    if never_ids:
        never.filter(pk__in=never_ids).update(
            status=JobStatus.FAILED, finished_at=now,
            error=f"stale: none of its ranks reported within {settings.CLUSTER_RUN_START_TIMEOUT_S} s of its creation "
                  f"(CLUSTER_RUN_START_TIMEOUT_S); launch a new one")
        reaped["Run"] = reaped.get("Run", []) + never_ids
    return reaped


def _queues() -> list[str]:
    """The queues the tasks of TRACKED rows are routed to, as the Celery app routes them."""
    router = current_app.amqp.router
    return sorted({router.route({}, task)["queue"].name for task in TASK_OF.values()})


def requeue_lost_work(*, grace_s: float | None = None) -> dict[str, list[int]]:
    """Send again the task of every row queued for longer than ``grace_s`` whose message the broker no longer
    holds (neither waiting nor delivered-unacknowledged); returns their ids. Raises when the broker cannot be
    read, sending nothing."""
    grace = settings.WORK_QUEUED_GRACE_S if grace_s is None else grace_s
    cutoff = timezone.now() - timedelta(seconds=grace)
    waiting = {model: list(model.objects.filter(status=JobStatus.QUEUED, created_at__lt=cutoff)
                           .exclude(WAITING.get(model, Q(pk__in=[])))
                           .values_list("pk", "celery_task_id")) for model in TRACKED}
    if not any(waiting.values()):
        return {}
    pending = pending_task_ids(_queues())
    requeued: dict[str, list[int]] = {}
    for model, rows in waiting.items():
        lost = [(pk, task_id) for pk, task_id in rows if task_id not in pending]
        for pk, task_id in lost:
            send(model, pk, task_id)
        if lost:
            logger.warning("re-queued %s %s: the broker no longer held their messages", model.__name__,
                           [pk for pk, _ in lost])
            requeued[model.__name__] = [pk for pk, _ in lost]
    return requeued


def watch_work() -> dict[str, dict[str, list[int]]]:
    """One round of the warden: reap silent running work, then re-queue lost queued work. A broker that cannot
    be read skips the re-queue (and says so); reaping needs only the database."""
    report = {"reaped": reap_stale_work(), "requeued": {}}
    try:
        report["requeued"] = requeue_lost_work()
    except Exception:  # the broker is down: the next round tries again
        logger.warning("could not read the broker to look for lost messages", exc_info=True)
    return report
