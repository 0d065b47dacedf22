"""run_plan end to end on real gloo ranks: events reach Redis and JSONL sinks with aligned times, failures
name the failing rank with its traceback, and no rank process outlives the call."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from executor.errors import ExecutorError
from executor.running.launch import run_plan
from executor_plans import every_kind_spec, one_f_one_b
from planner.errors import SpecError
from planner.spec.presets import load_model_preset

REDIS_URL = "redis://127.0.0.1:6379/0"


def children_of(pid: int) -> set[int]:
    """Processes whose parent is ``pid``."""
    children = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                children.add(int(entry))
    return children


def descendants_of(pid: int) -> set[int]:
    """Processes whose parent is ``pid``, or a descendant of it."""
    found, frontier = set(), {pid}
    while frontier:
        frontier = set().union(*(children_of(parent) for parent in frontier)) - found
        found |= frontier
    return found


def live_children() -> set[int]:
    """Live processes this test process started, directly or through the zygote that forks its ranks
    (``executor.running.processes``), but not the zygote: it lives as long as the thread that started it, to fork
    the next run's ranks. Other fixtures (the Celery worker of the web tests) may own processes too, so tests compare
    against a snapshot taken before the launch. A process with no command line is exiting (its memory is gone): the
    zygote of a thread that has just ended, say."""
    return {pid for pid in descendants_of(os.getpid())
            if alive(pid) and (command := _cmdline(pid)) and "executor.running.processes zygote" not in command}


def assert_run_order(events: list[dict]) -> None:
    """One run_started, before rank 0's actions, and run_finished last. Each rank sends its events from a thread of
    its own, so rank 0's run_started may come after another rank's first action (the web takes a run's lifecycle in
    any order: ``runs.cluster_runs``); rank 0 sends run_finished once every rank has delivered its events."""
    kinds = [event["type"] for event in events]
    assert kinds.count("run_started") == 1 and kinds[-1] == "run_finished", kinds
    assert kinds.index("run_started") < min(index for index, event in enumerate(events)
                                            if event["type"] == "action" and event["rank"] == 0)


@pytest.fixture(scope="module")
def three_rank_run(tmp_path_factory):
    stream = f"adaptis:test:exec:{uuid.uuid4().hex}"
    client = redis.Redis.from_url(REDIS_URL)
    plan = one_f_one_b([[0, 1, 2], [3, 4, 5], [6, 7]], num_microbatches=4)
    result = run_plan(plan, every_kind_spec(), steps=2, event_sink=f"{REDIS_URL}#{stream}", timeout_s=240)
    entries = client.xrange(stream)
    client.delete(stream)
    return plan, result, [json.loads(fields[b"event"]) for _, fields in entries]


def test_redis_stream_gets_start_every_action_and_finish(three_rank_run):
    plan, result, streamed = three_rank_run
    assert_run_order(streamed)
    assert next(event for event in streamed if event["type"] == "run_started")["world_size"] == 3
    assert streamed[-1]["summary"] == result.summary
    actions = [event for event in streamed if event["type"] == "action"]
    assert len(actions) == plan.num_actions() * 2
    expected_keys = {"type", "rank", "device", "coordinate", "action", "stage", "kind", "microbatch", "step",
                     "start_ms", "end_ms"}
    assert all(set(event) == expected_keys for event in actions)
    # a pipeline alone: rank r is pipeline rank r, every other coordinate 0
    assert all(event["coordinate"] == {"tp": 0, "cp": 0, "dp": 0, "pp": event["rank"], "ep": 0} for event in actions)
    assert sorted((e["step"], e["action"]) for e in actions) == sorted((e["step"], e["action"]) for e in result.events)


def test_processes_of_one_host_share_one_monotonic_clock():
    from executor.running.timing import clock_identity

    child = subprocess.run([sys.executable, "-c", "from executor.running.timing import clock_identity; "
                            "print(clock_identity())"], capture_output=True, text=True, check=True,
                           cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert clock_identity() is not None and child.stdout.strip() == clock_identity()


def test_times_are_aligned_across_ranks_so_every_receive_starts_after_its_send(three_rank_run):
    plan, result, _ = three_rank_run
    by_action = {(e["step"], e["action"]): e for e in result.events}
    checked = 0
    for (step, name), event in by_action.items():
        if event["kind"] == "F" and event["stage"] > 0:
            producer = by_action[(step, f"{event['stage'] - 1}F{event['microbatch']}")]
            assert event["start_ms"] >= producer["end_ms"] - 0.5, (name, event, producer)
            checked += 1
        if event["kind"] == "B" and event["stage"] < plan.num_stages - 1:
            producer = by_action[(step, f"{event['stage'] + 1}B{event['microbatch']}")]
            assert event["start_ms"] >= producer["end_ms"] - 0.5, (name, event, producer)
            checked += 1
    assert checked == 2 * 2 * 4 * 2


def test_summary_matches_an_independent_count_of_the_events(three_rank_run):
    plan, result, _ = three_rank_run
    steady = [e for e in result.events if e["step"] == 1]
    iteration = max(e["end_ms"] for e in steady) - min(e["start_ms"] for e in steady)
    assert result.summary["iteration_ms"] == pytest.approx(iteration)
    for device in range(3):
        busy = sum(e["end_ms"] - e["start_ms"] for e in steady if e["device"] == device)
        row = result.summary["per_device"][device]
        assert row["busy_ms"] == pytest.approx(busy)
        assert row["bubble_ms"] == pytest.approx(iteration - busy)
    assert result.loss == result.losses[-1] and len(result.losses) == 2


@pytest.fixture(scope="module")
def two_rank_run_from_elsewhere(tmp_path_factory):
    """One two-rank run started from a directory of the caller's with a JSONL sink given relative to it: the plan,
    the result, the sink's path, and the files the run's job directory held when the launcher removed it."""
    caller = tmp_path_factory.mktemp("caller")
    remove = shutil.rmtree
    job_files: list[str] = []

    def list_then_remove(path, ignore_errors=False):
        job_files.extend(entry.name for entry in Path(path).iterdir())
        remove(path, ignore_errors=ignore_errors)

    plan = one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7]], num_microbatches=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(caller)
        patch.setattr(shutil, "rmtree", list_then_remove)
        result = run_plan(plan, every_kind_spec(), event_sink="events.jsonl", steps=1, timeout_s=240)
    return plan, result, caller / "events.jsonl", job_files


def test_jsonl_sink_receives_the_same_event_schema_at_a_path_relative_to_the_caller(two_rank_run_from_elsewhere):
    # The ranks run in the repository; a relative path must still land in the caller's directory.
    plan, result, path, _ = two_rank_run_from_elsewhere
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert_run_order(lines)
    assert len([e for e in lines if e["type"] == "action"]) == plan.num_actions() == len(result.events)


def test_a_failing_rank_ends_the_run_with_its_rank_and_traceback_and_leaves_no_process(tmp_path):
    checkpoint = tmp_path / "layers"
    # Rank 1 owns layer 5; a directory where its checkpoint file should go makes exactly that rank fail.
    (checkpoint / "layer0005.pt").mkdir(parents=True)
    plan = one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7]], num_microbatches=2)
    stream = f"adaptis:test:exec:{uuid.uuid4().hex}"
    client = redis.Redis.from_url(REDIS_URL)
    children_before = live_children()
    with pytest.raises(ExecutorError) as caught:
        run_plan(plan, every_kind_spec(), checkpoint_dir=str(checkpoint), event_sink=f"{REDIS_URL}#{stream}",
                 timeout_s=240)
    failed = [json.loads(fields[b"event"]) for _, fields in client.xrange(stream)]
    client.delete(stream)
    assert caught.value.rank == 1
    assert "_save_layers" in caught.value.traceback_text and "Is a directory" in caught.value.traceback_text
    assert [e for e in failed if e["type"] == "run_failed"] == [
        {"type": "run_failed", "rank": 1, "error": caught.value.message}]
    assert live_children() - children_before == set()


def test_a_run_past_its_timeout_is_killed_and_reported():
    plan = one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7]], num_microbatches=2)
    children_before = live_children()
    with pytest.raises(ExecutorError, match="timed out") as caught:
        # far more steps than the run can reach in its time, however fast its ranks start
        run_plan(plan, every_kind_spec(), steps=100_000, timeout_s=0.5)
    assert caught.value.rank is None
    assert live_children() - children_before == set()


def test_a_realistic_model_is_refused_with_a_pointer_to_scale_spec():
    spec = load_model_preset("llama-3-8b")
    plan = one_f_one_b([[i for i in range(17)], [i for i in range(17, spec.num_layers)]], num_microbatches=2)
    with pytest.raises(SpecError) as caught:
        run_plan(plan, spec)
    assert caught.value.field == "model" and "scale_spec" in caught.value.reason


def test_a_redis_sink_without_a_stream_key_is_rejected_before_launch():
    plan = one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7]], num_microbatches=2)
    children_before = live_children()
    with pytest.raises(SpecError) as caught:
        run_plan(plan, every_kind_spec(), event_sink=REDIS_URL)
    assert caught.value.field == "event_sink"
    assert live_children() - children_before == set()


def test_a_rank_that_dies_after_marking_its_work_done_is_a_teardown_abort_not_a_failure(tmp_path):
    from executor.running.launch import _failed_ranks
    from executor.running.worker import done_file

    done_file(tmp_path, 1).touch()
    # rank 0 still running, rank 1 killed by SIGABRT after its work was done, rank 2 died mid-run
    assert _failed_ranks(tmp_path, [None, -6, 1]) == [2]
    assert _failed_ranks(tmp_path, [0, -6, 0]) == []
    assert _failed_ranks(tmp_path, [-6, 0, 0]) == [0]


def test_every_rank_marks_its_work_done_before_teardown(two_rank_run_from_elsewhere):
    """A real run leaves each rank's done marker in its job directory by the time the processes end."""
    *_, job_files = two_rank_run_from_elsewhere
    assert {"rank0.done", "rank1.done"} <= set(job_files)


