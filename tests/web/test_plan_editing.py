"""The plan page's API: exports (each format, and the reasons a format cannot express a plan), simulate (an edited
document re-predicted, and the 400s it names), derive (a saved edit linked to its parent; roles), v2 plans."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import replace

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.accounts.teams import membership_add
from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import Membership, Plan, PlanningJob
from adaptis_web.studio.planning.jobs import job_request_check, job_run
from adaptis_web.studio.planning.predictions import plan_prediction
from planner.parallel import planning as hybrid
from planner.cli import main as planner_cli
from planner.limits import MAX_MICROBATCHES
from planner.plan import load_plan
from planner.simulator import simulate
from planner.spec.model import LayerSpec, MambaMixer
from planner.spec.presets import load_model_preset
from tests.conftest import HYBRID_SEQ_LEN as SEQ_LEN  # the hybrid_plan fixture's (tests/conftest.py)
from tests.conftest import cpu_hybrid_plan, relaid_stages

pytestmark = pytest.mark.django_db


def _plan_of(people, preset: str, schedule: str, devices: int, microbatches: int, cluster="cpu-host") -> Plan:
    spec = load_model_preset(preset)
    record = spec_create(team=people.team, owner=people.owner, spec=spec, source_filename=f"{preset}.json")
    request = job_request_check(spec=spec, num_devices=devices, num_microbatches=microbatches, cluster_preset=cluster,
                                schedule=schedule, time_budget_s=5)
    job = PlanningJob.objects.create(spec=record, created_by=people.owner, cluster_preset=cluster,
                                     cluster_doc=request.cluster.to_dict(), num_devices=devices,
                                     num_microbatches=microbatches, schedule=schedule, partition=request.partition,
                                     time_budget_s=5)
    return job_run(job_id=job.pk)


def _client(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _viewer(people, django_user_model):
    viewer = django_user_model.objects.create_user("victor", password="victor-pass-2026")
    membership_add(team=people.team, user=viewer, role=Membership.Role.VIEWER)
    return viewer


def _simulate(client, plan, doc):
    return client.post(reverse("api:plan-simulate", args=[plan.pk]), doc, format="json")


# ---- exports ---------------------------------------------------------------------------------------------------

def _export(client, plan, fmt):
    return client.get(reverse("api:plan-export", args=[plan.pk, fmt]))


def test_each_export_is_a_download_with_its_content_type_and_file_name(people, planned, django_user_model):
    client = _client(_viewer(people, django_user_model))  # a viewer may export
    plan = planned.plan
    expected = {"plan-json": ("application/json", f"plan-{plan.pk}-1f1b.json"),
                "perfetto": ("application/json", f"plan-{plan.pk}-1f1b.perfetto.json"),
                "torch-csv": ("text/csv", f"plan-{plan.pk}-1f1b.csv"),
                "megatron-layout": ("text/plain", f"plan-{plan.pk}-1f1b.megatron.txt")}
    bodies = {}
    for fmt, (content_type, filename) in expected.items():
        response = _export(client, plan, fmt)
        assert response.status_code == 200, response.content
        assert response["Content-Type"].split(";")[0] == content_type
        assert response["Content-Disposition"] == f'attachment; filename="{filename}"'
        bodies[fmt] = response.content.decode()
    assert json.loads(bodies["plan-json"]) == load_plan(plan.plan_doc).to_dict()
    trace = json.loads(bodies["perfetto"])
    compute = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] < 2 and e["name"] != "bubble"]
    assert len(compute) == 2 * 4 * 2 and trace["otherData"]["iteration_ms"] == pytest.approx(plan.iteration_ms)
    rows = list(csv.reader(io.StringIO(bodies["torch-csv"])))
    assert rows == [[str(a) for a in actions] for actions in load_plan(plan.plan_doc).actions]
    assert bodies["megatron-layout"] == "E,t*2|t*2,L\n"  # tiny-llama: embedding, 4 decoder layers, head


def test_an_unknown_export_format_is_a_400_naming_the_format(people, planned):
    response = _export(_client(people.member), planned.plan, "onnx")
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["field"] == "format" and "megatron-layout" in error["reason"]


def test_megatron_layout_of_a_v_shaped_placement_is_a_400_with_the_reason(people):
    plan = _plan_of(people, "tiny-llama", "zb-v", 2, 4)
    response = _export(_client(people.member), plan, "megatron-layout")
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["field"] == "format" and "virtual stage k on rank k mod p" in error["reason"]


def test_megatron_layout_of_a_hybrid_mamba_model_says_megatron_ignores_it_without_virtual_stages(people):
    plan = _plan_of(people, "tiny-hybrid", "1f1b", 2, 4)
    response = _export(_client(people.member), plan, "megatron-layout")
    assert response.status_code == 200
    text = response.content.decode()
    notes = [line for line in text.splitlines() if line.startswith("#")]
    layout = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert "hybrid (Mamba) models ignore --pipeline-model-parallel-layout" in " ".join(notes)
    assert len(layout) == 1 and layout[0].startswith("E") and layout[0].endswith("L") and layout[0].count("|") == 1


def test_the_cli_and_the_web_write_the_same_megatron_layout_of_a_mamba_hybrid(people, tmp_path):
    plan = _plan_of(people, "tiny-hybrid", "1f1b", 2, 4)
    downloaded = _export(_client(people.member), plan, "megatron-layout").content.decode()
    plan_path, profile_path, out = tmp_path / "plan.json", tmp_path / "profile.json", tmp_path / "layout.txt"
    plan_path.write_text(json.dumps(plan.plan_doc))
    profile_path.write_text(json.dumps(plan.profile_doc))
    assert planner_cli(["export", str(plan_path), "--to", "megatron-layout", "--profile", str(profile_path),
                        "--model", "tiny-hybrid", "--out", str(out)]) == 0
    assert out.read_text() == downloaded and downloaded.startswith("# Megatron-LM's hybrid (Mamba) models ignore")


def test_megatron_layout_of_a_hybrid_mamba_model_with_virtual_stages_is_refused(people):
    plan = _plan_of(people, "tiny-hybrid", "interleaved-1f1b", 2, 4)
    response = _export(_client(people.member), plan, "megatron-layout")
    assert response.status_code == 400
    reason = response.json()["errors"][0]["reason"]
    assert "refuse a --pipeline-model-parallel-layout with virtual stages" in reason and "4 stages on 2" in reason


def test_plan_page_offers_the_four_downloads_and_the_megatron_reason_where_it_cannot(client, people):
    plan = _plan_of(people, "tiny-llama", "zb-v", 2, 4)
    client.force_login(people.member)
    page = client.get(reverse("studio:plan", args=[plan.pk])).content.decode()
    for fmt in ("plan-json", "perfetto", "torch-csv"):
        assert f'data-export="{fmt}" href="{reverse("api:plan-export", args=[plan.pk, fmt])}"' in page
    assert 'data-export="megatron-layout" aria-disabled="true"' in page
    assert re.search(r'data-export-reason="megatron-layout">.*virtual stage k on rank k mod p', page)


# ---- simulate ------------------------------------------------------------------------------------------------

def _searched(people):
    """An AdaPtis plan of Llama 3 8B on 4 H200s (141 GB: room for the edits below on any plan the search finds)."""
    return _plan_of(people, "llama-3-8b", "adaptis", 4, 8, cluster="h200-sxm-1x8")


def _move_boundary(doc: dict) -> None:
    """The first boundary between stages whose earlier one holds more than one layer, one layer earlier."""
    stages = doc["stages"]
    index = next(i for i in range(len(stages) - 1) if len(stages[i]["layers"]) > 1)
    stages[index + 1]["layers"].insert(0, stages[index]["layers"].pop())


def test_simulating_the_unchanged_plan_predicts_what_is_stored(people, planned):
    response = _simulate(_client(people.member), planned.plan, planned.plan.plan_doc)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["metrics"]["iteration_ms"] == pytest.approx(planned.plan.iteration_ms)
    assert body["difference"]["iteration_ms"] == pytest.approx(0.0, abs=1e-9)
    assert body["rescheduled"] == "" and body["layout"] == planned.plan.layout
    assert len(body["timeline"]) == 2 * 4 * 2 and {row["device"] for row in body["per_device"]} == {0, 1}
    assert all(row["capacity_bytes"] == 16 * 1024 ** 3 for row in body["per_device"])


def test_moving_a_boundary_keeps_the_orders_and_changes_the_prediction_as_the_simulator_says(people):
    plan = _searched(people)
    doc = json.loads(json.dumps(plan.plan_doc))
    _move_boundary(doc)
    response = _simulate(_client(people.member), plan, doc)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["rescheduled"] == "" and body["plan"]["actions"] == plan.plan_doc["actions"]
    # An independent re-simulation of the edited document on the plan's profile and cluster.
    from planner.cluster import load_cluster
    from planner.profile import load_profile
    expected = simulate(load_plan(doc), load_profile(plan.profile_doc), load_cluster(plan.job.cluster_doc))
    assert body["metrics"]["iteration_ms"] == pytest.approx(expected.iteration_ms)
    assert body["metrics"]["iteration_ms"] != pytest.approx(plan.iteration_ms)
    assert body["difference"]["iteration_ms"] == pytest.approx(expected.iteration_ms - plan.iteration_ms)
    assert body["layout"] != plan.layout


def test_moving_a_stage_to_another_device_reschedules_its_actions_onto_that_device(people):
    plan = _searched(people)
    doc = json.loads(json.dumps(plan.plan_doc))
    target = (doc["stages"][1]["device"] + 1) % doc["num_devices"]
    doc["stages"][1]["device"] = target
    body = _simulate(_client(people.member), plan, doc).json()
    assert body["rescheduled"] in ("one-f-one-b", "zero-bubble")
    assert body["plan"]["stages"][1]["device"] == target
    assert any(action.startswith("1F") for action in body["plan"]["actions"][target])
    assert {entry["device"] for entry in body["timeline"] if entry["stage"] == 1} == {target}
    assert f"@{target}" in body["layout"]


def test_split_merge_microbatches_policy_and_baseline_edits_are_predicted(people, planned):
    client, plan = _client(people.member), planned.plan
    split = json.loads(json.dumps(plan.plan_doc))
    layers = split["stages"][0]["layers"]
    split["stages"][0:1] = [{"layers": layers[:1], "device": 0}, {"layers": layers[1:], "device": 0}]
    body = _simulate(client, plan, split).json()
    assert len(body["plan"]["stages"]) == 3 and body["rescheduled"]
    merged = json.loads(json.dumps(plan.plan_doc))
    merged["stages"] = [{"layers": merged["stages"][0]["layers"] + merged["stages"][1]["layers"], "device": 0}]
    assert len(_simulate(client, plan, merged).json()["plan"]["stages"]) == 1
    more = {**plan.plan_doc, "num_microbatches": 8}
    body = _simulate(client, plan, more).json()
    assert len(body["timeline"]) == 2 * 8 * 2 and body["metrics"]["iteration_ms"] > plan.iteration_ms
    # A longer step of twice the tokens: judged by tokens/s (from the two predictions), and said to be a new batch.
    ratio = body["metrics"]["tokens_per_s"] / plan_prediction(plan)["tokens_per_s"]
    difference = body["difference"]
    assert difference["tokens_per_s_ratio"] == pytest.approx(ratio) and difference["faster"] is (ratio > 1)
    assert difference["batch_changed"] and "the global batch changed" in difference["note"]
    zero_bubble = {**plan.plan_doc, "meta": {"schedule_policy": "zero-bubble"}}
    body = _simulate(client, plan, zero_bubble).json()
    assert {entry["type"] for entry in body["timeline"]} == {"F", "I", "W"}
    baseline = {**plan.plan_doc, "meta": {"baseline": "zb-v", "partition": "uniform"}}
    body = _simulate(client, plan, baseline).json()
    assert [stage["device"] for stage in body["plan"]["stages"]] == [0, 1, 1, 0]


@pytest.mark.parametrize("edit, field, reason", [
    (lambda doc: doc["stages"][1].update(layers=[]), "stages[1].layers", "stage 1 would be empty"),
    (lambda doc: doc.update(num_microbatches=0), "num_microbatches", f"between 1 and {MAX_MICROBATCHES}"),
    (lambda doc: doc.update(num_devices=9), "num_devices", "has 4 devices"),
    (lambda doc: doc.update(meta={"schedule_policy": "fastest"}), "meta.schedule_policy", "must be one of"),
    (lambda doc: doc.update(meta={"baseline": "pipedream"}), "meta.baseline", "must be one of"),
    (lambda doc: doc["stages"][1]["layers"].append(99), "stages[1].layers[3]", "consecutive"),
    (lambda doc: doc.update(meta={"schedule_policy": "keep"}, num_microbatches=8), "actions", "missing"),
])
def test_a_bad_edit_is_a_400_naming_the_field_and_the_reason(people, planned, edit, field, reason):
    doc = json.loads(json.dumps(planned.plan.plan_doc))
    edit(doc)
    response = _simulate(_client(people.member), planned.plan, doc)
    assert response.status_code == 400, response.content
    (error,) = response.json()["errors"]
    assert error["field"] == field and reason in error["reason"], error


def test_an_edit_that_overflows_a_devices_memory_is_a_400_naming_the_device_in_gib(people):
    plan = _plan_of(people, "llama-3-8b", "1f1b", 4, 8, cluster="h100-sxm-1x8")
    doc = json.loads(json.dumps(plan.plan_doc))
    for stage in doc["stages"][1:3]:
        stage["device"] = 0  # three quarters of Llama 3 8B's weights, gradients and Adam state on one 80 GB GPU
    response = _simulate(_client(people.member), plan, doc)
    assert response.status_code == 400, response.content
    (error,) = response.json()["errors"]
    assert error["field"] == "memory"
    match = re.fullmatch(r"device 0 needs (\d+\.\d) GiB of 80\.0 GiB", error["reason"])
    assert match and float(match.group(1)) > 80, error


def test_a_viewer_may_simulate_and_an_outsider_gets_404(people, planned, django_user_model):
    viewer = _viewer(people, django_user_model)
    assert _simulate(_client(viewer), planned.plan, planned.plan.plan_doc).status_code == 200
    assert _simulate(_client(people.outsider), planned.plan, planned.plan.plan_doc).status_code == 404
    assert Plan.objects.count() == 1


# ---- derive --------------------------------------------------------------------------------------------------

def _derive(client, plan, doc, name=""):
    return client.post(reverse("api:plan-derive", args=[plan.pk]), {"plan": doc, "name": name}, format="json")


def test_saving_an_edit_stores_a_plan_linked_to_its_parent_with_its_edits(people, planned, client):
    doc = json.loads(json.dumps(planned.plan.plan_doc))
    doc["stages"][1]["layers"].insert(0, doc["stages"][0]["layers"].pop())
    doc["meta"] = {"edits": ["moved the boundary of stages 0/1 from layer 3 to layer 2"], "schedule_policy": "keep"}
    response = _derive(_client(people.member), planned.plan, doc, name="earlier boundary")
    assert response.status_code == 201, response.content
    child = Plan.objects.get(pk=response.json()["id"])
    assert child.parent_id == planned.plan.pk and response.json()["parent"] == planned.plan.pk
    assert child.job_id == planned.job.pk
    assert child.name == "earlier boundary" and child.strategy == "edited"
    assert child.plan_doc["meta"]["edits"] == doc["meta"]["edits"] and child.plan_doc["meta"]["derived_by"] == "bob"
    assert child.layout == "E,t|t*3,L" and child.plan_doc["actions"] == planned.plan.plan_doc["actions"]
    expected = simulate(load_plan(doc), *_profile_and_cluster(planned.plan))
    assert child.iteration_ms == pytest.approx(expected.iteration_ms)
    client.force_login(people.member)
    page = client.get(reverse("studio:plan", args=[child.pk])).content.decode()
    assert f'id="parent-link">plan #{planned.plan.pk}' in page and 'id="parent-difference"' in page
    assert "moved the boundary of stages 0/1" in page
    parent_page = client.get(reverse("studio:plan", args=[planned.plan.pk])).content.decode()
    assert f'href="{reverse("studio:plan", args=[child.pk])}">plan #{child.pk}</a>' in parent_page


def test_a_job_keeps_the_plan_it_made_after_an_edit_is_saved(people, client):
    searched = _searched(people)   # a search: its AdaPtis plan, and the baselines stored beside it
    job = searched.job
    doc = json.loads(json.dumps(searched.plan_doc))
    _move_boundary(doc)
    doc["meta"] = {"edits": ["moved a boundary"], "schedule_policy": "keep"}
    edited = _derive(_client(people.member), searched, doc, name="mine").json()
    body = _client(people.member).get(reverse("api:job", args=[job.pk])).json()
    assert body["plan"] == searched.pk and body["plans"][0]["id"] == searched.pk
    assert {(row["id"], row["parent"]) for row in body["plans"]} >= {(searched.pk, None), (edited["id"], searched.pk)}
    assert len(body["plans"]) == job.plans.count()
    client.force_login(people.member)
    page = client.get(reverse("studio:job", args=[job.pk])).content.decode()
    assert f"Plan #{searched.pk} · adaptis" in page, "the job page opens on the job's own plan"
    assert f'action="{reverse("studio:plan-run", args=[searched.pk])}"' in page, "Run on CPU targets it"
    assert f'href="{reverse("studio:plan", args=[edited["id"]])}">#{edited["id"]} · mine</a>' in page
    dashboard = client.get(reverse("studio:dashboard")).content.decode()
    row = dashboard.split(f'href="{reverse("studio:job", args=[job.pk])}"')[1].split("</tr>")[0]
    assert f"{searched.iteration_ms:.2f} ms" in row and f"{edited['iteration_ms']:.2f} ms" not in row


def _profile_and_cluster(plan):
    from planner.cluster import load_cluster
    from planner.profile import load_profile
    return load_profile(plan.profile_doc), load_cluster(plan.job.cluster_doc)


def test_saving_needs_the_member_role_and_a_refusal_stores_nothing(people, planned, django_user_model):
    viewer = _viewer(people, django_user_model)
    response = _derive(_client(viewer), planned.plan, planned.plan.plan_doc)
    assert response.status_code == 403
    (error,) = response.json()["errors"]
    assert error["field"] == "role" and "saving an edited plan needs the member role" in error["reason"]
    assert _derive(_client(people.outsider), planned.plan, planned.plan.plan_doc).status_code == 404
    bad = json.loads(json.dumps(planned.plan.plan_doc))
    bad["stages"][0]["layers"] = []
    assert _derive(_client(people.member), planned.plan, bad).status_code == 400
    assert Plan.objects.count() == 1


# ---- v2 (hybrid-parallel) plans ------------------------------------------------------------------------------

def test_a_v2_plan_page_shows_its_parallel_configuration(client, people, hybrid_plan):
    client.force_login(people.member)
    page = client.get(reverse("studio:plan", args=[hybrid_plan.pk])).content.decode()
    parallel = hybrid_plan.plan_doc["parallel"]
    virtual = f' VPP{parallel["vpp"]}' if parallel.get("vpp") else ""
    assert (f'data-config="parallel">TP{parallel["tp"]} CP{parallel["cp"]} PP{parallel["pp"]} DP{parallel["dp"]} '
            f'EP{parallel["ep"]}{virtual}<') in page
    # MFU is of the dense BF16 peak (NeMo's and Megatron's count); an FP8 plan says so on its label
    assert "over the GPUs&#x27; dense BF16 peak" in page or "over the GPUs' dense BF16 peak" in page
    assert parallel["precision"] == "bf16" and "MFU (of the BF16 peak)" not in page
    hybrid_plan.plan_doc["parallel"]["precision"] = "fp8"
    hybrid_plan.save(update_fields=["plan_doc"])
    page = client.get(reverse("studio:plan", args=[hybrid_plan.pk])).content.decode()
    assert "MFU (of the BF16 peak)</div>" in page
    assert "Sharding over DP" in page and "GiB of 80.0 GiB" in page
    assert 'id="plan-overlap">dp<' in page   # searched with the default software
    assert 'id="plan-framework">megatron<' in page and 'id="plan-ep-dispatcher">alltoall<' in page


def test_a_v2_plan_the_executor_runs_is_taken_as_a_run_of_every_gpu_locally_and_on_a_cluster(client, people):
    """TP2 PP2 DP2 on the local 8-rank CPU cluster: a run starts one rank per GPU (8, not the plan's 2 pipeline
    ranks), on the runs worker or as the cluster launch's 8 ranks of one node; the page offers the run."""
    from adaptis_web.studio.models import Run

    plan = cpu_hybrid_plan(people, people.owner, tp=2, pp=2, dp=2)
    parallel = plan.plan_doc["parallel"]
    assert (parallel["tp"], parallel["pp"], parallel["dp"], plan.plan_doc["num_devices"]) == (2, 2, 2, 2)
    api = _client(people.member)
    local = api.post("/api/runs/", {"plan": plan.pk, "steps": 1}, format="json")
    assert local.status_code == 201, local.content
    assert (local.json()["target"], local.json()["world_size"]) == ("local", 8)
    cluster = api.post("/api/runs/", {"plan": plan.pk, "steps": 1, "target": "cluster"}, format="json")
    assert cluster.status_code == 201, cluster.content
    launch = cluster.json()["launch"]
    assert (cluster.json()["world_size"], launch["nodes"], launch["ranks_per_node"]) == (8, 1, 8)
    assert "--nproc-per-node=8" in launch["torchrun"]
    assert sorted(Run.objects.values_list("world_size", flat=True)) == [8, 8]
    client.force_login(people.member)
    page = client.get(reverse("studio:plan", args=[plan.pk])).content.decode()
    assert 'id="run-on-cpu"' in page and 'id="run-refusal"' not in page and "for real: 8 gloo ranks\n" in page


