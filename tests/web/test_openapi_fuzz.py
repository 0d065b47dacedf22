"""The OpenAPI schema tells the truth (issue 20, point 3).

Schemathesis reads ``/api/schema/`` from gunicorn started as in production (DEBUG off, two workers, the test
database and Redis) and sends what it generates to every operation, authenticated with a real API token of the
owner of a team that holds every kind of object. Every check runs: no server error; each status, body, content
type and header as documented; schema-valid data accepted and invalid data refused; access control; the stateful
phase that chains operations through their links. Path ids are drawn half the time from the objects that exist
(the other half are random, mostly no such object), so the operations reach their real logic. The run must end
with no failure and at least 1,000 requests.

Settings Schemathesis cannot infer are in ``schemathesis.toml`` next to this file, with the reason for each.
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adaptis_web.studio.models import MeasuredProfile
from adaptis_web.studio.services.accounts import token_create
from adaptis_web.studio.services.teams import invitation_create
from tests.conftest import REPO_ROOT, TEST_QUEUE, delete_test_keys, free_port, service_env, stop_worker

HERE = Path(__file__).resolve().parent
SEED = 20261125
MAX_EXAMPLES = 10  # per operation and phase; the coverage phase adds its boundary cases (~3,500 in all)
MIN_REQUESTS = 1000
FUZZ_QUEUE = f"{TEST_QUEUE}-fuzz"  # no worker consumes it; emptied after the run
# Operations that would take the team away from the token's owner for the rest of the run: their team id stays
# random (refused: no such team).
TEAM_ENDING = r"DELETE /api/teams/\{team_id\}/|POST /api/teams/\{team_id\}/(leave|transfer)/"


def _production_server(log_path: Path) -> tuple[subprocess.Popen, str]:
    """gunicorn as scripts/run.sh starts it (gunicorn.conf.py), DEBUG off, with throttles that the generator cannot
    reach (the throttles have tests of their own: here they would stop it after a few requests of each creating
    operation)."""
    port = free_port()
    unthrottled = {f"THROTTLE_{scope}": "100000/minute"
                   for scope in ("TOKEN_FAILURES", "TOKEN_CREATE", "SPECS", "JOBS", "RUNS")}
    env = service_env(FUZZ_QUEUE, DEBUG="false", SECRET_KEY=secrets.token_urlsafe(40),
                      ALLOWED_HOSTS="127.0.0.1,localhost", SECURE_SSL_REDIRECT="false", SECURE_COOKIES="false",
                      **unthrottled)
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "gunicorn"), "adaptis_web.wsgi:application", "--bind",
             f"127.0.0.1:{port}", "--config", "gunicorn.conf.py"],
            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"gunicorn exited:\n{log_path.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server, url
        except OSError:
            time.sleep(0.2)
    stop_worker(server)
    pytest.fail(f"gunicorn did not listen within 60 s:\n{log_path.read_text()[-3000:]}")


def _config(crew, spare_token_key: str, invitation_key: str, profile_id: int) -> str:
    """Dictionaries of the ids that exist (top-level keys: before any table), the committed settings, then the
    bindings of those dictionaries to the path parameters."""
    people, planned = crew.people, crew.planned
    ids = {
        "team_id": [people.team.pk],
        "user_id": [crew.admin.pk, crew.viewer.pk, crew.extra.pk, people.member.pk],
        "spec_id": [planned.spec.pk],
        "cluster_id": [crew.cluster.pk, crew.deleted_cluster.pk],
        "job_id": [planned.job.pk, crew.queued_job.pk],
        "plan_id": [planned.plan.pk],
        "run_id": [crew.finished_run.pk, crew.deleted_run.pk],
        "profile_id": [profile_id],
        "object_id": sorted({planned.spec.pk, crew.cluster.pk, planned.job.pk, planned.plan.pk,
                             crew.finished_run.pk}),
        "token_key": [spare_token_key],
        "key": [invitation_key],
    }
    lines = ["# Written by test_openapi_fuzz.py: the ids that exist"]
    for name, values in ids.items():
        lines.append(f"dictionaries.{name}.values = {json.dumps([str(value) for value in values])}")
    lines += ["", (HERE / "schemathesis.toml").read_text()]
    def bound(names) -> str:
        return ", ".join(f'"path.{name}" = {{ dictionary = "{name}", probability = 0.5 }}' for name in names)

    lines += ["", "[[operations]]", f"exclude-name-regex = '^({TEAM_ENDING})$'", f"parameters = {{ {bound(ids)} }}",
              "", "[[operations]]", f"include-name-regex = '^({TEAM_ENDING})$'",
              f"parameters = {{ {bound(name for name in ids if name != 'team_id')} }}"]
    return "\n".join(lines) + "\n"


@pytest.mark.django_db(transaction=True)
def test_every_operation_answers_as_its_schema_says(crew, tmp_path):
    people = crew.people
    _, token = token_create(user=people.owner, name="schemathesis", expires_in_days=1)
    spare, _ = token_create(user=people.owner, name="spare", expires_in_days=1)
    _, invitation_key = invitation_create(team=people.outsider_team, by=people.outsider, role="member")
    profile = MeasuredProfile.objects.create(spec=crew.planned.spec, created_by=people.owner, num_ranks=2,
                                             split_backward=False)
    config = tmp_path / "schemathesis.toml"
    config.write_text(_config(crew, spare.token_key, invitation_key, profile.pk))
    server, url = _production_server(tmp_path / "gunicorn.log")
    command = [str(Path(sys.executable).parent / "st"), "--no-color", "--config-file", str(config), "run",
               f"{url}/api/schema/", "--checks", "all", "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED),
               "--generation-deterministic", "--continue-on-failure", "--header", f"Authorization: Token {token}"]
    try:
        finished = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=280)
    finally:
        stop_worker(server)
        delete_test_keys(f"{FUZZ_QUEUE}*")  # the jobs, runs and profiles it queued: nobody runs them
    output = finished.stdout + finished.stderr
    print(output[-6000:])  # the summary, in the log of a run with -s or -rA
    assert finished.returncode == 0, output[-20000:]
    generated = re.search(r"(\d+) generated", output)
    assert generated and int(generated.group(1)) >= MIN_REQUESTS, output[-5000:]
    server_log = (tmp_path / "gunicorn.log").read_text(errors="replace")
    assert "Traceback" not in server_log, server_log[-5000:]
