"""A caller stops a run it no longer wants: ``run_plan`` asks ``should_stop`` while the ranks run, ends them when it
answers true, keeps what they already sent to the sink, and raises RunCancelled; no rank outlives the call."""

from __future__ import annotations

import json

import pytest

from executor.errors import RunCancelled
from executor.running.launch import run_plan
from executor_plans import every_kind_spec, one_f_one_b
from test_launch import live_children


def test_should_stop_ends_the_ranks_mid_run_and_keeps_the_events_so_far(tmp_path):
    sink = tmp_path / "events.jsonl"
    before = live_children()
    asked = {}

    def should_stop() -> bool:
        """True once the ranks have finished some actions of the run's second step."""
        if not sink.exists():
            return False
        steps = {json.loads(line).get("step") for line in sink.read_text().splitlines()}
        if 1 in steps and "ranks" not in asked:
            asked["ranks"] = live_children() - before
        return "ranks" in asked

    plan = one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7]], num_microbatches=4)
    steps = 100_000   # far more than the ranks can reach: the run is still going when it is stopped, however slow
    with pytest.raises(RunCancelled):
        run_plan(plan, every_kind_spec(), steps=steps, event_sink=str(sink), timeout_s=240, should_stop=should_stop)
    assert len(asked["ranks"]) == 2 and not (live_children() - before), "no rank outlives the call"
    events = [json.loads(line) for line in sink.read_text().splitlines()]
    assert events[-1] == {"type": "run_cancelled"}
    actions = [event for event in events if event["type"] == "action"]
    assert {0, 1} <= {event["step"] for event in actions} and max(event["step"] for event in actions) < steps - 1