def test_a_v2_plan_whose_model_has_a_layer_tp_cannot_split_is_refused_a_run_naming_it(client, people):
    """TP2 cannot split a Mamba-1 layer of 129 channels: tiny-llama with one under TP2 PP2 DP2, run as less,
    would be measured against a prediction of something else. Only the job's model says so (the plan alone does
    not), so the API refuses it (nothing stored, locally or on a cluster) and the page says why instead of offering
    a run, or the executor for what an export loses."""
    from adaptis_web.studio.models import Run

    mamba = LayerSpec(kind="decoder", mixer=MambaMixer(inner_size=129, state_size=8, dt_rank=4))
    tiny = load_model_preset("tiny-llama")
    spec = replace(tiny, name="tiny-llama-mamba", layers=tuple(mamba if index == 3 else layer
                                                               for index, layer in enumerate(tiny.layers)))
    plan = cpu_hybrid_plan(people, people.owner, spec, tp=2, pp=2, dp=2)
    reason = "layer 3 is Mamba with 129 channels, which TP2 must divide"
    api = _client(people.member)
    for body in ({"plan": plan.pk, "steps": 1}, {"plan": plan.pk, "steps": 1, "target": "cluster"}):
        response = api.post("/api/runs/", body, format="json")
        assert response.status_code == 400, response.content
        (error,) = response.json()["errors"]
        assert error["field"] == "plan" and reason in error["reason"], error
    assert Run.objects.count() == 0
    client.force_login(people.member)
    page = client.get(reverse("studio:plan", args=[plan.pk])).content.decode()
    assert 'id="run-refusal"' in page and reason in page and 'id="run-on-cpu"' not in page
    if "data-export-lost" in page:
        assert "data-executor-refusal>The AdaPtis executor cannot keep them either: this plan is TP2" in page


