"""Timing events and where they go.

A sink is named by a string: ``redis://host:port/db#<stream key>`` appends each event with XADD (field
``event`` = the JSON text) to that stream; anything else is a path to a JSON-lines file, appended to.
Events leave each rank from a background thread, so writing them never sits on the compute path, and reach
the sink within a few milliseconds of the action that produced them.

Schema (times in ms, relative to the run's aligned start; see ``executor.timing``):

- ``{"type": "run_started", "world_size", "backend", "steps", "num_microbatches", "strategy", "model",
  "started_at"}`` (``started_at``: Unix seconds of the aligned start)
- ``{"type": "action", "rank", "device", "action", "stage", "kind", "microbatch", "step", "start_ms", "end_ms"}``
- ``{"type": "run_finished", "summary": {...}, "loss": float | None}``
- ``{"type": "run_failed", "rank", "error"}``
"""

from __future__ import annotations

import json
import os
import queue
import threading
from typing import Callable
from urllib.parse import urlsplit

from planner.errors import SpecError

REDIS_SCHEMES = ("redis", "rediss", "unix")
BATCH_LIMIT = 256


class JsonlSink:
    def __init__(self, path: str):
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        # O_APPEND: each write lands at the end even with several ranks appending to one file.
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, events: list[dict]) -> None:
        for event in events:
            os.write(self._fd, (json.dumps(event) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


class RedisStreamSink:
    def __init__(self, url: str, stream: str):
        import redis  # Only runs that stream to Redis need the client.

        self.stream = stream
        self._client = redis.Redis.from_url(url)

    def write(self, events: list[dict]) -> None:
        pipeline = self._client.pipeline(transaction=False)
        for event in events:
            pipeline.xadd(self.stream, {"event": json.dumps(event)})
        pipeline.execute()

    def close(self) -> None:
        self._client.close()


def open_sink(target: str):
    """The sink ``target`` names (see the module docstring); ``SpecError('event_sink', ...)`` if malformed."""
    if not isinstance(target, str) or not target:
        raise SpecError("event_sink", f"must be a redis:// URL with '#<stream key>' or a file path, got {target!r}")
    scheme = urlsplit(target).scheme
    if scheme in REDIS_SCHEMES:
        url, _, stream = target.partition("#")
        if not stream:
            raise SpecError("event_sink", f"a Redis sink needs the stream key after '#', got {target!r}")
        return RedisStreamSink(url, stream)
    if scheme == "file":
        return JsonlSink(urlsplit(target).path)
    if scheme:
        raise SpecError("event_sink", f"unsupported scheme {scheme!r}: use redis://...#stream or a file path")
    return JsonlSink(target)


class EventEmitter:
    """Sends events to a sink from a background thread and keeps every event for the run's result.

    ``emit`` takes either a finished event or a zero-argument callable that produces one: on CUDA an
    action's times are only known once its end event has completed, and resolving that must not stall
    the rank's compute stream.
    """

    def __init__(self, sink=None):
        self._sink = sink
        self._queue: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="adaptis-events", daemon=True)
        self._thread.start()

    def emit(self, event: dict | Callable[[], dict]) -> None:
        self._queue.put(event)

    def _drain(self) -> None:
        finished = False
        while not finished:
            batch = [self._queue.get()]
            while len(batch) < BATCH_LIMIT:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            finished = batch[-1] is None
            events = [item() if callable(item) else item for item in batch if item is not None]
            self.events.extend(events)
            if self._sink is not None and events and self.error is None:
                try:
                    self._sink.write(events)
                except Exception as error:  # noqa: BLE001 - reported by close(), the run itself goes on
                    self.error = error

    def close(self) -> None:
        """Flush everything queued; raise if the sink failed (a run must not silently lose its events)."""
        self._queue.put(None)
        self._thread.join()
        if self._sink is not None:
            self._sink.close()
        if self.error is not None:
            raise RuntimeError(f"writing events to the sink failed: {self.error!r}") from self.error
