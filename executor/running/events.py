"""Timing events and where they go.

A sink is named by a string: ``redis://host:port/db#<stream key>`` appends each event with XADD (field
``event`` = the JSON text) to that stream; ``https://HOST/api/runs/ID/events/`` POSTs batches to AdaPtis Studio's
ingest for run ID, authenticated by the run's secret read from a token file (``HttpSink``: what a rank on a cluster
uses, where the dashboard's Redis is seldom reachable but its HTTPS is); anything else is a path to a JSON-lines
file, appended to.
Events leave each rank from a background thread that flushes every ``FLUSH_INTERVAL_S``, so writing them
never sits on the compute path and they reach the sink within tens of milliseconds of the action that
produced them. The thread wakes on a timer, not per event: a wake-up per action (a condition-variable
hand-off plus a GIL switch) cost measurable time per action on a host whose cores the ranks share.

A sink that fails (Redis restarting, a network blip) costs nothing but latency: what could not be written is kept
and sent again in order, ``RETRY_INTERVAL_S`` after the first failure and twice as long after each further one (up
to ``MAX_RETRY_INTERVAL_S``), and at the end of the run for up to ``CLOSE_DELIVERY_S``.
Every event also stays in the rank's memory and goes into the run's result, so what a longer outage held back
is still delivered with the result (``EventEmitter.undelivered`` counts it). A batch that failed halfway may
be written twice: readers de-duplicate by (rank, step, action).

Schema (times in ms, relative to the run's aligned start; see ``executor.running.timing``):

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
import time
from collections import deque
import urllib.request
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from planner.errors import SpecError

REDIS_SCHEMES = ("redis", "rediss", "unix")
HTTP_SCHEMES = ("https", "http")   # http only for a dashboard on the same host or a private network
FLUSH_INTERVAL_S = 0.02
RETRY_INTERVAL_S = 0.5
MAX_RETRY_INTERVAL_S = 8.0
# per POST; the ingest refuses larger batches (adaptis_web.studio.runs: its serializer and cluster_runs read this)
HTTP_BATCH_EVENTS = 1000
HTTP_TIMEOUT_S = 10.0
CLOSE_DELIVERY_S = 30.0
REDIS_TIMEOUT_S = 2.0  # a stopped or unreachable Redis must fail a write, not hang the rank's event thread


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
        self._client = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT_S,
                                            socket_connect_timeout=REDIS_TIMEOUT_S)

    def write(self, events: list[dict]) -> None:
        pipeline = self._client.pipeline(transaction=False)
        for event in events:
            pipeline.xadd(self.stream, {"event": json.dumps(event)})
        pipeline.execute()

    def close(self) -> None:
        self._client.close()


class HttpSink:
    """POSTs ``{"events": [...]}`` to a run's ingest URL in batches of at most ``HTTP_BATCH_EVENTS``, with the run's
    secret as a bearer token. A refused or failed POST raises, and the emitter sends the batch again later; the
    ingest stores an action once however often it arrives."""

    def __init__(self, url: str, token: str):
        self.url = url
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                         "Accept": "application/json"}

    def write(self, events: list[dict]) -> None:
        for start in range(0, len(events), HTTP_BATCH_EVENTS):
            body = json.dumps({"events": events[start:start + HTTP_BATCH_EVENTS]}).encode()
            request = urllib.request.Request(self.url, data=body, method="POST", headers=self._headers)
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                response.read()

    def close(self) -> None:
        pass


def read_token_file(path: str | None) -> str:
    """The run secret an ``https://`` sink sends, from the file the launcher was given (``--token-file``)."""
    if not path:
        raise SpecError("event_token_file", "an https:// event sink needs the run's secret: give --token-file")
    try:
        token = Path(path).read_text().strip()
    except OSError as error:
        raise SpecError("event_token_file", f"cannot read {path}: {error.strerror}") from None
    if not token:
        raise SpecError("event_token_file", f"{path} is empty")
    return token


