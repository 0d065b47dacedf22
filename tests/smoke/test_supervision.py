"""``make run``'s supervisor (``supervisord.conf``, the processes of ``adaptis_web/processes.py``) gives up a service
that keeps crashing, says so naming its log, and goes on serving with the others; a web server that cannot start
stops the whole product, since nothing would be served.

supervisord runs here as ``scripts/run.sh`` runs it (the same file, the virtual environment first on PATH), from a
copy of the file in a folder of the test's own so that its ``var/`` logs are the test's; the processes it starts
run the definitions ``make run`` runs, against the test database and Redis. A service is made to crash at once by
an invalid setting (``PLANNER_CONCURRENCY=0``, ``WEB_CONCURRENCY=none``), which its definition or gunicorn's
configuration refuses.
(The kill of each running service's main process, and that it comes back, is in ``test_make_run.py``.)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, _wait_for, free_port, service_env

# The processes need a database; what supervisord does with them does not depend on which.
pytestmark = [pytest.mark.xdist_group("product"),  # one product at a time (scripts/test.sh)
              pytest.mark.worker, pytest.mark.any_database, pytest.mark.timeout(240)]
GIVE_UP_WITHIN_S = 90  # 3 failed starts after 1, 2 and 3 s of backoff, each start a Python process on a busy host


class Supervisor:
    def __init__(self, folder: Path, **extra_env: str):
        shutil.copy(REPO_ROOT / "supervisord.conf", folder / "supervisord.conf")
        (folder / "var").mkdir()
        self.folder, self.output = folder, folder / "supervisord.out"
        self.port = extra_env.setdefault("ADAPTIS_PORT", str(free_port()))
        env = service_env(f"supervision-{os.getpid()}", **extra_env)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
        # appended to, as make (and scripts/run.sh) leave make run's output file: written at the file's own offset,
        # supervisord's log lines would erase the listener's
        with open(self.output, "ab") as out:
            self.process = subprocess.Popen([str(Path(sys.executable).parent / "supervisord"), "-c",
                                             str(folder / "supervisord.conf")], cwd=folder, env=env, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_for(self, words: str, timeout_s: float = GIVE_UP_WITHIN_S) -> None:
        _wait_for(lambda: words in self.text(), timeout_s=timeout_s, interval_s=0.5,
                  message=lambda: f"{words!r}:\n{self.text()[-6000:]}")

    def page_answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=10) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # whatever of its session is left
        except ProcessLookupError:
            pass
        self.process.wait()


@pytest.fixture
def supervisors(tmp_path):
    started: list[Supervisor] = []

    def start(name: str, **extra_env: str) -> Supervisor:
        folder = tmp_path / name
        folder.mkdir()
        started.append(Supervisor(folder, **extra_env))
        return started[-1]

    yield start
    for supervisor in started:
        supervisor.stop()


@pytest.mark.django_db(transaction=True)
def test_a_service_that_keeps_crashing_is_given_up_naming_its_log_and_the_web_goes_on(supervisors):
    product = supervisors("planner-crashes", PLANNER_CONCURRENCY="0")
    product.wait_for("planner failed to start (try 1); retrying after a pause (its log: var/planner.log)")
    # startretries=3: the first start and three more, the last one's try number is the count
    product.wait_for("planner keeps crashing: given up after 4 failed starts; see var/planner.log, then restart "
                     "make run")
    assert "environment variable PLANNER_CONCURRENCY must be >= 1; got 0" in \
        (product.folder / "var" / "planner.log").read_text()
    assert product.process.poll() is None, f"supervisord stopped:\n{product.text()}"
    _wait_for(product.page_answers, interval_s=0.5,
              message=lambda: f"the web server to answer:\n{product.text()[-6000:]}")
    product.wait_for("success: runner entered RUNNING state")  # the other worker goes on too
    # what supervisord wrote after the listener's lines, its stop included, left them in the output
    product.stop()
    for said in ("planner failed to start (try 1)", "planner keeps crashing: given up after 4 failed starts"):
        assert said in product.text(), product.text()[-6000:]


@pytest.mark.django_db(transaction=True)
def test_a_web_server_that_cannot_start_stops_the_product_naming_its_log(supervisors):
    product = supervisors("web-crashes", WEB_CONCURRENCY="none")
    product.wait_for("web keeps crashing: given up after 4 failed starts; see var/web.log, then restart make run")
    product.wait_for("nothing is served without the web server: stopping")
    try:
        product.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"supervisord did not stop after giving up the web server:\n{product.text()[-6000:]}")
    assert "invalid literal for int() with base 10: 'none'" in (product.folder / "var" / "web.log").read_text()
    for said in ("web failed to start (try 1)", "nothing is served without the web server: stopping"):
        assert said in product.text(), product.text()[-6000:]
