"""The README's first command, as a new user runs it: ``make run`` in a fresh copy of the tree, with a clean
virtual environment holding the runtime lock only, on a free port, against the machine's Redis.

Then, as the user would: the page answers; each service's main process (the planning and runs workers, the warden,
the web server) is killed with SIGKILL in turn, as the OOM killer or a crash would, while the page is requested
over and over: every request is answered, and the service is back (a new process, a worker answering ``celery
inspect ping``) within a minute; then both Celery workers answer ``celery inspect ping`` for a full minute; a
logged-in client creates a search job through the API and sees it succeed; a CPU run of the plan finishes with
observed events; and a SIGTERM sent to ``make`` alone stops every process it started.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
import redis

from tests.conftest import _wait_for, free_port, parent_of

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOKE_REDIS_URL = os.environ.get("SMOKE_REDIS_URL", "redis://127.0.0.1:6379/12")
START_TIMEOUT_S = 600  # a cold pip cache installs torch and the rest first
PING_WINDOW_S = 60
PING_INTERVAL_S = 10
WORKER_BOOT_S = 90
STOP_TIMEOUT_S = 20
BACK_WITHIN_S = 60
WATCH_TIMEOUT_S = 10   # each request of the page watch
LONG_RUN_STEPS, LONG_RUN_MICROBATCHES = 50, 64  # minutes of work: far longer than a stop may take
WORKERS = ("planner", "runner")

pytestmark = [pytest.mark.xdist_group("product"),  # one product at a time (scripts/test.sh)
              pytest.mark.smoke, pytest.mark.timeout(START_TIMEOUT_S + 600)]


def _copy_tree(destination: Path) -> None:
    """The files a clone of this tree would have: tracked ones and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for relative in filter(None, listed):
        source = REPO_ROOT / relative
        if source.is_file():
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def _processes_of(tree: Path, session: int) -> list[tuple[int, str]]:
    """Processes still in ``make``'s session, or working in the copied tree (the ranks of a run have sessions
    of their own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            cwd = os.readlink(entry / "cwd")
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read
        if fields[0] == "Z":
            continue
        if int(fields[3]) == session or cwd == str(tree) or cwd.startswith(f"{tree}/"):
            found.append((int(entry.name), command))
    return found


class Client:
    """A logged-in browser-like client: session cookie and CSRF token, JSON in and out."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        self.cookies = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def _csrf(self) -> str:
        return next(cookie.value for cookie in self.cookies if cookie.name == "csrftoken")

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers.update({"Content-Type": "application/json", "X-CSRFToken": self._csrf(),
                            "Referer": self.base_url + "/"})
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def json(self, method: str, path: str, body: dict | None = None, expect: int = 200) -> dict:
        status, content = self.request(method, path, body)
        assert status == expect, f"{method} {path}: HTTP {status} {content[:2000]!r}"
        return json.loads(content)

    def log_in(self, username: str, password: str) -> None:
        status, _ = self.request("GET", "/accounts/login/")
        assert status == 200
        form = urllib.parse.urlencode({"username": username, "password": password,
                                       "csrfmiddlewaretoken": self._csrf()}).encode()
        request = urllib.request.Request(f"{self.base_url}/accounts/login/", data=form, method="POST",
                                         headers={"Referer": f"{self.base_url}/accounts/login/"})
        with self.opener.open(request, timeout=30) as response:
            assert response.status == 200 and "/accounts/login/" not in response.url, "the demo login failed"


