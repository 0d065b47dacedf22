"""The OpenAPI schema tells the truth (issue 20, point 3).

Schemathesis reads ``/api/schema/`` from gunicorn started as in production (DEBUG off, two workers, the test
database and Redis) and sends what it generates to every operation, authenticated with a real API token of the
owner of a team that holds every kind of object. Every check runs: no server error; each status, body, content
type and header as documented; schema-valid data accepted and invalid data refused; access control; a created
object available, a deleted one gone. Path ids, and the body fields that name an object, are drawn half the time
from the objects that exist (the other half are random, mostly no such object), so the operations reach their real
logic. The examples, coverage and fuzzing phases must end with no failure and at least 1,000 requests.

Then the stateful phase chains operations through the links the schema declares (spec -> job -> plan -> run ->
re-plan, clusters, profiles, teams and members, tokens; ``adaptis_web/studio/api/schema_links.py``): it creates,
changes and deletes objects of its own. It must end with no failure, and must have run: at least MIN_SCENARIOS
scenarios over at least MIN_LINKS of the links.

Settings Schemathesis cannot infer are in ``schemathesis.toml`` next to this file, with the reason for each.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from adaptis_web.studio.accounts.teams import invitation_create
from adaptis_web.studio.accounts.tokens import token_create
from adaptis_web.studio.models import MeasuredProfile
from planner.cluster import preset_names
from tests.conftest import TEST_QUEUE, delete_test_keys, start_web_server, stop_worker

HERE = Path(__file__).resolve().parent
SEED = 20261125
MAX_EXAMPLES = 10  # per operation and phase; the coverage phase adds its boundary cases (~3,150 in all)
MIN_REQUESTS = 1000
# The stateful phase runs on its own, for this long. Schemathesis ends a run of scenarios at Hypothesis' first
# "inconsistent data generation": a scenario replayed against an API whose state has moved on (a list that grew, a
# name now taken) draws differently. That comes after a few dozen scenarios; under --max-time it starts new runs
# until the time is spent. A time limit on the whole run would cut the coverage phase short instead, to keep time
# for the phases after it. 60 s, not 20: on 2026-11-28 the host ran at 2.2x its usual probe time (benchmarks/
# host_speed.py) and, beside the suite's other worker, 20 s gave 12 scenarios, under MIN_SCENARIOS.
STATEFUL_SECONDS = 60
MIN_SCENARIOS = 20  # after the other phases: 60-100 scenarios in 20 s over 45-65 of the 320 links on the 2-core host
MIN_LINKS = 20
FUZZ_QUEUE = f"{TEST_QUEUE}-fuzz"  # no worker consumes it; emptied after the run
# Operations that end an object for the rest of the run: deleting a spec, cluster, job, plan or run (with what
# depends on it), leaving a team or handing it over (the token's owner would lose it). Their ids stay random
# (refused: no such object); the stateful phase ends what it created itself, through the schema's links.
ENDING = r"DELETE /api/(specs|clusters|jobs|plans|runs)/\{\w+\}/|POST /api/teams/\{team_id\}/(leave|transfer)/"
# Body fields that name an object or a cluster, by operation, and the dictionary of the values that exist.
BODY_IDS = {"POST /api/jobs/": {"spec": "spec", "saved_cluster": "cluster", "cluster_preset": "cluster_preset"},
            "POST /api/runs/": {"plan": "plan"},
            "POST /api/specs/{spec_id}/profiles/": {"plan": "plan"},
            "POST /api/specs/": {"team": "team"},
            "POST /api/clusters/": {"team": "team"}}


def _production_server(log_path: Path) -> tuple[subprocess.Popen, str]:
    """The web server as ``make run`` starts it (adaptis_web/processes.py, gunicorn.conf.py), DEBUG off, with
    throttles that the generator cannot reach (the throttles have tests of their own: here they would stop it after
    a few requests of each creating operation)."""
    unthrottled = {f"THROTTLE_{scope}": "100000/minute"
                   for scope in ("TOKEN_FAILURES", "TOKEN_CREATE", "SPECS", "JOBS", "RUNS")}
    server = start_web_server(log_path, queue=FUZZ_QUEUE, DEBUG="false", SECRET_KEY=secrets.token_urlsafe(40),
                              ALLOWED_HOSTS="127.0.0.1,localhost", SECURE_SSL_REDIRECT="false",
                              SECURE_COOKIES="false", **unthrottled)
    return server.process, server.url


def _config(crew, spare_token_key: str, invitation_key: str, profile_id: int) -> str:
    """Dictionaries of the ids that exist (top-level keys: before any table), the committed settings, then the
    bindings of those dictionaries to the path parameters and to the body fields that name an object (one
    ``[[operations]]`` block per operation at most: Schemathesis takes ``parameters`` from the first block that
    matches, it does not merge them)."""
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
    # In a body an id is a JSON integer (a path's is text); a saved cluster that is not deleted
    body_values = {"team": [people.team.pk], "spec": [planned.spec.pk], "plan": [planned.plan.pk],
                   "cluster": [crew.cluster.pk], "cluster_preset": preset_names()}
    lines = ["# Written by test_openapi_fuzz.py: the ids that exist"]
    for name, values in ids.items():
        lines.append(f"dictionaries.{name}.values = {json.dumps([str(value) for value in values])}")
    for name, values in body_values.items():
        lines.append(f"dictionaries.{name}.values = {json.dumps(values)}")
    lines += ["", (HERE / "schemathesis.toml").read_text()]

    def bound(path_names, body_fields=None) -> str:
        pairs = [(f"path.{name}", name) for name in path_names] + [
            (f"body.{field}", name) for field, name in (body_fields or {}).items()]
        return ", ".join(f'"{key}" = {{ dictionary = "{name}", probability = 0.5 }}' for key, name in pairs)

    def block(selector: str, parameters: str) -> list[str]:
        return ["", "[[operations]]", selector, f"parameters = {{ {parameters} }}"]

    for label, fields in BODY_IDS.items():
        lines += block(f"include-name-regex = '^{re.escape(label)}$'", bound(ids, fields))
    named = "|".join(re.escape(label) for label in BODY_IDS)
    lines += block(f"exclude-name-regex = '^({ENDING}|{named})$'", bound(ids))
    return "\n".join(lines) + "\n"


def _schemathesis(url: str, token: str, config: Path, cwd: Path, *arguments: str) -> tuple[int, str]:
    """One ``st run`` against the server (``--workers 2`` in the caller: the generator and the server then share
    the two cores instead of taking turns)."""
    command = [str(Path(sys.executable).parent / "st"), "--no-color", "--config-file", str(config), "run",
               f"{url}/api/schema/", "--checks", "all", "--seed", str(SEED), "--continue-on-failure",
               "--header", f"Authorization: Token {token}", *arguments]
    finished = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=280)
    output = finished.stdout + finished.stderr
    # The phases and the summary, in the log of a run with -s or -rA (not the notes between them)
    phases = re.split(r"^=+ .* =+$", output, maxsplit=1, flags=re.M)[0]
    print(phases[-4000:], output[output.rfind("SUMMARY"):][-3000:], sep="\n")
    return finished.returncode, output


def _failures(output: str) -> str:
    """Schemathesis' FAILURES section (before its notes on links it could not follow), else the output's end."""
    found = re.search(r"^=+ FAILURES =+$(.*?)(?=^=+ (WARNINGS|Stateful tests|SUMMARY) =+$)", output, re.M | re.S)
    return found.group(0)[-20000:] if found else output[-20000:]


@pytest.mark.timeout(600)  # two Schemathesis runs of up to 280 s each (about 250 s in all on the idle 2-core host)
@pytest.mark.django_db(transaction=True)
# On PostgreSQL, production's database, only: what it checks is the API against its schema; the storage under it is
# tested on both databases by every other test that uses one (on SQLite it took 75 s of the suite's 12 minutes).
@pytest.mark.any_database
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
    try:
        status, output = _schemathesis(url, token, config, tmp_path, "--phases", "examples,coverage,fuzzing",
                                       "--max-examples", str(MAX_EXAMPLES), "--generation-deterministic", "--workers", "2")
        stateful_status, stateful = _schemathesis(url, token, config, tmp_path, "--phases", "stateful",
                                                  "--max-time", str(STATEFUL_SECONDS))
    finally:
        stop_worker(server)
        delete_test_keys(f"{FUZZ_QUEUE}*")  # the jobs, runs and profiles it queued: nobody runs them
    assert status == 0, _failures(output)
    generated = re.search(r"(\d+) generated", output)
    assert generated and int(generated.group(1)) >= MIN_REQUESTS, output[-5000:]
    assert stateful_status == 0, _failures(stateful)
    scenarios = re.search(r"Scenarios:\s+(\d+)", stateful)
    links = re.search(r"API Links:\s+(\d+) covered / (\d+) selected", stateful)
    assert scenarios and int(scenarios.group(1)) >= MIN_SCENARIOS, stateful[-5000:]
    assert links and int(links.group(1)) >= MIN_LINKS, stateful[-5000:]
    server_log = (tmp_path / "gunicorn.log").read_text(errors="replace")
    assert "Traceback" not in server_log, server_log[-5000:]
