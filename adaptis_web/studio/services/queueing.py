"""Enqueue a Celery task once the transaction that created its row has committed.

A worker must never look for a row that is not committed yet, and a rolled-back request must enqueue
nothing. The task id is chosen before sending and stored with the row, so no later write races the worker.
If the broker refuses the message, the row records that it failed instead of waiting forever.
"""

from __future__ import annotations

import logging

from django.db import models, transaction
from django.utils import timezone

from adaptis_web.studio.models import JobStatus

logger = logging.getLogger(__name__)


def internal_error(noun: str, row_id: int, service: str) -> str:
    """What a row (and so its page) says of a failure nobody foresaw: where its traceback is, not the exception's
    text, which means nothing to a user and may show internals. Log it first with ``logger.exception("%s %s
    failed", noun, row_id)`` on the ``service`` worker ("planner" or "runner": adaptis_web.processes)."""
    return (f"An internal error stopped this {noun}. Its traceback is in the {service} worker's log "
            f"(var/{service}.log under make run) after the line \"{noun} {row_id} failed\"; please report it.")


def enqueue_on_commit(task, *, row: models.Model) -> None:
    """Send ``task(row.pk)`` with ``task_id=row.celery_task_id`` after commit; ``row`` has a ``status``."""
    model, row_id, task_id = type(row), row.pk, row.celery_task_id

    def send() -> None:
        try:
            task.apply_async(args=[row_id], task_id=task_id)
        except Exception as error:  # the broker is down or refused: say so on the row
            logger.exception("could not enqueue %s for %s %s", task.name, model.__name__, row_id)
            model.objects.filter(pk=row_id).update(status=JobStatus.FAILED, finished_at=timezone.now(),
                                                   error=f"could not enqueue the task: {error}")

    transaction.on_commit(send)
