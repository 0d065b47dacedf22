"""Asking tracked work (a planning job, a run) to stop: one rule for both.

A queued row ends cancelled at once (a worker only claims queued rows, so it will skip it); a running one gets
``cancel_requested`` and ends cancelled when its worker notices; a finished one refuses, as a 409 on ``status``.
"""

from __future__ import annotations

from django.utils import timezone

from adaptis_web.studio.common.refusals import Conflict
from adaptis_web.studio.models import JobStatus, TrackedWork


def request_cancel(row: TrackedWork, *, noun: str, queued_note: dict[str, str]) -> None:
    """Cancel ``row`` (a ``TrackedWork`` with ``cancel_requested``); ``queued_note``: the fields a row cancelled
    before any worker took it records (its message)."""
    rows = type(row).objects.filter(pk=row.pk)
    stopped = rows.filter(status=JobStatus.QUEUED).update(
        status=JobStatus.CANCELLED, cancel_requested=True, finished_at=timezone.now(), **queued_note)
    if not stopped and not rows.filter(status=JobStatus.RUNNING).update(cancel_requested=True):
        row.refresh_from_db(fields=["status"])
        raise Conflict("status", f"the {noun} has already {row.status}; only a queued or running {noun} can be "
                                 "cancelled")
