"""executor.measuring.alongside.run_alongside: processes released together, their results collected, a failed or silent
process ending the wait with its name, none left behind; and all of it from inside a Celery prefork pool
process, which is daemonic."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import billiard
import pytest

from executor.measuring.alongside import run_alongside
from executor.errors import ExecutorError

REPO_ROOT = Path(__file__).resolve().parents[2]


def _doubled(value, start, results):
    start.wait()
    results.put(value * 2)


def _fails_or_waits(fails, start, results):
    if fails:
        raise ValueError("this process fails before the barrier")
    start.wait()
    results.put("never reached: the barrier waits for the failed process")


def _quits(start, results):
    start.wait()


def _silent(start, results):
    start.wait()
    time.sleep(300)


def _silent_after_its_pid(pid_file, start, results):
    Path(pid_file).write_text(str(os.getpid()))
    _silent(start, results)


def _released_together(marks_dir, index, start, results):
    """Process 0 reaches the barrier only after process 1 has: each marks when it passed the barrier, and
    process 1 reports whether process 0 had marked its arrival before it passed."""
    marks = Path(marks_dir)
    if index == 0:
        while not (marks / "arrived1").exists():
            time.sleep(0.01)
        (marks / "arrived0").touch()
    else:
        (marks / "arrived1").touch()
    start.wait()
    results.put((index, (marks / "arrived0").exists()))


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_each_process_gets_its_arguments_and_every_result_comes_back():
    assert sorted(run_alongside(_doubled, [(1,), (2,), (3,)], timeout_s=120)) == [2, 4, 6]


def test_no_process_passes_the_barrier_before_every_process_reached_it(tmp_path):
    outcomes = run_alongside(_released_together, [(str(tmp_path), 0), (str(tmp_path), 1)], timeout_s=120)
    assert sorted(outcomes) == [(0, True), (1, True)]


def test_a_process_that_dies_ends_the_wait_with_its_index_exit_code_and_error_not_at_the_timeout():
    with pytest.raises(ExecutorError, match=r"process 1 of 2 \(_fails_or_waits\) exited with code 1 before its "
                                            r"result: ValueError: this process fails before the barrier") as raised:
        run_alongside(_fails_or_waits, [(False,), (True,)], timeout_s=600)
    assert "Traceback" in raised.value.traceback_text


def test_a_process_that_exits_cleanly_without_a_result_ends_the_wait():
    with pytest.raises(ExecutorError, match=r"process 0 of 1 \(_quits\) exited with code 0 before its result"):
        run_alongside(_quits, [()], timeout_s=600)


def test_a_silent_process_times_out_and_is_killed():
    from test_launch import live_children   # (here: this module's processes import it, and that one imports torch)

    # However far the process got by the timeout (started, or not even that on a busy host), it is killed.
    before = live_children()
    with pytest.raises(ExecutorError, match=r"_silent: 1 of 1 processes gave no result within 2 s"):
        run_alongside(_silent, [()], timeout_s=2)
    assert live_children() - before == set()


def test_the_processes_die_with_a_caller_that_is_killed_outright(tmp_path):
    pid_file = tmp_path / "pid"
    caller = subprocess.Popen(
        [sys.executable, "-c", "import sys; from executor.measuring.alongside import run_alongside; "
                               "from test_run_alongside import _silent_after_its_pid; "
                               "run_alongside(_silent_after_its_pid, [(sys.argv[1],)], timeout_s=600)", str(pid_file)],
        cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(Path(__file__).parent)])})
    try:
        while not pid_file.exists() or not pid_file.read_text():
            assert caller.poll() is None, "the caller ended before its process started"
            time.sleep(0.05)
        process = int(pid_file.read_text())
        caller.send_signal(signal.SIGKILL)   # no cleanup runs: only the kernel can end its process now
        caller.wait()
        for _ in range(600):
            if _gone(process):
                break
            time.sleep(0.05)
        assert _gone(process), "the process outlived the caller that started it"
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()


def _doubled_in_a_pool_process() -> list:
    assert billiard.current_process().daemon, "a pool process is daemonic, as Celery's prefork pool's are"
    return sorted(run_alongside(_doubled, [(1,), (2,)], timeout_s=120))


def test_it_works_inside_a_daemonic_prefork_pool_process_as_celery_runs_tasks():
    with billiard.Pool(1) as pool:
        assert pool.apply(_doubled_in_a_pool_process) == [2, 4]
