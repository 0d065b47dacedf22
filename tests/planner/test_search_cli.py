"""``python -m planner search``: writes the plan, prints a JSON summary, reports progress on stderr."""

import json

from planner.cli import EXIT_INVALID_INPUT, EXIT_OK, main
from planner.plan import load_plan
from planner.plan_check import validate_plan
from tests.planner.search_profiles import hybrid_profile


def test_search_writes_a_valid_plan_and_a_summary(tmp_path, capsys):
    profile = hybrid_profile()
    profile_path = tmp_path / "profile.json"
    profile_path.write_text(json.dumps(profile.to_dict()))
    out = tmp_path / "plan.json"
    code = main(["search", "--profile", str(profile_path), "--devices", "4", "--microbatches", "8",
                 "--cluster", "h100-sxm-1x8", "--time-budget", "5", "--seed", "1", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == EXIT_OK
    plan = load_plan(json.loads(out.read_text()))
    validate_plan(plan, profile.num_layers)
    summary = json.loads(captured.out)
    assert summary["strategy"] == "adaptis" and summary["out"] == str(out)
    assert summary["iteration_ms"] == plan.predicted["iteration_ms"]
    assert summary["iteration_ms"] >= summary["lower_bound_ms"]
    assert summary["iteration_ms"] <= summary["baselines"]["interleaved-1f1b"]
    assert "%]" in captured.err and "done" in captured.err
    # What sets the bound and what memory allows the plan's partition, in words (the H100's 80 GiB is the limit).
    assert summary["bound_set_by"] == plan.meta["binding"]["text"] and summary["bound_set_by"]
    assert summary["plan_memory"] == plan.meta["memory_binding"]["text"] and "micro-batches in flight" in \
        summary["plan_memory"]


def test_a_memory_limit_too_small_exits_with_the_field(tmp_path, capsys):
    profile_path = tmp_path / "profile.json"
    profile_path.write_text(json.dumps(hybrid_profile().to_dict()))
    code = main(["search", "--profile", str(profile_path), "--devices", "4", "--microbatches", "8",
                 "--memory-limit", "1000", "--out", str(tmp_path / "plan.json")])
    assert code == EXIT_INVALID_INPUT
    error = json.loads(capsys.readouterr().err.strip().splitlines()[-1])["error"]
    assert error["field"] == "memory_limit_bytes" and "bytes" in error["reason"]
