"""Live run events: the executor's ranks XADD timing events to a Redis stream; a relay thread in the Celery
worker reads them (XREAD, blocking) and stores each action as a RunEvent (and each collective of a hybrid run as a
RunCollective) as it arrives, so the run page, which polls the database through the API, shows a bar within a
second of the rank recording it. ``RunEventStore`` is how events become rows, here and in the ingest of cluster
runs: once each, numbered by the run's one ``seq``.

The database is the copy that lasts: once the run is over, the stream only expires.

Redis may go away for a while (a restart, a failover): the relay keeps trying every ``RETRY_S`` and goes on
from where it was; the ranks keep what they could not send and send it when Redis is back; a batch they sent
twice is stored once (an action runs once per rank and step, a collective is its rank's n-th of the step); and
what a restarted, empty Redis lost is stored from the run's result when it ends (``run_events_backfill``).
Stored = measured.

The relay runs beside the ranks it records, on the same cores: after storing a batch it waits ``BATCH_INTERVAL_S``
before reading again (unless it read a full ``READ_COUNT``), so it wakes and commits about ten times a second
instead of at every flush of every rank.
Woken as events arrived, it slowed what it recorded: tiny-llama's ZB-H1 plan on 2 ranks of a 2-core host took a
median 24.5 ms per iteration beside it, 20.0 ms without it, and 22.4 ms with reads 0.1 s apart
(``benchmarks/local_prediction.py`` measures runs as the product starts them).
"""

from __future__ import annotations

import json
import logging
import threading

import redis
from django.conf import settings
from django.db import connection
from django.db.models import Max

from adaptis_web.studio.models import RunCollective, RunEvent

logger = logging.getLogger(__name__)

READ_BLOCK_MS = 200
READ_COUNT = 500
BATCH_INTERVAL_S = 0.1   # between storing a batch and reading the next (see the module docstring)
STREAM_TTL_S = 3600
RETRY_S = 0.5
REDIS_TIMEOUT_S = 5.0


def run_stream_key(run_id: int) -> str:
    return f"{settings.LIVE_EVENTS_PREFIX}:run:{run_id}"


def run_event_sink(run_id: int) -> str:
    """The executor's ``event_sink`` for a run: ``redis://...#<stream key>``."""
    return f"{settings.REDIS_URL}#{run_stream_key(run_id)}"


def redis_client() -> redis.Redis:
    # The read timeout must outlast XREAD's block; both bound how long a vanished Redis can hold a call.
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=REDIS_TIMEOUT_S,
                                socket_connect_timeout=REDIS_TIMEOUT_S)


def next_seq(run_id: int) -> int:
    """The run's next ``seq``: one sequence numbers its actions and its collectives together."""
    last = [model.objects.filter(run_id=run_id).aggregate(last=Max("seq"))["last"] or 0
            for model in (RunEvent, RunCollective)]
    return max(last) + 1


def event_row(run_id: int, seq: int, event: dict) -> RunEvent:
    return RunEvent(run_id=run_id, seq=seq, rank=event["rank"], device=event["device"], action=event["action"],
                    stage=event["stage"], kind=event["kind"], microbatch=event["microbatch"],
                    step=event.get("step", 0), start_ms=event["start_ms"], end_ms=event["end_ms"])


def collective_row(run_id: int, seq: int, event: dict) -> RunCollective:
    op = event["op"]
    return RunCollective(run_id=run_id, seq=seq, rank=event["rank"], device=event["device"], op=op,
                         group=event.get("group") or op.split("_", 1)[0], step=event["step"], index=event["index"],
                         bytes=event.get("bytes") or 0, start_ms=event["start_ms"], end_ms=event["end_ms"])


def event_identity(rank: int, step: int, action: str) -> tuple[int, int, str]:
    """An action runs once per rank and step, so this identifies an observed event."""
    return rank, step, action


def collective_identity(rank: int, step: int, index: int) -> tuple[int, int, int]:
    """A collective is its rank's ``index``-th of the step (``executor.running.runtime``): this identifies it."""
    return rank, step, index


