"""Runs launched on a user's cluster: created with a secret and launch commands, reporting to the ingest.

The ingest's refusals (another run's secret, a wrong or an expired one, an event the plan does not have, a batch too
large) store nothing; a retried batch is stored once; the lifecycle events move the run. Two torchrun agents on this
host, as two nodes with c10d rendezvous, run the generated command against the product's own web server (as
``make run`` starts it) and the run ends with every rank's events, equal to a local run of the same plan and seed;
so does the generated Slurm batch script, ``sbatch``ed on the one-node Slurm cluster scripts/test.sh starts
(``ensure_slurm`` in scripts/lib.sh), with nothing but the team's environment line to ready its nodes.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import JobStatus, PlanningJob, Run, RunCollective, RunEvent
from adaptis_web.studio.planning.jobs import job_request_check, job_run
from adaptis_web.studio.work.liveness import reap_stale_work
from planner.spec.presets import load_model_preset
from tests.conftest import (REPO_ROOT, TEST_QUEUE, free_port, start_web_server, stop_worker,
                            cpu_hybrid_plan)
from tests.web.conftest import api_as


def _plan_on(people, cluster_doc=None):
    spec = load_model_preset("tiny-llama")
    record = spec_create(team=people.team, owner=people.owner, spec=spec)
    request = job_request_check(spec=spec, num_devices=2, num_microbatches=4, cluster_preset="cpu-host")
    job = PlanningJob.objects.create(spec=record, created_by=people.owner, cluster_preset="cpu-host",
                                     cluster_doc=cluster_doc or request.cluster.to_dict(), num_devices=2,
                                     num_microbatches=4, schedule="1f1b")
    return job_run(job_id=job.pk)


def _create(people, plan, **body):
    response = api_as(people.member).post(reverse("api:runs"), {"plan": plan.pk, "target": "cluster", "steps": 3,
                                                              **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _post(run_id: int, secret: str | None, events):
    client = APIClient()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret else {}
    return client.post(reverse("api:run-events", args=[run_id]), {"events": events}, format="json", **headers)


def _actions(plan, step: int = 0) -> list[dict]:
    """Every action of the plan, for one step, as a rank reports it (times made up, increasing)."""
    events, clock = [], 0.0
    for device, names in enumerate(plan.plan_doc["actions"]):
        for name in names:
            stage, kind, microbatch = re.fullmatch(r"(\d+)([FBIW])(\d+)", name).groups()
            stage, microbatch = int(stage), int(microbatch)
            events.append({"type": "action", "rank": device, "device": device, "action": name, "stage": stage,
                           "kind": kind, "microbatch": microbatch, "step": step, "start_ms": clock,
                           "end_ms": clock + 1.0})
            clock += 1.5
    return events


@pytest.mark.django_db
def test_a_cluster_run_is_created_with_a_secret_shown_once_and_its_launch(people):
    plan = _plan_on(people)
    body = _create(people, plan, environment="module load python/3.11 && source ~/adaptis/.venv/bin/activate",
                   time_limit="00:30:00")
    run = Run.objects.get(pk=body["id"])
    assert (run.target, run.status, run.backend, run.world_size) == ("cluster", JobStatus.QUEUED, "gloo", 2)
    assert run.secret_digest == hashlib.sha256(body["secret"].encode()).hexdigest() != body["secret"]
    launch = body["launch"]
    assert (launch["nodes"], launch["ranks_per_node"], launch["backend"]) == (1, 2, "gloo")
    ingest_url = f"http://testserver/api/runs/{run.pk}/events/"
    assert f"--events {ingest_url}" in launch["torchrun"] and '--token-file "$ADAPTIS_TOKEN_FILE"' in launch["torchrun"]
    assert "--nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d" in launch["torchrun"]
    assert set(launch["files"]) == {f"adaptis-run-{run.pk}-plan.json", f"adaptis-run-{run.pk}-model.json"}
    script = launch["sbatch"]
    assert script.startswith("#!/bin/bash\n") and "#SBATCH --nodes=1" in script and "#SBATCH --time=00:30:00" in script
    assert "--gpus-per-node" not in script, "a CPU cluster asks Slurm for no GPUs"
    assert "module load python/3.11" in script and f"srun --kill-on-bad-exit=1 {launch['torchrun']}" in script
    assert body["secret"] not in script and body["secret"] not in launch["torchrun"]
    detail = api_as(people.member).get(reverse("api:run", args=[run.pk])).json()
    assert "secret" not in detail and detail["target"] == "cluster"
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0, "the script parses"
    client = Client()
    client.force_login(people.member)
    page = html.unescape(client.get(reverse("studio:run", args=[run.pk])).content.decode())
    assert "Waiting for its ranks: launch it on your cluster" in page
    assert script.strip() in page and launch["torchrun"] in page and body["secret"] not in page
    assert launch["kubernetes"].strip() in page


@pytest.mark.django_db
def test_the_launch_has_a_kubeflow_pytorchjob_running_the_same_command_in_every_pod(people):
    cpu_host = job_request_check(spec=load_model_preset("tiny-llama"), num_devices=2, num_microbatches=4,
                                 cluster_preset="cpu-host").cluster.to_dict()
    people.team.run_environment = "image:ghcr.io/acme/adaptis-executor:1.4"
    people.team.save()
    plan = _plan_on(people, cluster_doc={**cpu_host, "nodes": 2, "devices_per_node": 1})
    body = _create(people, plan)
    launch, name = body["launch"], f"adaptis-run-{body['id']}"
    config_map, job = yaml.safe_load_all(launch["kubernetes"])
    assert (config_map["kind"], config_map["metadata"]["name"]) == ("ConfigMap", name)
    assert {file: json.loads(text) for file, text in config_map["data"].items()} == launch["files"]
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("kubeflow.org/v1", "PyTorchJob", name)
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {role: spec["replicas"] for role, spec in replicas.items()} == {"Master": 1, "Worker": 1}, "one pod a node"
    assert job["spec"]["nprocPerNode"] == "1"
    for spec in replicas.values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "pytorch" and container["image"] == "ghcr.io/acme/adaptis-executor:1.4"
        command = container["command"]
        assert command[:2] == ["/bin/bash", "-c"] and command[2].splitlines()[-1] == f"exec {launch['torchrun']}"
        assert 'HEAD="$MASTER_ADDR"; ADAPTIS_RDZV_PORT="$MASTER_PORT"' in command[2], "the operator's rendezvous"
        volumes = {volume["name"]: volume for volume in spec["template"]["spec"]["volumes"]}
        mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
        assert volumes["run-files"]["configMap"]["name"] == name and container["workingDir"] == mounts["run-files"]
        assert volumes["run-secret"]["secret"]["secretName"] == name
        assert container["env"] == [{"name": "ADAPTIS_TOKEN_FILE", "value": f"{mounts['run-secret']}/token"}]
        assert "nvidia.com/gpu" not in json.dumps(container["resources"]), "a CPU cluster asks for no GPUs"
    assert body["secret"] not in launch["kubernetes"]
    assert f"kubectl create secret generic {name} --from-file=token=" in launch["kubernetes"]
    assert "\n# image:ghcr.io/acme/adaptis-executor:1.4 -- a container image" in launch["sbatch"], "not run as a line"
    one_node = _create(people, _plan_on(people))["launch"]["kubernetes"]
    assert list(list(yaml.safe_load_all(one_node))[1]["spec"]["pytorchReplicaSpecs"]) == ["Master"]


@pytest.mark.django_db
def test_a_team_saves_its_run_environment_once_and_its_cluster_runs_start_from_it(crew):
    people, team = crew.people, crew.people.team
    plan = _plan_on(people)
    assert "source .venv/bin/activate" in _create(people, plan)["launch"]["sbatch"], "none saved: the default"
    saved = "module load python/3.11 && source /shared/adaptis/.venv/bin/activate"
    answer = api_as(crew.admin).patch(reverse("api:team", args=[team.pk]), {"run_environment": f"  {saved} "},
                                    format="json")
    assert answer.status_code == 200 and answer.json()["run_environment"] == saved
    assert api_as(people.member).patch(reverse("api:team", args=[team.pk]), {"run_environment": "source x"},
                                     format="json").status_code == 403, "admins only"
    script = _create(people, plan)["launch"]["sbatch"]
    assert f"\n{saved}\n" in script and "source .venv/bin/activate" not in script
    own = _create(people, plan, environment="source ~/mine/.venv/bin/activate")["launch"]["sbatch"]
    assert "source ~/mine/.venv/bin/activate" in own and saved not in own, "a run's own environment overrides it"
    for value, reason in [("", "This field may not be blank."), ("   ", "This field may not be blank."),
                          ("source a\nrm -rf b", "must be a single line"), ("source a\rb", "must be a single line"),
                          ("x" * 501, "Ensure this field has no more than 500 characters.")]:
        refused = api_as(crew.admin).patch(reverse("api:team", args=[team.pk]), {"run_environment": value},
                                         format="json")
        assert refused.status_code == 400, value
        (error,) = refused.json()["errors"]
        assert error["field"] == "run_environment" and error["reason"].startswith(reason), error
    team.refresh_from_db()
    assert team.run_environment == saved, "nothing refused is stored"


@pytest.mark.django_db
def test_the_team_page_saves_the_run_environment_for_admins_and_shows_it_to_the_others(crew):
    team, client = crew.people.team, Client()
    client.force_login(crew.admin)
    page = client.get(reverse("studio:team", args=[team.pk])).content.decode()
    assert 'name="run_environment"' in page and 'placeholder="source .venv/bin/activate"' in page
    saved = client.post(reverse("studio:team", args=[team.pk]),
                        {"action": "environment", "run_environment": "image:ghcr.io/acme/adaptis:1.4"})
    assert saved.status_code == 302
    refused = client.post(reverse("studio:team", args=[team.pk]),
                          {"action": "environment", "run_environment": "source a\nsource b"})
    assert refused.status_code == 400 and "must be a single line" in refused.content.decode()
    client.force_login(crew.viewer)
    page = client.get(reverse("studio:team", args=[team.pk])).content.decode()
    assert 'name="run_environment"' not in page and "image:ghcr.io/acme/adaptis:1.4" in page
    assert client.post(reverse("studio:team", args=[team.pk]),
                       {"action": "environment", "run_environment": "source c"}).status_code == 403
    team.refresh_from_db()
    assert team.run_environment == "image:ghcr.io/acme/adaptis:1.4"


@pytest.mark.django_db
def test_the_ingest_refuses_other_secrets_and_foreign_events_and_stores_nothing_then(people):
    plan = _plan_on(people)
    first, second = _create(people, plan), _create(people, plan)
    events = _actions(plan)
    for secret in (None, "guess", second["secret"]):
        refused = _post(first["id"], secret, events)
        assert refused.status_code == 403 and refused.json()["errors"][0]["field"] == "authorization"
    local = api_as(people.member).post(reverse("api:runs"), {"plan": plan.pk}, format="json").json()
    assert _post(local["id"], first["secret"], events).status_code == 403, "a local run takes no reports"
    foreign = [dict(event) for event in events]
    foreign[3]["action"] = "1F9"
    refused = _post(first["id"], first["secret"], foreign)
    assert refused.status_code == 400 and refused.json()["errors"] == [{
        "field": "events[3].action", "reason": "'1F9' is not an action of device 0 in this run's plan"}]
    # An event must say what its action's name says (stage, kind, micro-batch): a rank cannot relabel its work.
    for key, value in (("kind", "B"), ("stage", 1), ("microbatch", 7)):
        relabelled = [{**events[0], key: value}]
        refused = _post(first["id"], first["secret"], relabelled)
        assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == f"events[0].{key}", refused.json()
        assert f"action {events[0]['action']} has {key}" in refused.json()["errors"][0]["reason"]
    wrong_rank = [{**events[0], "rank": 2, "device": 2}]
    assert _post(first["id"], first["secret"], wrong_rank).json()["errors"][0]["field"] == "events[0].rank"
    too_many = [events[0]] * 1001
    assert _post(first["id"], first["secret"], too_many).status_code == 400
    extra = APIClient().post(reverse("api:run-events", args=[first["id"]]), {"events": events, "step": 0},
                             format="json", HTTP_AUTHORIZATION=f"Bearer {first['secret']}")
    assert extra.status_code == 400 and extra.json()["errors"] == [{
        "field": "step", "reason": "is not a field of an event batch; its one field is events"}]
    assert RunEvent.objects.count() == 0 and Run.objects.get(pk=first["id"]).status == JobStatus.QUEUED


@pytest.mark.django_db
def test_the_ingest_stores_a_retried_batch_once_and_follows_the_runs_lifecycle(people):
    plan = _plan_on(people)
    body = _create(people, plan)
    run_id, secret = body["id"], body["secret"]
    started = {"type": "run_started", "world_size": 2, "facts": {"hosts": ["node-a", "node-b"], "torch": "2.13.0"}}
    answer = _post(run_id, secret, [started, *_actions(plan)]).json()
    assert answer == {"stored": len(_actions(plan)), "duplicates": 0, "status": "running"}
    assert _post(run_id, secret, _actions(plan)).json()["duplicates"] == len(_actions(plan))
    run = Run.objects.get(pk=run_id)
    assert run.cluster_facts["hosts"] == ["node-a", "node-b"] and run.heartbeat_at is not None
    assert RunEvent.objects.filter(run=run).count() == len(_actions(plan))
    finished = {"type": "run_finished", "summary": {"median_iteration_ms": 12.5, "steps": []}, "loss": 6.1,
                "losses": [6.3, 6.1]}
    assert _post(run_id, secret, [finished]).json()["status"] == "succeeded"
    run.refresh_from_db()
    assert (run.loss, run.summary["losses"], run.finished_at is not None) == (6.1, [6.3, 6.1], True)
    expired = _post(run_id, secret, _actions(plan, step=1))
    assert expired.status_code == 403 and "expired" in expired.json()["errors"][0]["reason"]


def _hybrid_events(plan, step: int = 0) -> list[dict]:
    """A TP2 PP2 DP2 plan's step as its 8 ranks report it (times made up): each rank's pipeline rank's actions, a TP
    all-gather inside each, a DP all-reduce after them. Rank r is tp + 2 * (dp + 2 * pp), Megatron's order."""
    events = []
    for rank in range(8):
        tp, dp, pp = rank % 2, rank // 2 % 2, rank // 4
        coordinate = {"tp": tp, "cp": 0, "dp": dp, "pp": pp, "ep": 0}
        where = {"rank": rank, "device": pp, "coordinate": coordinate, "step": step}
        clock, index = 10.0 * rank, 0
        for name in plan.plan_doc["actions"][pp]:
            stage, kind, microbatch = re.fullmatch(r"(\d+)([FBIW])(\d+)", name).groups()
            events.append({"type": "action", **where, "action": name, "stage": int(stage), "kind": kind,
                           "microbatch": int(microbatch), "start_ms": clock, "end_ms": clock + 1.0})
            events.append({"type": "collective", **where, "op": "tp_all_gather", "group": "tp", "index": index,
                           "bytes": 4096, "start_ms": clock + 0.2, "end_ms": clock + 0.4})
            clock, index = clock + 1.5, index + 1
        events.append({"type": "collective", **where, "op": "dp_all_reduce", "group": "dp", "index": index,
                       "bytes": 1 << 20, "start_ms": clock, "end_ms": clock + 2.0})
    return events


