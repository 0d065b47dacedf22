"""Where a run's events go: a JSON-lines file or a Redis stream, named the way the caller meant."""

import os

import pytest

from executor.events import open_sink, resolved_sink
from planner.errors import SpecError


def test_file_paths_are_made_absolute_against_the_callers_directory_and_urls_are_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolved_sink("run.jsonl") == os.path.join(str(tmp_path.resolve()), "run.jsonl")
    assert resolved_sink("file:out/run.jsonl") == os.path.join(str(tmp_path.resolve()), "out", "run.jsonl")
    assert resolved_sink("/abs/run.jsonl") == "/abs/run.jsonl"
    assert resolved_sink("redis://127.0.0.1:6379/0#runs:1") == "redis://127.0.0.1:6379/0#runs:1"
    assert resolved_sink("s3://bucket/key") == "s3://bucket/key"   # left for open_sink to refuse by name


def test_a_sink_it_cannot_open_names_the_field_and_the_reason():
    with pytest.raises(SpecError) as error:
        open_sink("s3://bucket/key")
    assert error.value.field == "event_sink" and "unsupported scheme 's3'" in error.value.reason
    with pytest.raises(SpecError) as error:
        open_sink("redis://127.0.0.1:6379/0")
    assert "stream key" in error.value.reason


class _FlakySink:
    """A sink that refuses every write while ``down`` is set, and records what it took."""

    def __init__(self):
        self.down = True
        self.taken: list[dict] = []

    def write(self, events):
        if self.down:
            raise ConnectionError("sink is down")
        self.taken.extend(events)

    def close(self):
        pass


def test_events_held_back_by_a_failing_sink_are_delivered_in_order_when_it_recovers():
    import time

    from executor.events import EventEmitter

    sink = _FlakySink()
    emitter = EventEmitter(sink, close_delivery_s=5)
    for index in range(50):
        emitter.emit({"type": "action", "n": index})
    time.sleep(0.3)
    assert sink.taken == [] and emitter.failed_writes >= 1
    sink.down = False
    for index in range(50, 60):
        emitter.emit({"type": "action", "n": index})
    emitter.close()
    assert [event["n"] for event in sink.taken] == list(range(60))
    assert emitter.undelivered == 0 and len(emitter.events) == 60


def test_a_sink_down_past_the_close_deadline_loses_nothing_from_the_result():
    from executor.events import EventEmitter

    sink = _FlakySink()
    emitter = EventEmitter(sink, close_delivery_s=0.6)
    for index in range(7):
        emitter.emit({"type": "action", "n": index})
    emitter.close()  # does not raise: the run goes on and its result carries the events
    assert sink.taken == [] and emitter.undelivered == 7
    assert [event["n"] for event in emitter.events] == list(range(7))