def test_editing_a_v2_plans_degrees_re_predicts_the_job_as_planner_hybrid_does(people, hybrid_plan):
    client = _client(people.member)
    body = _simulate(client, hybrid_plan, hybrid_plan.plan_doc).json()
    expected = hybrid.predict(load_plan(hybrid_plan.plan_doc), "llama-3-8b", "h100-sxm-1x8", SEQ_LEN)
    assert body["metrics"]["iteration_ms"] == pytest.approx(expected["predicted"]["iteration_ms"])
    assert [row["memory_bytes"] for row in body["per_device"]] == [row["total_bytes"] for row in expected["memory"]]
    doc = json.loads(json.dumps(hybrid_plan.plan_doc))
    doc["parallel"].pop("vpp", None)   # as the editor does before an edit (the server writes it again)
    doc["parallel"].update(tp=1, dp=4, recompute="full")   # a 4 x 2,048-token micro-batch fits TP1 recomputed
    body = _simulate(client, hybrid_plan, doc).json()
    edited = hybrid.predict(load_plan(doc), "llama-3-8b", "h100-sxm-1x8", SEQ_LEN)
    assert body["metrics"]["iteration_ms"] == pytest.approx(edited["predicted"]["iteration_ms"])
    assert body["hybrid"]["parallel"]["tp"] == 1
    doc["parallel"]["tp"] = 3
    response = _simulate(client, hybrid_plan, doc)
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "gpus", response.content
    assert "has 8 GPUs, asked for 24" in response.json()["errors"][0]["reason"]
    doc["parallel"].update(tp=3, dp=1)
    response = _simulate(client, hybrid_plan, doc)
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "tp", response.content
    saved = _derive(client, hybrid_plan, {**hybrid_plan.plan_doc, "meta": {**hybrid_plan.plan_doc["meta"],
                                                                           "edits": ["nothing"]}})
    assert saved.status_code == 201 and Plan.objects.get(pk=saved.json()["id"]).plan_doc["format"] == "adaptis.plan/v2"