@pytest.mark.django_db
def test_a_hybrid_cluster_run_stores_every_ranks_actions_and_collectives_once(people):
    plan = cpu_hybrid_plan(people, people.owner, tp=2, pp=2, dp=2)
    body = _create(people, plan)
    assert (body["world_size"], body["launch"]["ranks_per_node"]) == (8, 8)
    events = _hybrid_events(plan)
    actions = [event for event in events if event["type"] == "action"]
    assert _post(body["id"], body["secret"], events).json() == {"stored": len(events), "duplicates": 0,
                                                                 "status": "running"}
    assert _post(body["id"], body["secret"], events).json()["duplicates"] == len(events), "a retried batch"
    run = Run.objects.get(pk=body["id"])
    assert sorted(RunEvent.objects.filter(run=run).values_list("rank", "device", "action")) == sorted(
        (event["rank"], event["device"], event["action"]) for event in actions)
    stored = RunCollective.objects.filter(run=run).values_list("rank", "device", "op", "index", "bytes")
    assert sorted(stored) == sorted((event["rank"], event["device"], event["op"], event["index"], event["bytes"])
                                    for event in events if event["type"] == "collective")
    # One seq over both: a client pages through actions and collectives with one cursor.
    url = reverse("api:run-events", args=[run.pk])
    first = api_as(people.member).get(url, {"limit": 5}).json()
    assert sorted(row["seq"] for row in first["events"] + first["collectives"]) == [1, 2, 3, 4, 5]
    assert first["last_seq"] == 5 and set(first["collectives"][0]) == {
        "seq", "rank", "device", "op", "group", "step", "index", "bytes", "start_ms", "end_ms"}
    rest = api_as(people.member).get(url, {"after": 5}).json()
    assert sorted(row["seq"] for row in rest["events"] + rest["collectives"]) == list(range(6, len(events) + 1))
    assert rest["last_seq"] == len(events) and len(first["events"] + rest["events"]) == len(actions)


