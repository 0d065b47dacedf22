"""Where a run's events go: a JSON-lines file or a Redis stream, named the way the caller meant."""

import http.server
import json
import os
import threading
import time

import pytest

from executor.running.events import MAX_RETRY_INTERVAL_S, RETRY_INTERVAL_S, EventEmitter, open_sink, resolved_sink
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

    from executor.running.events import EventEmitter

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
    from executor.running.events import EventEmitter

    sink = _FlakySink()
    emitter = EventEmitter(sink, close_delivery_s=0.6)
    for index in range(7):
        emitter.emit({"type": "action", "n": index})
    emitter.close()  # does not raise: the run goes on and its result carries the events
    assert sink.taken == [] and emitter.undelivered == 7
    assert [event["n"] for event in emitter.events] == list(range(7))


class _Ingest(http.server.BaseHTTPRequestHandler):
    """A stand-in for the dashboard's ingest: records each POST's authorization and events; refuses while
    ``down`` is set (the server's class attributes are the shared state)."""

    down = False
    posts: list[tuple[str, list[dict]]] = []

    def do_POST(self):   # noqa: N802 - the handler name http.server calls
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if type(self).down:
            self.send_response(503)
        else:
            type(self).posts.append((self.headers["Authorization"], body["events"]))
            self.send_response(201)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def ingest():
    _Ingest.down, _Ingest.posts = False, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ingest)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/runs/7/events/"
    server.shutdown()


def test_an_https_sink_posts_bounded_batches_with_the_runs_secret(ingest, tmp_path):
    from executor.running.events import HTTP_BATCH_EVENTS, HttpSink

    token = tmp_path / "run.token"
    token.write_text("s3cret\n")
    sink = open_sink(ingest, str(token))
    assert isinstance(sink, HttpSink)
    events = [{"type": "action", "seq": index} for index in range(HTTP_BATCH_EVENTS + 5)]
    sink.write(events)
    assert [(auth, len(batch)) for auth, batch in _Ingest.posts] == [("Bearer s3cret", HTTP_BATCH_EVENTS),
                                                                    ("Bearer s3cret", 5)]
    assert [event for _, batch in _Ingest.posts for event in batch] == events


def test_an_https_sink_needs_a_readable_token_file(ingest, tmp_path):
    for token_file, reason in ((None, "give --token-file"), (str(tmp_path / "missing"), "cannot read")):
        with pytest.raises(SpecError) as error:
            open_sink(ingest, token_file)
        assert error.value.field == "event_token_file" and reason in error.value.reason


def test_a_refusing_ingest_is_retried_with_a_growing_interval_and_gets_everything_once_back(ingest, tmp_path):
    token = tmp_path / "run.token"
    token.write_text("s3cret")
    _Ingest.down = True
    emitter = EventEmitter(open_sink(ingest, str(token)))
    for index in range(3):
        emitter.emit({"type": "action", "seq": index})
    deadline = time.monotonic() + 10
    while emitter.failed_writes < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert emitter.failed_writes >= 3
    assert emitter.retry_interval_s() == min(MAX_RETRY_INTERVAL_S, RETRY_INTERVAL_S * 2 ** (emitter.failed_writes - 1))
    _Ingest.down = False
    emitter.close()
    assert [event["seq"] for _, batch in _Ingest.posts for event in batch] == [0, 1, 2]
    assert emitter.undelivered == 0