def test_re_placing_a_v2_plans_stages_re_predicts_them_whatever_stages_per_rank_its_document_said(people,
                                                                                                     hybrid_plan):
    """The stages per pipeline rank (``parallel.vpp``) follow the edited stages, as ``pp`` follows the devices: a
    client that re-places the stages and sends the stored count back gets the new placement predicted, not a 400."""
    client = _client(people.member)
    doc = json.loads(json.dumps(hybrid_plan.plan_doc))
    devices = doc["num_devices"]
    doc["stages"] = relaid_stages(load_model_preset("llama-3-8b"), devices, "loop")   # two stages a rank
    doc["parallel"]["vpp"] = 3
    doc["meta"] = {**doc["meta"], "schedule_policy": "one-f-one-b"}
    response = _simulate(client, hybrid_plan, doc)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["plan"]["parallel"]["vpp"] == 2
    assert [stage["device"] for stage in body["plan"]["stages"]] == [index % devices for index in range(2 * devices)]
    edited = hybrid.predict(load_plan({**body["plan"]}), "llama-3-8b", "h100-sxm-1x8", SEQ_LEN)
    assert body["metrics"]["iteration_ms"] == pytest.approx(edited["predicted"]["iteration_ms"])


# ---- compare -------------------------------------------------------------------------------------------------

