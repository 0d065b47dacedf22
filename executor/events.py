"""Timing events and where they go.

A sink is named by a string: ``redis://host:port/db#<stream key>`` appends each event with XADD (field
``event`` = the JSON text) to that stream; anything else is a path to a JSON-lines file, appended to.
Events leave each rank from a background thread that flushes every ``FLUSH_INTERVAL_S``, so writing them
never sits on the compute path and they reach the sink within tens of milliseconds of the action that
produced them. The thread wakes on a timer, not per event: a wake-up per action (a condition-variable
hand-off plus a GIL switch) cost measurable time per action on a host whose cores the ranks share.

Schema (times in ms, relative to the run's aligned start; see ``executor.timing``):

- ``{"type": "run_started", "world_size", "backend", "steps", "num_microbatches", "strategy", "model",
  "started_at"}`` (``started_at``: Unix seconds of the aligned start)
- ``{"type": "action", "rank", "device", "action", "stage", "kind", "microbatch", "step", "start_ms", "end_ms"}``
- ``{"type": "run_finished", "summary": {...}, "loss": float | None}``
- ``{"type": "run_failed", "rank", "error"}``
- ``{"type": "run_cancelled"}`` (the launcher stopped the ranks because its caller asked it to)
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from planner.errors import SpecError

REDIS_SCHEMES = ("redis", "rediss", "unix")
FLUSH_INTERVAL_S = 0.02


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


def resolved_sink(target: str) -> str:
    """``target`` with a file path made absolute (Redis URLs as they are): ranks run in another working
    directory than their launcher, and must write where the caller meant."""
    parts = urlsplit(target) if isinstance(target, str) else None
    if parts is None or parts.scheme in REDIS_SCHEMES or (parts.scheme and parts.scheme != "file"):
        return target
    return str(Path(parts.path if parts.scheme == "file" else target).resolve())


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

    ``emit`` takes either a finished event or a zero-argument callable that produces one (resolved on the
    flushing thread): on CUDA an action's times are only known once its end event has completed, and
    resolving that must not stall the rank's compute stream. ``emit`` is a lock-free deque append.
    """

    def __init__(self, sink=None):
        self._sink = sink
        self._pending: deque = deque()
        self._stop = threading.Event()
        self.events: list[dict] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="adaptis-events", daemon=True)
        self._thread.start()

    def emit(self, event: dict | Callable[[], dict]) -> None:
        self._pending.append(event)

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self._flush()
        self._flush()

    def _flush(self) -> None:
        batch = []
        while self._pending:   # popleft is atomic against the producer's append
            item = self._pending.popleft()
            batch.append(item() if callable(item) else item)
        if not batch:
            return
        self.events.extend(batch)
        if self._sink is not None and self.error is None:
            try:
                self._sink.write(batch)
            except Exception as error:  # noqa: BLE001 - reported by close(), the run itself goes on
                self.error = error

    def close(self) -> None:
        """Flush everything emitted; raise if the sink failed (a run must not silently lose its events)."""
        self._stop.set()
        self._thread.join()
        if self._sink is not None:
            self._sink.close()
        if self.error is not None:
            raise RuntimeError(f"writing events to the sink failed: {self.error!r}") from self.error
