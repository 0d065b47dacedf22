"""The live-event relay against the real Redis: stream entries become RunEvents (and a hybrid run's collectives
RunCollectives) while the stream is written."""

import json

import pytest
import redis
from django.conf import settings

from adaptis_web.studio.models import Run, RunCollective, RunEvent
from adaptis_web.studio.runs.live_events import RunEventRelay, run_event_sink, run_events_backfill, run_stream_key

pytestmark = pytest.mark.django_db(transaction=True)  # the relay thread has its own database connection


def _action(rank: int, action: str, start_ms: float, step: int = 0) -> dict:
    kind = action[1]
    return {"type": "action", "rank": rank, "device": rank, "action": action, "stage": int(action[0]),
            "kind": kind, "microbatch": int(action[2:]), "step": step, "start_ms": start_ms, "end_ms": start_ms + 1.5}


@pytest.fixture
def run(people, planned) -> Run:
    return Run.objects.create(plan=planned.plan, created_by=people.owner, world_size=2)


@pytest.fixture
def stream(run):
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield client
    client.delete(run_stream_key(run.pk))
    client.close()


def test_the_sink_names_this_runs_stream(run):
    assert run_event_sink(run.pk) == f"{settings.REDIS_URL}#{settings.LIVE_EVENTS_PREFIX}:run:{run.pk}"


def test_events_are_stored_while_the_stream_is_being_written(run, stream, wait_for):
    relay = RunEventRelay(run.pk).start()
    try:
        key = run_stream_key(run.pk)
        stream.xadd(key, {"event": json.dumps({"type": "run_started", "world_size": 2})})
        stream.xadd(key, {"event": json.dumps(_action(0, "0F0", 0.0))})
        stream.xadd(key, {"event": json.dumps(_action(1, "1F0", 2.0))})
        wait_for(lambda: RunEvent.objects.filter(run=run).count() == 2, timeout_s=5, message="the first events")
        stream.xadd(key, {"event": json.dumps(_action(1, "1B0", 4.0))})
        wait_for(lambda: RunEvent.objects.filter(run=run).count() == 3, timeout_s=5, message="the next event")
    finally:
        relay.stop()
    rows = list(RunEvent.objects.filter(run=run).values_list("seq", "device", "action", "kind", "start_ms"))
    assert rows == [(1, 0, "0F0", "F", 0.0), (2, 1, "1F0", "F", 2.0), (3, 1, "1B0", "B", 4.0)]
    assert relay.stored == 3 and relay.error is None


def test_a_stale_stream_under_the_same_key_is_not_relayed(run, stream):
    """A previous database's run with the same id left events behind; they are not this run's."""
    key = run_stream_key(run.pk)
    stream.xadd(key, {"event": json.dumps(_action(0, "0F0", 123.0))})
    relay = RunEventRelay(run.pk).start()
    stream.xadd(key, {"event": json.dumps(_action(0, "0F0", 1.0))})
    relay.stop()
    assert list(RunEvent.objects.filter(run=run).values_list("start_ms", flat=True)) == [1.0]


def test_stop_drains_what_is_already_in_the_stream(run, stream):
    key = run_stream_key(run.pk)
    relay = RunEventRelay(run.pk).start()
    for index in range(1200):  # more than one XREAD batch
        stream.xadd(key, {"event": json.dumps(_action(0, f"0F{index}", float(index)))})
    stream.xadd(key, {"event": json.dumps({"type": "run_finished", "summary": {}, "loss": 1.0})})
    relay.stop()
    assert RunEvent.objects.filter(run=run).count() == 1200
    assert list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)) == list(range(1, 1201))
    assert 0 < stream.ttl(key) <= 3600, "the stream expires once the database has the events"


def test_backfill_adds_only_the_events_the_relay_missed(run):
    delivered = [_action(0, "0F0", 0.0), _action(1, "1F0", 2.0)]
    missed = [_action(1, "1B0", 4.0), _action(0, "0B0", 7.0), _action(0, "0F0", 20.0, step=1)]
    assert run_events_backfill(run.pk, delivered) == 2
    assert run_events_backfill(run.pk, delivered + missed + [{"type": "run_finished"}]) == 3
    rows = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", "action", "step"))
    assert rows == [(1, "0F0", 0), (2, "1F0", 0), (3, "1B0", 0), (4, "0B0", 0), (5, "0F0", 1)]


def _collective(rank: int, device: int, op: str, index: int, start_ms: float, step: int = 0) -> dict:
    return {"type": "collective", "op": op, "group": op.split("_")[0], "rank": rank, "device": device,
            "coordinate": {"tp": rank % 2, "cp": 0, "dp": 0, "pp": device, "ep": 0}, "step": step, "index": index,
            "bytes": 65536, "start_ms": start_ms, "end_ms": start_ms + 0.5}


def test_collectives_are_stored_once_numbered_with_the_actions(run, stream, wait_for):
    """One sequence over a run's actions and collectives, so the page's ``after=seq`` cursor pages through both; a
    collective sent twice (a rank retrying) is its rank's index-th of the step, stored once."""
    relay = RunEventRelay(run.pk).start()
    try:
        key = run_stream_key(run.pk)
        for event in (_collective(0, 0, "tp_all_gather", 0, 0.1), _action(0, "0F0", 0.0),
                      _collective(1, 0, "tp_all_gather", 0, 0.2), _collective(0, 0, "tp_all_gather", 0, 0.1),
                      _collective(0, 0, "dp_all_reduce", 1, 3.0)):
            stream.xadd(key, {"event": json.dumps(event)})
        wait_for(lambda: RunCollective.objects.filter(run=run).count() == 3, timeout_s=5, message="the collectives")
    finally:
        relay.stop()
    assert list(RunEvent.objects.filter(run=run).values_list("seq", "action")) == [(2, "0F0")]
    assert list(RunCollective.objects.filter(run=run).values_list("seq", "rank", "device", "op", "group", "index",
                                                                  "bytes")) == [
        (1, 0, 0, "tp_all_gather", "tp", 0, 65536), (3, 1, 0, "tp_all_gather", "tp", 0, 65536),
        (4, 0, 0, "dp_all_reduce", "dp", 1, 65536)]
    assert relay.stored == 4 and relay.error is None
    # what the relay missed comes with the run's result, after the last seq
    assert run_events_backfill(run.pk, [_collective(0, 0, "dp_all_reduce", 1, 3.0),
                                        _collective(1, 0, "dp_all_reduce", 1, 3.1)]) == 1
    assert RunCollective.objects.get(run=run, rank=1, index=1).seq == 5