def test_compare_puts_a_plan_and_a_run_on_one_axis_with_the_runs_step_aligned_to_zero(client, people, planned,
                                                                                        finished_run):
    client.force_login(people.member)
    response = client.get(reverse("studio:compare"), {"plan": planned.plan.pk, "run": finished_run.pk})
    assert response.status_code == 200
    plan_item, run_item = response.context["items"]
    chart = response.context["chart_data"]
    assert chart["x_max"] == max(plan_item["span_ms"], run_item["span_ms"])
    # The run's events are the predicted timeline shifted by 100 ms: aligned, they start at 0 and span as much.
    first = min(entry["start_ms"] for entry in plan_item["timeline"])
    assert min(entry["start_ms"] for entry in run_item["timeline"]) == 0.0
    assert run_item["span_ms"] == pytest.approx(plan_item["span_ms"] - first)
    assert run_item["differences"]["iteration_ms"]["delta"] == pytest.approx(-first, abs=1e-9)
    busy = sum(e["end_ms"] - e["start_ms"] for e in run_item["timeline"])
    assert run_item["metrics"]["bubble_ratio"] == pytest.approx(1 - busy / (2 * run_item["span_ms"]))
    page = response.content.decode()
    assert f'data-compare-row="plan-{planned.plan.pk}"' in page and f'data-compare-row="run-{finished_run.pk}"' in page
    assert "Compare 1 plan and 1 run" in page


