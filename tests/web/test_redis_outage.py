"""Timings survive a Redis outage: a private redis-server (real process) is killed in the middle of a real
two-rank run and started again empty five seconds later. The run succeeds, and every action the ranks measured is
stored exactly once (stored = measured), whether it came through Redis or was held back and delivered later."""

import subprocess
import threading
import time
from pathlib import Path

import pytest
import redis

from adaptis_web.studio.models import JobStatus, Run, RunEvent
from adaptis_web.studio.runs.local_runs import run_execute
from tests.conftest import free_port

pytestmark = pytest.mark.django_db(transaction=True)

OUTAGE_S = 5.0
STEPS = 40


class PrivateRedis:
    """A redis-server of this test's own on a free port, keeping nothing on disk (as a restarted one loses all)."""

    def __init__(self, directory: Path):
        self.port = free_port()
        self.directory = directory
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the private redis-server did not start"
                time.sleep(0.05)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def private_redis(tmp_path):
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    if server.process.poll() is None:
        server.kill()


def test_a_run_survives_a_redis_restart_and_stores_every_measured_action(people, planned, private_redis, settings):
    settings.REDIS_URL = private_redis.url  # the run's event stream and its relay; the broker is not involved
    run = Run.objects.create(plan=planned.plan, created_by=people.owner, world_size=2, steps=STEPS)
    actions = planned.plan.plan_doc["actions"]  # one list of action names per device
    measured_per_step = sum(len(device_actions) for device_actions in actions)
    outage = {}

    def outage_mid_run():
        deadline = time.monotonic() + 120
        while RunEvent.objects.filter(run=run).count() < measured_per_step and time.monotonic() < deadline:
            time.sleep(0.05)
        outage["stored_before"] = RunEvent.objects.filter(run=run).count()
        private_redis.kill()
        outage["at"] = time.monotonic()
        time.sleep(OUTAGE_S)
        private_redis.start()
        outage["back"] = time.monotonic()

    fault = threading.Thread(target=outage_mid_run)
    fault.start()
    started = time.monotonic()
    run_execute(run_id=run.pk)
    finished = time.monotonic()
    fault.join(timeout=60)

    run.refresh_from_db()
    assert run.status == JobStatus.SUCCEEDED, run.error
    assert outage["at"] < finished, "the outage must fall inside the run"
    assert outage["stored_before"] < STEPS * measured_per_step, "the run was over before Redis went away"
    stored = list(RunEvent.objects.filter(run=run).values_list("rank", "step", "action"))
    assert len(stored) == len(set(stored)), "an event was stored twice"
    expected = {(device, step, action) for step in range(STEPS)
                for device, device_actions in enumerate(actions) for action in device_actions}
    assert set(stored) == expected, f"missing {len(expected - set(stored))}, extra {len(set(stored) - expected)}"
    assert run.summary["events_undelivered"] == 0, "the ranks delivered what they held back once Redis was back"
    assert finished - started < 120
