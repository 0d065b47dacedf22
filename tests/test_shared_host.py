"""The benchmarks' shared-host helpers (``benchmarks/shared_host.py``): a launch that a rare rank abort lost is
run once more, and a second failure is not hidden."""

import sys
from pathlib import Path

import pytest

from executor.errors import ExecutorError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from shared_host import retried_once  # noqa: E402


def test_retried_once_runs_again_after_a_rank_failure_and_gives_up_after_the_second(capsys):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise ExecutorError("aborted", rank=1, traceback_text="SIGABRT")
        return "result"

    assert retried_once(flaky) == "result" and len(calls) == 2
    assert "rank 1: aborted" in capsys.readouterr().err

    def broken():
        raise ExecutorError("aborted again", rank=0)

    with pytest.raises(ExecutorError, match="aborted again"):
        retried_once(broken)