def resolved_sink(target: str) -> str:
    """``target`` with a file path made absolute (Redis URLs as they are): ranks run in another working
    directory than their launcher, and must write where the caller meant."""
    parts = urlsplit(target) if isinstance(target, str) else None
    if parts is None or parts.scheme in REDIS_SCHEMES or (parts.scheme and parts.scheme != "file"):
        return target
    return str(Path(parts.path if parts.scheme == "file" else target).resolve())


def open_sink(target: str, token_file: str | None = None):
    """The sink ``target`` names (see the module docstring); ``SpecError('event_sink', ...)`` if malformed.
    ``token_file``: where an ``https://`` sink reads the run's secret."""
    if not isinstance(target, str) or not target:
        raise SpecError("event_sink", f"must be a redis:// URL with '#<stream key>', an https:// ingest URL or a "
                                      f"file path, got {target!r}")
    scheme = urlsplit(target).scheme
    if scheme in HTTP_SCHEMES:
        return HttpSink(target, read_token_file(token_file))
    if scheme in REDIS_SCHEMES:
        url, _, stream = target.partition("#")
        if not stream:
            raise SpecError("event_sink", f"a Redis sink needs the stream key after '#', got {target!r}")
        return RedisStreamSink(url, stream)
    if scheme == "file":
        return JsonlSink(urlsplit(target).path)
    if scheme:
        raise SpecError("event_sink", f"unsupported scheme {scheme!r}: use redis://...#stream, https://... or a "
                                      f"file path")
    return JsonlSink(target)


class EventEmitter:
    """Sends events to a sink from a background thread and keeps every event for the run's result.

    ``emit`` takes either a finished event or a zero-argument callable that produces one (resolved on the
    flushing thread): on CUDA an action's times are only known once its end event has completed, and
    resolving that must not stall the rank's compute stream. ``emit`` is a lock-free deque append.
    """

    def __init__(self, sink=None, *, close_delivery_s: float = CLOSE_DELIVERY_S):
        self._sink = sink
        self._pending: deque = deque()
        self._backlog: list[dict] = []  # resolved, not yet written to the sink (in order)
        self._retry_at = 0.0
        self._failures_in_a_row = 0
        self._close_delivery_s = close_delivery_s
        self._stop = threading.Event()
        self.events: list[dict] = []
        self.error: BaseException | None = None  # the sink's last failure, if any
        self.failed_writes = 0
        self.undelivered = 0  # events the sink never took (they are in ``events``, and so in the result)
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
        self.events.extend(batch)
        if self._sink is None:
            return
        self._backlog.extend(batch)
        if self._backlog and time.monotonic() >= self._retry_at:
            self._deliver()

    def _deliver(self) -> bool:
        try:
            self._sink.write(self._backlog)
        except Exception as error:  # noqa: BLE001 - kept and sent again; the run itself goes on
            self.error, self.failed_writes = error, self.failed_writes + 1
            self._failures_in_a_row += 1
            self._retry_at = time.monotonic() + self.retry_interval_s()
            return False
        self._backlog, self._failures_in_a_row = [], 0
        return True

    def retry_interval_s(self) -> float:
        """How long after the latest failure the next try waits: doubling with each failure in a row."""
        return min(MAX_RETRY_INTERVAL_S, RETRY_INTERVAL_S * 2 ** max(0, self._failures_in_a_row - 1))

    def close(self) -> None:
        """Flush everything emitted, retrying a failing sink for up to ``close_delivery_s``; what it still would
        not take is counted in ``undelivered`` (and is in ``events``)."""
        self._stop.set()
        self._thread.join()
        if self._sink is None:
            return
        deadline = time.monotonic() + self._close_delivery_s
        while self._backlog and not self._deliver() and time.monotonic() < deadline:
            time.sleep(min(self.retry_interval_s(), max(0.0, deadline - time.monotonic())))
        self.undelivered = len(self._backlog)
        try:
            self._sink.close()
        except Exception:  # noqa: BLE001 - closing a connection to a sink that is gone
            pass
