"""Enqueue a Celery task once the transaction that created its row has committed.

A worker must never look for a row that is not committed yet, and a rolled-back request must enqueue
nothing. The task id is chosen before sending and stored with the row, so no later write races the worker.
If the broker refuses the message, the row records that it failed instead of waiting forever.

Tasks are sent by name (``TASK_OF``, the names ``tasks.py`` registers them under): services never import the tasks,
which import the services (tasks -> services, one way).
"""

from __future__ import annotations

import logging

from celery import current_app
from django.db import models, transaction
from django.utils import timezone

from adaptis_web.studio.models import JobStatus, MeasuredProfile, PlanningJob, Run

logger = logging.getLogger(__name__)

# Each kind of row and the task that does its work (registered under these names in adaptis_web/studio/tasks.py).
PLAN_JOB_TASK, RUN_TASK, PROFILE_TASK = "studio.plan_job_run", "studio.run_execute", "studio.profile_measure"
TASK_OF = {PlanningJob: PLAN_JOB_TASK, Run: RUN_TASK, MeasuredProfile: PROFILE_TASK}


def send(row_type: type[models.Model], row_id: int, task_id: str | None) -> None:
    """Send the task of a ``row_type`` row now (routed to its queue as the Celery app routes that name)."""
    current_app.send_task(TASK_OF[row_type], args=[row_id], task_id=task_id or None)


def internal_error(noun: str, row_id: int, service: str) -> str:
    """What a row (and so its page) says of a failure nobody foresaw: where its traceback is, not the exception's
    text, which means nothing to a user and may show internals. Log it first with ``logger.exception("%s %s
    failed", noun, row_id)`` on the ``service`` worker ("planner" or "runner": adaptis_web.processes)."""
    return (f"An internal error stopped this {noun}. Its traceback is in the {service} worker's log "
            f"(var/{service}.log under make run) after the line \"{noun} {row_id} failed\"; please report it.")


def enqueue_on_commit(row: models.Model) -> None:
    """Send the task of ``row`` (``TASK_OF``) with ``task_id=row.celery_task_id`` after commit; ``row`` has a
    ``status``."""
    model, row_id, task_id = type(row), row.pk, row.celery_task_id

    def send_now() -> None:
        try:
            send(model, row_id, task_id)
        except Exception as error:  # the broker is down or refused: say so on the row
            logger.exception("could not enqueue %s for %s %s", TASK_OF[model], model.__name__, row_id)
            model.objects.filter(pk=row_id).update(status=JobStatus.FAILED, finished_at=timezone.now(),
                                                   error=f"could not enqueue the task: {error}")

    transaction.on_commit(send_now)
