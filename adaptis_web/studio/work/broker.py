"""What the broker still holds: the task ids of messages waiting in a queue or delivered and not yet acknowledged.

kombu's Redis transport keeps a queue as a Redis list per priority step, and a delivered message in its
``unacked`` hash until the worker acknowledges it (with ``task_acks_late``, when the task has ended). A queued row
whose task id is in neither was lost: Redis restarted without persistence, or a worker died holding a message
it had taken. The key names come from the transport's own channel, so a ``global_keyprefix`` or other priority
steps are honoured.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from celery import current_app


def _task_id(message: dict) -> str | None:
    return (message.get("headers") or {}).get("id") or (message.get("properties") or {}).get("correlation_id")


def pending_task_ids(queues: Iterable[str]) -> set[str]:
    """Task ids the broker holds for ``queues`` (waiting) or for any queue (delivered, not yet acknowledged).

    Raises the broker's connection error when it cannot be read: the caller must not take "unreadable" for
    "nothing pending".
    """
    ids: set[str | None] = set()
    with current_app.connection_for_read() as connection:
        channel = connection.default_channel
        client = channel.client
        for queue in queues:
            for priority in channel.priority_steps:
                ids.update(_task_id(json.loads(raw)) for raw in client.lrange(channel._q_for_pri(queue, priority), 0, -1))
        for raw in client.hvals(channel.unacked_key):
            message, _exchange, _routing_key = json.loads(raw)
            ids.add(_task_id(message))
    ids.discard(None)
    return ids
