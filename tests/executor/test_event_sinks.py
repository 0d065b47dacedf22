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