def test_compare_judges_by_throughput_and_says_when_the_batch_differs(client, people, planned):
    doubled = _derive(_client(people.member), planned.plan, {**planned.plan.plan_doc, "num_microbatches": 8,
                                                              "meta": {"schedule_policy": "auto"}}).json()
    client.force_login(people.member)
    response = client.get(reverse("studio:compare"), {"plan": [planned.plan.pk, doubled["id"]]})
    first, second = response.context["items"]
    # Independent: tokens a step over its time, from the two predictions.
    rates = [plan_prediction(Plan.objects.get(pk=pk))["tokens_per_s"] for pk in (planned.plan.pk, doubled["id"])]
    throughput = second["throughput"]
    assert throughput["tokens_per_s_ratio"] == pytest.approx(rates[1] / rates[0])
    assert throughput["faster"] is (rates[1] > rates[0]) and throughput["batch_changed"]
    page = response.content.decode()
    assert f'data-compare-note="plan-{doubled["id"]}"' in page and "the global batch changed" in page
    row = page.split(f'data-compare-row="plan-{doubled["id"]}"')[1].split("</tr>")[0]
    assert ('class="num better" data-delta="per-gpu"' in row) is (rates[1] > rates[0])


def test_compare_refuses_ids_that_are_not_numbers_and_hides_other_teams(client, people, planned):
    client.force_login(people.member)
    response = client.get(reverse("studio:compare"), {"plan": "abc"})
    assert response.status_code == 400 and "plan id &#x27;abc&#x27; is not a number" in response.content.decode()
    client.force_login(people.outsider)
    assert client.get(reverse("studio:compare"), {"plan": planned.plan.pk}).status_code == 404


