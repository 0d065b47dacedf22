"""The API's index (``GET /api/``) and the Python client (``adaptis_client``, ``python -m adaptis_client``).

The index is checked against the OpenAPI schema drf-spectacular generates from the views (an independent reading
of the same URL configuration): every operation the schema documents is listed with its method, and nothing else.
The client is used as a user's script uses it, against the product's own web server and workers
(adaptis_web/processes.py), with a token: it lists the endpoints, creates a spec and a job, waits for the job, pages
through a listing, and a refusal comes back as ``ApiError`` naming the field.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from adaptis_client import ApiError, Client
from adaptis_web.studio.accounts.tokens import token_create
from planner.spec.presets import load_model_preset
from tests.conftest import REPO_ROOT, TEST_QUEUE, start_web_server, stop_worker


def test_the_api_index_lists_every_documented_operation_and_nothing_else(db):
    answer = APIClient().get("/api/", HTTP_HOST="localhost")
    assert answer.status_code == 200, "anyone may read the index, as the schema"
    body = answer.json()
    assert body["schema"] == "http://localhost/api/schema/" and body["docs"] == "http://localhost/api/docs/"
    listed = {(method, entry["path"]) for entry in body["endpoints"] for method in entry["methods"]}
    schema = SchemaGenerator().get_schema(request=None, public=True)
    documented = {(method.upper(), path) for path, operations in schema["paths"].items()
                  for method in operations if path.startswith("/api/") and not path.startswith("/api/schema")}
    assert listed == documented
    for entry in body["endpoints"]:
        assert ("url" in entry) == ("{" not in entry["path"])
        if "url" in entry:
            assert entry["url"] == "http://localhost" + entry["path"]


def test_the_schema_is_generated_once_per_process_and_served_as_generated(db, monkeypatch):
    from adaptis_web.studio.api.schema import OnceSchemaGenerator

    calls = []
    generate = SchemaGenerator.get_schema

    def counting(self, *args, **kwargs):
        calls.append(1)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counting)
    monkeypatch.setattr(OnceSchemaGenerator, "_documents", {})
    client = APIClient()
    first = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    second = client.get("/api/schema/?format=json")
    assert first.status_code == second.status_code == 200 and len(calls) == 1
    assert json.loads(first.content) == json.loads(second.content) == SchemaGenerator().get_schema(request=None,
                                                                                                   public=True)


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory):
    server = start_web_server(tmp_path_factory.mktemp("client") / "web.log", queue=TEST_QUEUE)
    yield server
    stop_worker(server.process)


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_script_plans_a_job_with_the_client(celery_worker, web, people):
    _, key = token_create(user=people.member, name="script", expires_in_days=1)
    client = Client(web.url, token=key)
    assert {"jobs", "job", "plans", "runs"} <= {entry["name"] for entry in client.endpoints()}
    spec = client.post("/api/specs/", {"doc": load_model_preset("llama-3-8b").to_dict()})
    with pytest.raises(ApiError) as refused:
        client.post("/api/jobs/", {"spec": spec["id"], "cluster_preset": "h100-sxm-1x8", "num_devices": 8,
                                   "num_microbatches": 0, "schedule": "1f1b"})
    assert refused.value.status == 400
    assert [error["field"] for error in refused.value.body["errors"]] == ["num_microbatches"]
    jobs = [client.post("/api/jobs/", {"spec": spec["id"], "cluster_preset": "h100-sxm-1x8", "num_devices": 8,
                                       "num_microbatches": microbatches, "schedule": "1f1b"})
            for microbatches in (16, 32)]
    finished = [client.wait(f"/api/jobs/{job['id']}/", timeout_s=120, interval_s=0.2) for job in jobs]
    assert [job["status"] for job in finished] == ["succeeded", "succeeded"], finished
    plan = client.get(f"/api/plans/{finished[0]['plans'][0]['id']}/")
    assert plan["job"] == jobs[0]["id"] and plan["iteration_ms"] > 0
    paged = list(client.pages("/api/jobs/", limit=1))
    assert sorted(job["id"] for job in paged) == sorted(job["id"] for job in jobs), "every page followed"


@pytest.mark.django_db(transaction=True)
def test_the_client_command_prints_json_and_exits_1_on_a_refusal(web, people, tmp_path):
    _, key = token_create(user=people.member, name="shell", expires_in_days=1)
    token_file = tmp_path / "token"
    token_file.write_text(key + "\n")
    env = {**os.environ, "ADAPTIS_URL": web.url}
    env.pop("ADAPTIS_TOKEN", None)

    def client(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "adaptis_client", "--token-file", str(token_file), *args],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)

    listed = client("endpoints")
    assert listed.returncode == 0, listed.stderr
    assert "runs" in {entry["name"] for entry in json.loads(listed.stdout)}
    refused = client("post", "/api/runs/", '{"plan": 999999999}')
    assert refused.returncode == 1 and "HTTP 404" in refused.stderr and '"field": "plan"' in refused.stderr
    teams = client("get", "/api/teams/", "limit=10")
    assert teams.returncode == 0 and people.team.name in {team["name"] for team in json.loads(teams.stdout)["results"]}