LAUNCHER = """
import sys
sys.path.insert(0, {tests!r})
from executor.running.launch import run_plan
from executor_plans import every_kind_spec, one_f_one_b
run_plan(one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7]], num_microbatches=2), every_kind_spec(), steps=100000,
         timeout_s=600)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_ranks_die_with_a_launcher_that_is_killed_without_cleaning_up():
    """SIGKILL leaves the launcher no chance to stop its ranks; the kernel must end them (PR_SET_PDEATHSIG)."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER.format(tests=os.path.dirname(__file__))],
                                cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        deadline = time.monotonic() + 120
        ranks: set[int] = set()
        while len(ranks) < 2 and time.monotonic() < deadline:
            assert launcher.poll() is None, "the launcher ended before its ranks started"
            ranks = {pid for pid in descendants_of(launcher.pid) if "executor.running.worker" in _cmdline(pid)}
            time.sleep(0.1)
        assert len(ranks) == 2
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in ranks) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in ranks)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_finished_rank_exits_with_its_code_and_its_output_flushed():
    completed = subprocess.run([sys.executable, "-c", "import sys; from executor.running.processes import exit_rank; "
                                "print('summary', end=''); sys.stderr.write('note'); exit_rank(3)"],
                               capture_output=True, text=True,
                               cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert completed.returncode == 3 and completed.stdout == "summary" and completed.stderr == "note"


def _rank_pid(rank: int, among: set[int]) -> int | None:
    for pid in among:
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            command = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"executor.running.worker" in command and f"RANK={rank}".encode() in environ:
            return pid
    return None


def test_a_rank_killed_mid_run_is_named_as_the_one_that_died_not_its_peer(tmp_path):
    """The survivor records "Connection reset by peer"; the killed rank records nothing. The report must name
    the killed rank and its signal."""
    import signal
    import threading

    stream = f"adaptis:test:exec:{uuid.uuid4().hex}"
    plan = one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7]], num_microbatches=4)
    children_before = live_children()
    outcome: dict = {}

    def launch():
        try:  # far more steps than the run can reach: it is still running when its rank is killed, however slow
            run_plan(plan, every_kind_spec(), steps=100_000, timeout_s=240, event_sink=f"{REDIS_URL}#{stream}")
        except ExecutorError as error:
            outcome["error"] = error

    thread = threading.Thread(target=launch)
    thread.start()
    client = redis.Redis.from_url(REDIS_URL)
    deadline = time.monotonic() + 120
    while client.xlen(stream) < 20:  # the ranks are well into their steps
        assert time.monotonic() < deadline and thread.is_alive(), "the run did not start"
        time.sleep(0.1)
    victim = _rank_pid(1, live_children() - children_before)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    thread.join(timeout=120)
    client.delete(stream)
    error = outcome["error"]
    assert error.rank == 1 and "killed by SIGKILL" in error.message
    assert live_children() - children_before == set()
