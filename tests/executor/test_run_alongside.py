"""executor.host.run_alongside: processes released together, their results collected, a failed or silent
process ending the wait with its name, none left behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from executor.errors import ExecutorError
from executor.host import run_alongside


def _doubled(value, start, results):
    start.wait()
    results.put(value * 2)


def _fails_or_waits(fails, start, results):
    if fails:
        raise ValueError("this process fails before the barrier")
    start.wait()
    results.put("never reached: the barrier waits for the failed process")


def _silent(pid_file, start, results):
    Path(pid_file).write_text(str(os.getpid()))
    start.wait()
    time.sleep(300)


def test_each_process_gets_its_arguments_and_every_result_comes_back():
    assert sorted(run_alongside(_doubled, [(1,), (2,), (3,)], timeout_s=120)) == [2, 4, 6]


def test_a_process_that_dies_ends_the_wait_with_its_index_and_exit_code_not_at_the_timeout():
    with pytest.raises(ExecutorError, match=r"process 1 of 2 \(_fails_or_waits\) exited with code 1"):
        run_alongside(_fails_or_waits, [(False,), (True,)], timeout_s=600)


def test_a_silent_process_times_out_and_is_killed(tmp_path):
    pid_file = tmp_path / "pid"
    with pytest.raises(ExecutorError, match=r"_silent: 1 of 1 processes gave no result within 15 s"):
        run_alongside(_silent, [(str(pid_file),)], timeout_s=15)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