@pytest.mark.django_db
def test_the_ingest_refuses_a_collective_or_a_rank_the_plan_does_not_have_naming_the_field(people):
    plan = cpu_hybrid_plan(people, people.owner, tp=2, pp=2, dp=2)
    body = _create(people, plan)
    events = _hybrid_events(plan)
    collective = next(event for event in events if event["type"] == "collective" and event["rank"] == 5)
    for change, field, reason in (
            ({"op": "allgather"}, "op", "must name the collective, its group first (as tp_all_gather)"),
            ({"op": "cp_all_gather", "group": "cp"}, "op",
             "this run's plan has no CP group (CP1), got 'cp_all_gather'"),
            ({"group": "dp"}, "group", "collective tp_all_gather is of group 'tp', got 'dp'"),
            ({"index": -1}, "index", "must be a whole number >= 0, got -1"),
            ({"bytes": "64k"}, "bytes", "must be a whole number >= 0, got '64k'"),
            ({"device": 5}, "device", "rank 5 runs device 1, got 5"),
            ({"coordinate": {**collective["coordinate"], "dp": 1}}, "coordinate", "rank 5 is {'tp': 1, 'cp': 0, "
                                                                                  "'dp': 0, 'pp': 1, 'ep': 0}"),
            ({"end_ms": collective["start_ms"] - 1}, "end_ms", "ends before it starts"),
            ({"rank": 8}, "rank", "must be a rank of this run (0 to 7), got 8")):
        refused = _post(body["id"], body["secret"], [events[0], {**collective, **change}])
        assert refused.status_code == 400, (change, refused.content)
        (error,) = refused.json()["errors"]
        assert error["field"] == f"events[1].{field}" and error["reason"].startswith(reason), (change, error)
    action = next(event for event in events if event["type"] == "action" and event["rank"] == 5)
    refused = _post(body["id"], body["secret"], [{**action, "device": 5}])
    assert refused.json()["errors"] == [{"field": "events[0].device", "reason": "rank 5 runs device 1, got 5"}]
    assert RunEvent.objects.count() == RunCollective.objects.count() == 0


