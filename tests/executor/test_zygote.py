"""The zygote that forks local ranks and measuring processes (``executor.running.processes``): each child runs
``python -m MODULE ARGS`` with the request's arguments, environment, directory and stderr file, in a session of its
own, shows ``ps`` and ``/proc`` that command and environment, and its exit status comes back as ``Popen``'s would;
the zygote lives as long as the thread that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from executor.running.processes import Zygote, zygote

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.executor.zygote_child"


def _env(**extra: str) -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO_ROOT), **extra)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_a_child_runs_the_module_as_asked_and_its_exit_status_comes_back(tmp_path):
    forker = zygote(str(REPO_ROOT), _env())
    stderr = tmp_path / "child.stderr"
    child = forker.start(MODULE, ["a", "b c"], cwd=str(tmp_path), env=_env(ZYGOTE_TEST_EXIT="3", RANK="5"),
                         stderr_path=str(stderr))
    assert child.wait(timeout=60) == 3 and child.poll() == 3
    said = stderr.read_text()
    assert f"args=['a', 'b c'] rank=5 cwd={tmp_path} stdin=''" in said, said


def test_a_running_child_is_named_as_what_it_runs_in_a_session_of_its_own_and_can_be_killed(tmp_path):
    forker = zygote(str(REPO_ROOT), _env())
    child = forker.start(MODULE, [str(tmp_path)], cwd=str(REPO_ROOT), env=_env(ZYGOTE_TEST_EXIT="wait", RANK="7"),
                         stderr_path=str(tmp_path / "child.stderr"))
    deadline = time.monotonic() + 60
    said = tmp_path / "child.stderr"   # the child creates it
    while not said.exists() or "rank=7" not in said.read_text():
        assert time.monotonic() < deadline and child.poll() is None, "the child never started"
        time.sleep(0.05)
    command = Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0")
    environ = Path(f"/proc/{child.pid}/environ").read_bytes().split(b"\0")
    assert command[1:4] == [b"-m", MODULE.encode(), str(tmp_path).encode()], command
    assert b"RANK=7" in environ and b"ZYGOTE_TEST_EXIT=wait" in environ
    assert os.getsid(child.pid) == child.pid and os.getpgid(child.pid) == child.pid
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.2)
    child.kill()
    assert child.wait(timeout=30) == -signal.SIGKILL


def test_the_zygote_lives_as_long_as_the_thread_that_started_it_and_its_children_with_it(tmp_path):
    started: dict = {}

    def launch():
        forker = zygote(str(REPO_ROOT), _env())
        started["zygote"] = forker.process.pid
        started["child"] = forker.start(MODULE, [], cwd=str(REPO_ROOT), env=_env(ZYGOTE_TEST_EXIT="wait"),
                                        stderr_path=str(tmp_path / "child.stderr")).pid
        assert zygote(str(REPO_ROOT), _env()) is forker, "one zygote per thread, reused"

    thread = threading.Thread(target=launch)
    thread.start()
    thread.join()
    assert not _gone(started["zygote"]) or _gone(started["child"])   # (it may already be going)
    deadline = time.monotonic() + 30
    while not (_gone(started["zygote"]) and _gone(started["child"])):
        assert time.monotonic() < deadline, "the zygote or its child outlived the thread that started them"
        time.sleep(0.05)
    assert zygote(str(REPO_ROOT), _env()).process.pid != started["zygote"]   # this thread's own


def test_a_zygote_whose_launcher_closed_it_ends():
    forker = Zygote(str(REPO_ROOT), _env())
    forker.close()
    assert forker.process.returncode == 0 and not forker.alive()