def test_history_of_plans_offers_compare_checkboxes_and_links_the_plan_page(client, people, planned):
    client.force_login(people.member)
    page = client.get(reverse("studio:history"), {"kind": "plans"}).content.decode()
    assert f'name="plan" value="{planned.plan.pk}"' in page and 'id="compare-form"' in page
    assert f'href="{reverse("studio:plan", args=[planned.plan.pk])}"' in page


def test_changing_a_v2_plans_pipeline_degree_re_lays_its_stages_over_the_new_ranks(people, hybrid_plan):
    doc = json.loads(json.dumps(hybrid_plan.plan_doc))
    doc["parallel"].pop("vpp", None)   # as the editor does before an edit
    doc["parallel"].update(pp=4, dp=1)
    doc["num_devices"] = 4
    response = _simulate(_client(people.member), hybrid_plan, doc)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["plan"]["num_devices"] == 4 and body["plan"]["parallel"]["pp"] == 4
    assert {stage["device"] for stage in body["plan"]["stages"]} == {0, 1, 2, 3}
    assert body["rescheduled"] and len(body["per_device"]) == 4
    expected = hybrid.predict(load_plan(body["plan"]), "llama-3-8b", "h100-sxm-1x8", SEQ_LEN)
    assert body["metrics"]["iteration_ms"] == pytest.approx(expected["predicted"]["iteration_ms"])