@pytest.mark.django_db
def test_a_cluster_run_whose_ranks_never_report_is_failed_as_stale(people, settings):
    plan = _plan_on(people)
    body = _create(people, plan)
    Run.objects.filter(pk=body["id"]).update(
        created_at=timezone.now() - timedelta(seconds=settings.CLUSTER_RUN_START_TIMEOUT_S + 1))
    reaped = reap_stale_work()
    run = Run.objects.get(pk=body["id"])
    assert body["id"] in reaped["Run"] and run.status == JobStatus.FAILED and run.error.startswith("stale:")


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory):
    server = start_web_server(tmp_path_factory.mktemp("ingest") / "web.log", queue=TEST_QUEUE)
    yield server
    stop_worker(server.process)


@pytest.mark.django_db(transaction=True)
def test_two_torchrun_agents_as_two_nodes_run_the_generated_command_and_fill_the_run(people, web, tmp_path):
    from executor.running.launch import run_plan

    cpu_host = job_request_check(spec=load_model_preset("tiny-llama"), num_devices=2, num_microbatches=4,
                                 cluster_preset="cpu-host").cluster.to_dict()
    plan = _plan_on(people, cluster_doc={**cpu_host, "nodes": 2, "devices_per_node": 1})
    client = APIClient()
    client.force_authenticate(people.member)
    # As the dashboard answers a user's POST: the ingest URL is the product server's, as its host sees it.
    body = client.post(reverse("api:runs"), {"plan": plan.pk, "target": "cluster", "steps": 3}, format="json",
                       HTTP_HOST=web.url.removeprefix("http://")).json()
    launch = body["launch"]
    assert (launch["nodes"], launch["ranks_per_node"]) == (2, 1)
    for name, doc in launch["files"].items():
        (tmp_path / name).write_text(json.dumps(doc))
    token = tmp_path / "run.token"
    token.write_text(body["secret"])
    token.chmod(0o600)
    env = {**os.environ, "HEAD": "127.0.0.1", "ADAPTIS_RDZV_PORT": str(free_port()), "ADAPTIS_TOKEN_FILE": str(token),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(REPO_ROOT)}
    agents = [subprocess.Popen(["bash", "-c", launch["torchrun"]], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [agent.communicate(timeout=240)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], "\n".join(output[-3000:] for output in outputs)
    run = Run.objects.get(pk=body["id"])
    assert run.status == JobStatus.SUCCEEDED, run.error
    assert run.cluster_facts["hosts"] and len(run.cluster_facts["hosts"]) == 2
    stored = sorted(RunEvent.objects.filter(run=run).values_list("rank", "step", "action"))
    local = run_plan(plan_from(plan), load_model_preset("tiny-llama"), steps=3, seed=0)
    assert stored == sorted((e["rank"], e["step"], e["action"]) for e in local.events if e.get("type", "action") == "action")
    assert run.loss == pytest.approx(local.loss, rel=1e-5), "the same plan and seed train the same way"


SLURM_CONF = str(REPO_ROOT / "var" / "slurm" / "slurm.conf")  # this checkout's (ensure_slurm), never a site's
SLURM_DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
              "PREEMPTED"}


def _slurm(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env={**os.environ, "SLURM_CONF": SLURM_CONF}, capture_output=True, text=True,
                          timeout=30, **kwargs)


def _slurm_job(job_id: str) -> dict[str, str]:
    """Slurm's record of a job (``scontrol show job``: no accounting database here, so no ``sacct``)."""
    shown = _slurm("scontrol", "show", "job", "--oneliner", job_id)
    assert shown.returncode == 0, shown.stderr
    return dict(field.split("=", 1) for field in shown.stdout.split() if "=" in field)


@pytest.fixture
def slurm():
    """This checkout's one-node Slurm cluster, which scripts/test.sh starts: a test that needs it fails without it."""
    try:
        ping = _slurm("scontrol", "ping")
    except FileNotFoundError:
        pytest.fail("Slurm is not installed here (no scontrol): scripts/test.sh installs Debian's slurm-wlm and munge "
                    "and starts a one-node cluster (ensure_slurm in scripts/lib.sh); run the tests with it")
    if "is UP" not in ping.stdout:
        pytest.fail(f"no Slurm answers at {SLURM_CONF} ({(ping.stdout + ping.stderr).strip()}): "
                    "scripts/test.sh starts one (ensure_slurm in scripts/lib.sh); run the tests with it")


@pytest.mark.any_database  # the Slurm cluster and the ranks are the same on either database
@pytest.mark.django_db(transaction=True)
def test_the_generated_slurm_script_sbatched_on_a_real_slurm_runs_the_plan_and_fills_the_run(slurm, people, web,
                                                                                            tmp_path):
    from executor.running.launch import run_plan

    plan = _plan_on(people)   # cpu-host: one node of two devices, two ranks on Slurm's one node
    client = APIClient()
    client.force_authenticate(people.member)
    # The environment line as a team writes it for its nodes: the executor's virtual environment (and, as this
    # checkout's virtual environment may be another checkout's, this checkout's code first).
    environment = f"source {sys.prefix}/bin/activate && export PYTHONPATH={REPO_ROOT}"
    body = client.post(reverse("api:runs"), {"plan": plan.pk, "target": "cluster", "steps": 3,
                                             "environment": environment, "time_limit": "00:10:00"},
                       format="json", HTTP_HOST=web.url.removeprefix("http://")).json()
    launch = body["launch"]
    assert (launch["nodes"], launch["ranks_per_node"]) == (1, 2)
    script = tmp_path / "run.sbatch"
    script.write_text(launch["sbatch"])
    token = tmp_path / "run.token"
    token.write_text(body["secret"])
    token.chmod(0o600)
    # As a user submits it: a login shell's bare environment (sbatch passes it on), the secret's file, a free
    # rendezvous port (other tests' ranks may hold 29500 on this shared host).
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path),
           "SLURM_CONF": SLURM_CONF, "ADAPTIS_TOKEN_FILE": str(token), "ADAPTIS_RDZV_PORT": str(free_port())}
    submitted = subprocess.run(["sbatch", "--parsable", f"--output={tmp_path}/slurm-%j.out", str(script)],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    deadline, job = time.monotonic() + 300, {}
    while time.monotonic() < deadline:
        job = _slurm_job(job_id)
        if job["JobState"] in SLURM_DONE:
            break
        time.sleep(1)
    else:
        _slurm("scancel", job_id)
    output = next(iter(tmp_path.glob("slurm-*.out")), None)
    log = output.read_text(errors="replace")[-4000:] if output else "(no output)"
    assert (job.get("JobState"), job.get("ExitCode")) == ("COMPLETED", "0:0"), f"Slurm job {job_id}: {job}\n{log}"
    run = Run.objects.get(pk=body["id"])
    assert run.status == JobStatus.SUCCEEDED, f"{run.error}\n{log}"
    assert len(run.cluster_facts["hosts"]) == 2, "both ranks reported where they ran"
    stored = sorted(RunEvent.objects.filter(run=run).values_list("rank", "step", "action"))
    local = run_plan(plan_from(plan), load_model_preset("tiny-llama"), steps=3, seed=0)
    assert stored == sorted((event["rank"], event["step"], event["action"]) for event in local.events
                            if event.get("type", "action") == "action")
    assert run.loss == pytest.approx(local.loss, rel=1e-5), "the same plan and seed train the same way"


def plan_from(row):
    from planner.plan import load_plan

    return load_plan(row.plan_doc)