class Product:
    """``make run`` started in its own session from ``tree``; its output in ``log``."""

    def __init__(self, tree: Path, port: int, queue: str):
        self.tree, self.port, self.queue = tree, port, queue
        self.base_url = f"http://127.0.0.1:{port}"
        self.log = tree / "make-run.log"
        env = {key: value for key, value in os.environ.items()
               if key not in ("DATABASE_URL", "DEBUG", "VIRTUAL_ENV", "PYTHONPATH", "DJANGO_SETTINGS_MODULE",
                              "CELERY_RUNS_QUEUE", "LIVE_EVENTS_PREFIX", "MAKEFLAGS", "MAKELEVEL")}
        self.env = {**env, "ADAPTIS_PORT": str(port), "REDIS_URL": SMOKE_REDIS_URL, "CELERY_QUEUE": queue,
                    "LIVE_EVENTS_PREFIX": queue}
        self.start()

    def start(self) -> None:
        with open(self.log, "wb") as log:
            self.make = subprocess.Popen(["make", "run"], cwd=self.tree, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def logs(self) -> str:
        parts = [f"--- make run ---\n{self.output()[-6000:]}"]
        for name in ("planner.log", "runner.log", "warden.log", "web.log"):
            path = self.tree / "var" / name
            if path.exists():
                parts.append(f"--- var/{name} ---\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def wait_until_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.make.poll() is None, f"make run exited with {self.make.returncode}:\n{self.logs()}"
            if "AdaPtis Studio is up" in self.output():
                try:
                    with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=5) as response:
                        if response.status == 200:
                            return
                except OSError:
                    pass
            time.sleep(1)
        pytest.fail(f"make run did not answer within {START_TIMEOUT_S} s:\n{self.logs()}")

    def ping_workers(self) -> str:
        """``celery inspect ping`` of both workers, as a user would type it; its output."""
        host = socket.gethostname()
        result = subprocess.run(
            [str(self.tree / ".venv/bin/celery"), "-A", "adaptis_web", "inspect", "ping", "--timeout", "5",
             "-d", ",".join(f"{worker}@{host}" for worker in WORKERS)],
            cwd=self.tree, env=self.env, capture_output=True, text=True, timeout=60)
        return result.stdout + result.stderr

    def services(self) -> dict[str, int]:
        """The main process of each service: supervisord's children, told apart by their command lines."""
        found = _processes_of(self.tree, self.make.pid)
        supervisor = next((pid for pid, command in found if "supervisord -c" in command), None)
        assert supervisor is not None, f"no supervisord among {found}\n{self.logs()}"
        kinds = {"planner": "-n planner@", "runner": "-n runner@", "warden": "manage.py watch_work",
                 "web": "gunicorn adaptis_web.wsgi"}
        services = {}
        for pid, command in found:
            if parent_of(pid) == supervisor:
                services.update({name: pid for name, mark in kinds.items() if mark in command})
        return services

    def assert_nothing_left(self, after: str) -> None:
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while (left := _processes_of(self.tree, self.make.pid)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"processes left {STOP_TIMEOUT_S} s after {after}: {left}\n{self.logs()}"


class PageWatch(threading.Thread):
    """Requests the login page every 0.2 s until stopped; each request's outcome, labelled with what was being
    restarted at the time (``during``)."""

    def __init__(self, base_url: str):
        super().__init__(daemon=True)
        self.url, self.halt, self.during = f"{base_url}/accounts/login/", threading.Event(), ""
        self.outcomes: list[tuple[str, str]] = []   # (during, "ok" or the error)

    def run(self) -> None:
        while not self.halt.is_set():
            during = self.during
            try:
                with urllib.request.urlopen(self.url, timeout=WATCH_TIMEOUT_S) as response:
                    self.outcomes.append((during, "ok" if response.status == 200 else f"HTTP {response.status}"))
            except OSError as error:
                self.outcomes.append((during, f"{time.strftime('%X')}: {error}"))
            time.sleep(0.2)

    def answered_after(self, seen: int, count: int) -> bool:
        """Whether ``count`` more requests than ``seen`` got an outcome, waiting as long as they may take."""
        deadline = time.monotonic() + count * (WATCH_TIMEOUT_S + 1)
        while len(self.outcomes) < seen + count and time.monotonic() < deadline:
            time.sleep(0.1)
        return len(self.outcomes) >= seen + count

    def misses(self, during: str) -> list[str]:
        return [outcome for label, outcome in self.outcomes if label == during and outcome != "ok"]


def _orphaned_web_workers(product: Product, master: int) -> list[int]:
    """gunicorn processes left of a killed master: neither ``master`` nor its workers."""
    return [pid for pid, command in _processes_of(product.tree, product.make.pid)
            if "gunicorn adaptis_web.wsgi" in command and pid != master and parent_of(pid) != master]


def _kill_each_service_in_turn(product: Product) -> None:
    """SIGKILL each service's main process while the page is watched; each must come back within BACK_WITHIN_S.

    The page answers every request while a worker or the warden is down. While the web server's own master is
    down, connections are refused: its workers exit when their parent dies (gunicorn's rule) and the new master's
    workers bind again about a second later; there the page must answer again once the web server is back, and
    every request after that."""
    watch = PageWatch(product.base_url)
    watch.start()
    host = socket.gethostname()
    try:
        for name in ("planner", "runner", "warden", "web"):
            # A service that ran past its start (supervisord's startsecs), as one the OOM killer meets does; one that
            # dies while starting is retried with a backoff (test_supervision.py)
            _wait_for(lambda: f"success: {name} entered RUNNING state" in product.output(), timeout_s=BACK_WITHIN_S,
                      interval_s=0.5, message=lambda: f"{name} to start:\n{product.logs()}")
            before = product.services()
            assert name in before, f"{name} is not running: {before}\n{product.logs()}"
            watch.during = name
            os.kill(before[name], signal.SIGKILL)
            killed_at = time.monotonic()
            deadline = killed_at + BACK_WITHIN_S
            while True:
                now = product.services()
                back = name in now and now[name] != before[name]
                if back and name in WORKERS:
                    back = f"{name}@{host}: OK" in product.ping_workers()
                if back and name == "web":  # the old master's workers gone (they may answer a moment), the new
                    # one's answering: the watch's next two requests answered, the last one ok (a request caught
                    # by the old socket as it closed may take its whole timeout; then the loop looks again)
                    back = not _orphaned_web_workers(product, now["web"]) and \
                        watch.answered_after(len(watch.outcomes), 2) and watch.outcomes[-1] == ("web", "ok")
                if back:
                    break
                assert time.monotonic() < deadline, \
                    f"{name} was not back {BACK_WITHIN_S} s after its SIGKILL: {now}\n{product.logs()}"
                time.sleep(0.5)
            print(f"{name}: back {time.monotonic() - killed_at:.1f} s after its SIGKILL")  # for the log of a -s run
            watch.during = f"after {name}"
            assert product.make.poll() is None, f"make run stopped after {name}'s SIGKILL:\n{product.logs()}"
            assert f"{name} (pid {before[name]}) died unexpectedly; starting it again (its log: var/{name}.log)" \
                in product.output(), product.logs()
        # three more requests to the web server that came back, however long each takes on a loaded host
        assert watch.answered_after(len(watch.outcomes), 3), "the page watch stalled after the web server came back"
    finally:
        watch.halt.set()
        watch.join()
    for label in ("planner", "runner", "warden", "after planner", "after runner", "after warden", "after web"):
        assert not watch.misses(label), f"the page did not answer ({label}): {watch.misses(label)}"
    assert sum(outcome == "ok" for label, outcome in watch.outcomes if label == "after web") >= 3
    print(f"while the web server's master was down: {len(watch.misses('web'))} of "
          f"{sum(label == 'web' for label, _ in watch.outcomes)} requests refused")


def _missing_workers(output: str) -> list[str]:
    host = socket.gethostname()
    return [worker for worker in WORKERS if f"{worker}@{host}: OK" not in output]


def _ping_for_a_minute(product: Product, failures: list[str], finished: threading.Event) -> None:
    """Wait for both workers' first answer (they boot after the web server says it is up), then ping them
    every PING_INTERVAL_S for PING_WINDOW_S; every miss is a failure."""
    deadline = time.monotonic() + WORKER_BOOT_S
    while missing := _missing_workers(output := product.ping_workers()):
        if time.monotonic() > deadline:
            failures.append(f"{', '.join(missing)} never answered ping within {WORKER_BOOT_S} s:\n{output}")
            finished.set()
            return
        time.sleep(1)
    started = time.monotonic()
    while time.monotonic() - started < PING_WINDOW_S:
        time.sleep(PING_INTERVAL_S)
        output = product.ping_workers()
        if missing := _missing_workers(output):
            failures.append(f"{', '.join(missing)} did not answer ping {time.monotonic() - started:.0f} s after "
                            f"the first answer:\n{output}")
    finished.set()


def _wait_for_status(client: Client, path: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.json("GET", path)
        if body["status"] in ("succeeded", "failed", "cancelled"):
            return body
        time.sleep(1)
    pytest.fail(f"{path} did not finish within {timeout_s:g} s: {body}")


@pytest.fixture
def product(tmp_path):
    tree = tmp_path / "adaptis-studio"
    _copy_tree(tree)
    queue = f"smoke-{os.getpid()}"
    started = Product(tree, free_port(), queue)
    yield started
    if started.make.poll() is None:
        os.killpg(started.make.pid, signal.SIGKILL)
        started.make.wait()
    for pid, _ in _processes_of(tree, started.make.pid):  # after a failure: leave nothing running
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    client = redis.Redis.from_url(SMOKE_REDIS_URL)
    leftovers = [*client.scan_iter(f"*{queue}*")]
    if leftovers:
        client.delete(*leftovers)
    client.close()


def test_make_run_serves_a_search_and_a_cpu_run_and_stops_whole(product):
    product.wait_until_up()
    venv_python = product.tree / ".venv/bin/python"
    has_pytest = subprocess.run([str(venv_python), "-c", "import pytest"], capture_output=True).returncode == 0
    assert not has_pytest, "make run's virtual environment holds test packages: it must install the runtime lock only"

    with urllib.request.urlopen(f"{product.base_url}/accounts/login/", timeout=10) as response:
        assert response.status == 200 and b"password" in response.read()

    # One dead service never stops the others: it is started again and the page answers all along; the job and
    # the run below then prove the services came back whole.
    _kill_each_service_in_turn(product)

    failures: list[str] = []
    pinged = threading.Event()
    pinger = threading.Thread(target=_ping_for_a_minute, args=(product, failures, pinged), daemon=True)
    pinger.start()

    client = Client(product.base_url)
    client.log_in("demo", "demo-pass-2026")
    specs = client.json("GET", "/api/specs/?q=tiny-llama&page_size=200")["results"]
    spec = next(spec for spec in specs if spec["name"] == "tiny-llama")
    job = client.json("POST", "/api/jobs/", {
        "spec": spec["id"], "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": 4,
        "schedule": "adaptis", "seed": 0, "time_budget_s": 2}, expect=201)
    job = _wait_for_status(client, f"/api/jobs/{job['id']}/", timeout_s=180)
    assert job["status"] == "succeeded", job
    assert job["result"]["iteration_ms"] > 0 and job["plans"], job

    run = client.json("POST", "/api/runs/", {"plan": job["plans"][0]["id"], "steps": 1}, expect=201)
    run = _wait_for_status(client, f"/api/runs/{run['id']}/", timeout_s=300)
    assert run["status"] == "succeeded", run
    events = client.json("GET", f"/api/runs/{run['id']}/events/")
    assert events["finished"] and run["event_count"] > 0
    observed = events["events"]
    assert len(observed) == run["event_count"] and {event["rank"] for event in observed} == {0, 1}
    assert all(event["end_ms"] >= event["start_ms"] for event in observed)

    assert pinged.wait(WORKER_BOOT_S + PING_WINDOW_S + 60), "the minute of pings did not finish"
    assert not failures, "\n".join(failures)
    assert product.make.poll() is None, f"make run stopped by itself:\n{product.logs()}"
    services = [command for _, command in _processes_of(product.tree, product.make.pid)]
    assert any("manage.py watch_work" in command for command in services), f"no warden is running: {services}"

    # Stop it as a service manager would, while a long run keeps the runner and its torch ranks busy: a warm
    # shutdown alone would wait for the whole run. (zb-h1 splits the backward as the first job's AdaPtis plan
    # does, so the job plans on the profile that job measured instead of measuring another.)
    long_job = client.json("POST", "/api/jobs/", {
        "spec": spec["id"], "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": LONG_RUN_MICROBATCHES,
        "schedule": "zb-h1"}, expect=201)
    long_job = _wait_for_status(client, f"/api/jobs/{long_job['id']}/", timeout_s=120)
    long_run = client.json("POST", "/api/runs/", {"plan": long_job["plans"][0]["id"], "steps": LONG_RUN_STEPS},
                           expect=201)
    deadline = time.monotonic() + 120
    while client.json("GET", f"/api/runs/{long_run['id']}/events/")["last_seq"] == 0:
        assert time.monotonic() < deadline, f"the long run never started:\n{product.logs()}"
        time.sleep(0.5)
    ranks = [pid for pid, command in _processes_of(product.tree, product.make.pid)
             if "executor.running.worker" in command]
    assert len(ranks) == 2, "the running run's two rank processes were not found"

    product.make.send_signal(signal.SIGTERM)  # to make alone, as timeout(1), systemd or a container runtime do
    product.make.wait(timeout=STOP_TIMEOUT_S)
    product.assert_nothing_left("SIGTERM to make during a run")
    # make run's output is a file here: what supervisord logged after the listener's lines left them in it
    for name in ("planner", "runner", "warden", "web"):
        said = rf"{name} \(pid \d+\) died unexpectedly; starting it again \(its log: var/{name}\.log\)"
        assert re.search(said, product.output()), product.logs()

    # A make killed outright cannot pass anything on: the services must notice and stop by themselves.
    product.start()
    product.wait_until_up()
    product.make.send_signal(signal.SIGKILL)
    product.make.wait()
    product.assert_nothing_left("SIGKILL to make")