class RunEventStore:
    """Stores a run's events as rows: each action a RunEvent, each collective a RunCollective, each once however often
    it arrives (a rank retrying a batch sends some twice), numbered in arrival order by the run's one ``seq``. Other
    events (the run's lifecycle) are not stored here. One store per writer of a run: it remembers what it stored."""

    def __init__(self, run_id: int):
        self.run_id = run_id
        self.seq = next_seq(run_id)
        self.actions = {event_identity(*row) for row in
                        RunEvent.objects.filter(run_id=run_id).values_list("rank", "step", "action")}
        self.collectives = {collective_identity(*row) for row in
                            RunCollective.objects.filter(run_id=run_id).values_list("rank", "step", "index")}

    def store(self, events: list[dict]) -> int:
        """Store what of ``events`` is not stored yet; returns how many rows that made."""
        actions, collectives = [], []
        for event in events:
            kind = event.get("type", "action")
            if kind == "action":
                seen, rows, row = self.actions, actions, event_row
                identity = event_identity(event["rank"], event.get("step", 0), event["action"])
            elif kind == "collective":
                seen, rows, row = self.collectives, collectives, collective_row
                identity = collective_identity(event["rank"], event["step"], event["index"])
            else:
                continue
            if identity in seen:
                continue
            seen.add(identity)
            rows.append(row(self.run_id, self.seq, event))
            self.seq += 1
        RunEvent.objects.bulk_create(actions)
        RunCollective.objects.bulk_create(collectives)
        return len(actions) + len(collectives)


class RunEventRelay:
    """Copies a run's stream into RunEvents and RunCollectives on a background thread until stopped and drained."""

    def __init__(self, run_id: int):
        self.run_id = run_id
        self.key = run_stream_key(run_id)
        self.stored = 0
        self.error: BaseException | None = None
        self._client = redis_client()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._relay, name=f"run-{run_id}-events", daemon=True)

    def start(self) -> "RunEventRelay":
        """Start relaying; call it before the ranks start so no event is missed."""
        # Run ids restart with a fresh database while Redis keeps streams for an hour: a stream left under
        # this key belongs to another run.
        try:
            self._client.delete(self.key)
        except redis.RedisError:
            logger.warning("run %s: Redis did not answer; relaying starts when it does", self.run_id)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Finish once everything already in the stream is stored; then let the stream expire."""
        self._stop.set()
        self._thread.join(timeout_s)
        try:
            self._client.expire(self.key, STREAM_TTL_S)
        except redis.RedisError:
            logger.warning("run %s: could not set the expiry of its event stream", self.run_id)
        finally:
            self._client.close()

    def _relay(self) -> None:
        last_id, store = "0-0", RunEventStore(self.run_id)
        try:
            while True:
                try:
                    batches = self._client.xread({self.key: last_id}, count=READ_COUNT, block=READ_BLOCK_MS)
                except (redis.ConnectionError, redis.TimeoutError) as error:
                    if self._stop.is_set():
                        return  # the ranks are done; the run's result holds what Redis did not deliver
                    logger.warning("run %s: Redis unavailable (%s); retrying", self.run_id, error)
                    self._stop.wait(RETRY_S)
                    continue
                if not batches:
                    if self._stop.is_set():
                        return  # stopped after the ranks exited, and nothing is left to read
                    continue
                events, read = [], 0
                for _, messages in batches:
                    read += len(messages)
                    for message_id, fields in messages:
                        last_id = message_id
                        events.append(json.loads(fields[b"event"]))
                self.stored += store.store(events)   # what a rank retrying through an outage sent twice, once
                if read < READ_COUNT:   # caught up; once stopped, the wait returns at once and the rest is drained
                    self._stop.wait(BATCH_INTERVAL_S)
        except BaseException as error:  # recorded for the task; the run's own result is the fallback copy
            logger.exception("relaying events of run %s failed", self.run_id)
            self.error = error
        finally:
            connection.close()  # this thread's own connection; Django opened it on first use


def run_events_backfill(run_id: int, events: list[dict]) -> int:
    """Store the actions and collectives of a finished run's result that the relay did not deliver; returns how
    many."""
    return RunEventStore(run_id).store(events)