def test_a_v2_plans_perfetto_trace_is_its_pipeline_on_the_ranks_links(people, hybrid_plan):
    response = _export(_client(people.member), hybrid_plan, "perfetto")
    assert response.status_code == 200
    trace = json.loads(response.content)
    plan = load_plan(hybrid_plan.plan_doc)
    profile, cluster = hybrid.pipeline(plan, "llama-3-8b", "h100-sxm-1x8", SEQ_LEN)
    assert trace["otherData"]["iteration_ms"] == pytest.approx(simulate(plan, profile, cluster).iteration_ms)
    assert _export(_client(people.member), hybrid_plan, "torch-csv").status_code == 200


def test_a_viewer_gets_the_editor_to_try_edits_but_no_save(client, people, planned, django_user_model):
    client.force_login(_viewer(people, django_user_model))
    page = client.get(reverse("studio:plan", args=[planned.plan.pk])).content.decode()
    assert 'id="layer-strip"' in page and reverse("api:plan-simulate", args=[planned.plan.pk]) in page
    assert 'id="save-plan"' not in page and 'id="save-not-allowed"' in page
    client.force_login(people.member)
    assert 'id="save-plan"' in client.get(reverse("studio:plan", args=[planned.plan.pk])).content.decode()


# ---- framework exports of a v2 plan (Megatron-LM arguments, torchtitan config) -------------------------------------

def test_a_v2_plan_exports_megatron_args_and_a_torchtitan_config_as_the_cli_writes_them(people, hybrid_plan, tmp_path):
    client = _client(people.member)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(hybrid_plan.plan_doc))
    parallel = hybrid_plan.plan_doc["parallel"]
    for fmt, content_type, extension in (("megatron-args", "text/x-shellscript", "megatron.sh"),
                                         ("torchtitan-toml", "application/toml", "torchtitan.toml")):
        response = _export(client, hybrid_plan, fmt)
        assert response.status_code == 200, response.content
        assert response["Content-Type"] == f"{content_type}; charset=utf-8"
        assert response["Content-Disposition"] == (f'attachment; filename="plan-{hybrid_plan.pk}-'
                                                   f'{hybrid_plan.strategy}.{extension}"')
        out = tmp_path / f"{fmt}.out"
        assert planner_cli(["export", str(plan_path), "--to", fmt, "--model", "llama-3-8b", "--out", str(out)]) == 0
        assert response.content.decode() == out.read_text()
    args = _export(client, hybrid_plan, "megatron-args").content.decode()
    assert f"--tensor-model-parallel-size {parallel['tp']}\n" in args and "--num-query-groups 8\n" in args
    import tomllib
    toml = tomllib.loads(_export(client, hybrid_plan, "torchtitan-toml").content.decode())
    assert toml["parallelism"]["pipeline_parallel_degree"] == parallel["pp"]


def test_a_v1_plans_framework_export_is_a_400_naming_the_format(people, planned):
    for fmt in ("megatron-args", "torchtitan-toml"):
        response = _export(_client(people.member), planned.plan, fmt)
        assert response.status_code == 400
        (error,) = response.json()["errors"]
        assert error["field"] == "format" and "adaptis.plan/v2" in error["reason"]


def test_a_v2_plan_page_offers_the_framework_downloads_and_says_what_they_lose(client, people, hybrid_plan):
    """TP2 PP2 DP2: the executor runs it as planned, so it is offered for what an export loses."""
    from planner.exports import export_losses
    from planner.spec.presets import load_model_preset

    client.force_login(people.member)
    page = client.get(reverse("studio:plan", args=[hybrid_plan.pk])).content.decode()
    plan = load_plan(hybrid_plan.plan_doc)
    for fmt in ("megatron-args", "torchtitan-toml"):
        assert f'data-export="{fmt}" href="{reverse("api:plan-export", args=[hybrid_plan.pk, fmt])}"' in page
        lost = export_losses(fmt, plan, load_model_preset("llama-3-8b"), SEQ_LEN)
        if lost:
            assert f'data-export-lost="{fmt}"' in page and f'data-run-executor="{fmt}"' in page
            assert "data-executor-refusal" not in page
    assert "megatron-args|torchtitan-toml" in page


def test_a_v1_plan_page_shows_why_the_framework_downloads_are_not_offered(client, people, planned):
    client.force_login(people.member)
    page = client.get(reverse("studio:plan", args=[planned.plan.pk])).content.decode()
    for fmt in ("megatron-args", "torchtitan-toml"):
        assert f'data-export="{fmt}" aria-disabled="true"' in page
        assert re.search(rf'data-export-reason="{fmt}">.*adaptis.plan/v2', page)
