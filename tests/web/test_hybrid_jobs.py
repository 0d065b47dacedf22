"""Hybrid-parallel jobs (TP x CP x PP x DP x EP): the request's checks and their 400s, the job planned in-process
and through a real Celery worker, what its result and its stored v2 plan hold, the job page (configurations,
cluster picture, memory bars), cancellation, and the pure-PP jobs beside them."""

import json
import re
import time

import pytest
from django.test import Client
from django.urls import reverse

from adaptis_web.studio.catalog.clusters import cluster_create
from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import JobStatus, Plan, PlanningJob, Run, RunEvent
from adaptis_web.studio.planning.hybrid_pages import PICTURE_FIRST_NODES, cluster_picture, memory_bars, step_bars
from adaptis_web.studio.planning.jobs import job_create, job_request_check, job_run
from adaptis_web.studio.runs.calibration import job_replan_from_run
from planner import service as planner_service
from planner.cluster import load_cluster_preset
from planner.errors import SpecError
from planner.limits import MAX_SEQ_LEN
from planner.parallel.cost import CostOptions
from planner.parallel.evaluate import STEP_PARTS
from planner.parallel.planning import predict
from planner.plan import load_plan
from planner.spec.presets import load_model_preset
from tests.web.conftest import api_as

LLAMA = load_model_preset("llama-3-8b")
HYBRID_JOB = {"mode": "hybrid", "cluster_preset": "h100-sxm-2x8", "gpus": 16, "seq_len": 4096, "global_batch": 64,
              "time_budget_s": 3}


def _hybrid_request(**overrides):
    values = dict(spec=LLAMA, mode="hybrid", cluster_preset="h100-sxm-2x8", gpus=16, seq_len=4096, global_batch=64,
                  time_budget_s=3.0)
    values.update(overrides)
    return job_request_check(**values)


@pytest.fixture
def hybrid_job(people, llama, django_capture_on_commit_callbacks) -> PlanningJob:
    """llama-3-8b on 16 H100s of h100-sxm-2x8 (TP pinned to 2), planned in-process."""
    with django_capture_on_commit_callbacks(execute=False):
        job = job_create(spec_record=llama, user=people.member, request=_hybrid_request(pins={"tp": 2}))
    job_run(job_id=job.pk)
    job.refresh_from_db()
    return job


class TestRequestCheck:
    def test_a_hybrid_request_names_its_gpus_batch_and_pins(self):
        request = _hybrid_request(pins={"tp": 2, "recompute": "full", "pp": None})
        assert (request.mode, request.schedule, request.num_devices, request.num_microbatches) == ("hybrid", "hybrid",
                                                                                                   16, 0)
        assert request.hybrid.pins == {"tp": 2, "recompute": "full"}, "an empty pin is no pin"
        assert (request.hybrid.gpus, request.hybrid.seq_len, request.hybrid.global_batch) == (16, 4096, 64)

    def test_a_named_cluster_of_any_size_is_a_preset(self):
        request = _hybrid_request(cluster_preset="h100-sxm-1024x8", gpus=8192, global_batch=1024)
        assert request.cluster.num_devices == 8192 and request.cluster_preset == "h100-sxm-1024x8"

    def test_the_pipeline_mode_takes_a_named_cluster_too(self):
        request = job_request_check(spec=LLAMA, cluster_preset="h200-sxm-2x8", num_devices=4, num_microbatches=8)
        assert request.mode == "pipeline" and request.cluster.device.name == "H200-SXM-141GB"

    @pytest.mark.parametrize("overrides, field, reason", [
        ({"pins": {"tp": 8}, "gpus": 12}, "tp", "must divide gpus (12)"),
        ({"pins": {"tp": 2, "pp": 3}}, "pp", "tp 2 x pp 3 = 6 does not"),
        ({"pins": {"dp": 16}, "global_batch": 24}, "global_batch", "24 sequences cannot be split"),
        ({"pins": {"dp": 4, "microbatch_size": 4}, "global_batch": 24}, "global_batch", "dp 4 x microbatch_size 4"),
        ({"pins": {"recompute": "most"}}, "recompute", "must be one of none, selective, full"),
        ({"pins": {"zero": 3}}, "zero", "cannot be pinned"),
        ({"pins": {"ep": 2}}, "ep", "expert parallelism needs MoE layers"),
        ({"gpus": 32}, "gpus", "has 16 GPUs; asked for 32"),
        ({"gpus": None}, "gpus", "is required for a hybrid-parallel job"),
        ({"seq_len": 0}, "seq_len", "between 1 and"),
        ({"time_budget_s": 0.1}, "time_budget_s", "between 1 and 600"),
        ({"cluster_preset": "tpu-v5-4x4"}, "cluster_preset", "or a named cluster '<device>-<nodes>x<gpus per node>'"),
        ({"cluster_preset": "h100-sxm-0x8"}, "cluster_preset", "must be >= 1"),
        ({"pins": {"sharding": "zero3"}}, "sharding", "must be one of none, optimizer, full"),
        ({"pins": {"etp": 2}}, "etp", "expert tensor parallelism needs MoE layers"),
        ({"pins": {"precision": "fp8"}, "cluster_preset": "a100-80gb-sxm-2x8"}, "precision",
         "A100-SXM-80GB has none"),
        ({"pins": {"distributed_optimizer": False, "sharding": "full"}}, "distributed_optimizer",
         "give sharding alone"),
        ({"spec": load_model_preset("qwen3-next-80b-a3b"), "gpus": 8, "global_batch": 512}, "memory",
         "no configuration fits H100-SXM-80GB's 85,899,345,920 bytes: the closest"),
    ])
    def test_bad_input_names_the_field(self, overrides, field, reason):
        with pytest.raises(SpecError) as caught:
            _hybrid_request(**overrides)
        assert caught.value.field == field
        assert reason in caught.value.reason

    def test_a_saved_cluster_must_be_of_the_specs_team(self, people):
        theirs = cluster_create(team=people.outsider_team, owner=people.outsider,
                                cluster=load_cluster_preset("h100-sxm-2x8"))
        with pytest.raises(SpecError) as caught:
            _hybrid_request(cluster_preset="", saved_cluster=theirs, team=people.team)
        assert caught.value.field == "saved_cluster" and "belongs to team 'other-team'" in caught.value.reason


class TestPlanned:
    def test_the_job_stores_its_best_plan_as_a_v2_plan_and_its_result(self, hybrid_job):
        assert hybrid_job.status == JobStatus.SUCCEEDED, hybrid_job.error
        assert hybrid_job.progress_message.startswith("Hybrid plan ready: TP2 ")
        result = hybrid_job.result
        best = result["best"]
        assert best["parallel"]["tp"] == 2 and best["predicted"]["fits"]
        assert best["parallel"]["tp"] * best["parallel"]["cp"] * best["parallel"]["pp"] * best["parallel"]["dp"] == 16
        assert len(best["memory"]) == best["parallel"]["pp"]
        assert all(rank["total_bytes"] <= rank["capacity_bytes"] == 80 * 2**30 for rank in best["memory"])
        assert [rank["gpu"] for rank in best["rank_mapping"]["ranks"]] == list(range(16))
        assert result["runners_up"] and all(row["parallel"]["tp"] == 2 for row in result["runners_up"])
        assert "plan" not in best, "the plan document lives on its Plan row"
        plan = Plan.objects.get(job=hybrid_job)
        assert best["plan_id"] == plan.pk and plan.layout == best["layout"]
        assert plan.plan_doc["format"] == "adaptis.plan/v2"
        assert load_plan(plan.plan_doc).to_dict()["parallel"] == best["parallel"]
        assert plan.iteration_ms == pytest.approx(best["predicted"]["iteration_ms"])
        assert plan.plan_doc["predicted"]["mfu"] == pytest.approx(best["predicted"]["mfu"])

    def test_the_stored_plan_is_simulated_on_its_pipeline_ranks(self, people, hybrid_job):
        plan = Plan.objects.get(job=hybrid_job)
        body = api_as(people.owner).get(reverse("api:plan", args=[plan.pk])).json()
        assert body["plan"]["format"] == "adaptis.plan/v2"
        simulation = body["simulation"]
        assert len(simulation["per_device"]) == hybrid_job.result["best"]["parallel"]["pp"]
        # the pipeline part of the job's step is this simulation's makespan
        assert simulation["iteration_ms"] == pytest.approx(hybrid_job.result["best"]["predicted"]["pipeline_ms"],
                                                           rel=1e-6)

    def test_the_stored_plan_keeps_the_memory_its_job_page_shows(self, hybrid_job):
        simulation = Plan.objects.get(job=hybrid_job).simulation
        best = hybrid_job.result["best"]
        assert simulation["peak_memory_bytes"] == best["predicted"]["peak_memory_bytes"]
        assert [device["peak_memory_bytes"] for device in simulation["per_device"]] == \
            [rank["total_bytes"] for rank in best["memory"]]

    def test_the_api_returns_what_it_took(self, people, hybrid_job):
        body = api_as(people.owner).get(reverse("api:job", args=[hybrid_job.pk])).json()
        assert (body["mode"], body["gpus"], body["seq_len"], body["global_batch"]) == ("hybrid", 16, 4096, 64)
        assert body["pins"] == {"tp": 2} and body["schedule"] == "hybrid" and body["num_devices"] == 16
        assert body["result"]["best"]["short"].startswith("TP2 ")
        assert body["plans"][0]["id"] == body["result"]["best"]["plan_id"]
        listed = api_as(people.owner).get(reverse("api:jobs") + "?mode=hybrid").json()["results"]
        assert [row["id"] for row in listed] == [hybrid_job.pk]

    def test_the_job_page_says_its_sharding_precision_overlap_and_whose_mfu(self, client, people, hybrid_job):
        client.force_login(people.member)
        page = client.get(reverse("studio:job", args=[hybrid_job.pk])).content.decode()
        assert 'id="sharding">over DP: ' in page and 'id="job-overlap">overlapped: dp<' in page
        assert "(of the BF16 peak)" not in page   # a BF16 plan's MFU needs no caveat
        hybrid_job.result["best"]["parallel"]["precision"] = "fp8"   # as an FP8 search stores it
        hybrid_job.save(update_fields=["result"])
        page = client.get(reverse("studio:job", args=[hybrid_job.pk])).content.decode()
        assert "MFU (of the BF16 peak)" in page and "<tr><th>Precision</th><td>FP8" in page

    def test_the_job_page_shows_a_gpus_rate_whole_and_a_cpus_in_significant_digits(self, client, people, hybrid_job):
        client.force_login(people.member)
        rate = hybrid_job.result["best"]["predicted"]["hardware_tflops_per_gpu"]
        assert rate >= 10   # an H100's
        page = client.get(reverse("studio:job", args=[hybrid_job.pk])).content.decode()
        assert f'<div class="value">{rate:,.0f}</div>' in page
        # a CPU's shards (tiny-llama on cpu-1x8 plans at about 0.01 TFLOP/s a rank), which showed as 0
        hybrid_job.result["best"]["predicted"]["hardware_tflops_per_gpu"] = 0.01234
        hybrid_job.save(update_fields=["result"])
        page = client.get(reverse("studio:job", args=[hybrid_job.pk])).content.decode()
        assert '<div class="value">0.012</div>' in page

    def test_the_job_page_shows_configurations_cluster_and_memory(self, client, people, hybrid_job):
        client.force_login(people.member)
        page = client.get(reverse("studio:job", args=[hybrid_job.pk])).content.decode()
        best = hybrid_job.result["best"]
        assert best["short"] in page
        assert page.count("data-configuration-row") == 1 + len(hybrid_job.result["runners_up"])
        # Each runner-up against the chosen configuration by throughput (same GPUs and batch: tokens/s compares).
        best_rate = best["predicted"]["tokens_per_s"]
        shown = [float(value) for value in re.findall(r'data-vs-chosen="(-?[0-9.]+)"', page)]
        assert shown == pytest.approx([100 * (runner["predicted"]["tokens_per_s"] / best_rate - 1)
                                       for runner in hybrid_job.result["runners_up"]], abs=1e-5)
        assert all(value <= 1e-9 for value in shown), "the chosen configuration has the most tokens/s"
        assert page.count('class="gpu-cell"') == 16
        assert re.search(r'data-gpu="15"[^>]*><span class="gpu-index">#15</span> \(\d,\d,\d,\d,\d\)', page)
        totals = [float(value) for value in re.findall(r'data-total-gib="([0-9.]+)"', page)]
        capacities = {float(value) for value in re.findall(r'data-capacity-gib="([0-9.]+)"', page)}
        assert len(totals) == best["parallel"]["pp"] and capacities == {80.0}
        assert all(total <= 80.0 for total in totals)
        assert "Memory per GPU, by pipeline rank (GiB)" in page
        # where each configuration's step goes: one bar each, its parts adding up to its step
        scores = [best, *hybrid_job.result["runners_up"]]
        bars = re.findall(r'data-iteration-s="([0-9.]+)">(.*?)</div>\s*</div>', page, re.S)
        assert len(bars) == len(scores)
        for (step_s, parts), score in zip(bars, scores):
            seconds = [float(value) for value in re.findall(r'data-seconds="([0-9.]+)"', parts)]
            assert len(seconds) == len(STEP_PARTS)
            assert float(step_s) == pytest.approx(score["predicted"]["iteration_ms"] / 1e3, abs=1e-6)
            assert sum(seconds) == pytest.approx(float(step_s), abs=1e-5)
        assert 'id="timeline"' not in page, "a hybrid job shows no pure-PP plan section"
        plan = Plan.objects.get(job=hybrid_job)
        assert f'<a href="{reverse("studio:plan", args=[plan.pk])}" id="open-plan-page">plan #{plan.pk}</a>' in page

    def test_a_run_of_its_plan_without_collectives_cannot_recalibrate_it(self, people, hybrid_job):
        # a hybrid run re-plans on the cluster fitted to its collectives (tests/web/test_hybrid_runs.py); one that
        # observed actions but no collective has nothing to fit the links to, which its state refuses (409)
        plan = Plan.objects.get(job=hybrid_job)
        run = Run.objects.create(plan=plan, created_by=people.member, status=JobStatus.SUCCEEDED, world_size=1)
        action = plan.plan_doc["actions"][0][0]
        RunEvent.objects.create(run=run, seq=1, rank=0, device=0, action=action, stage=int(action.split("F")[0]),
                                kind="F", microbatch=0, step=0, start_ms=0.0, end_ms=1.0)
        with pytest.raises(SpecError) as caught:
            job_replan_from_run(run=run, user=people.member)
        assert caught.value.field == "run" and "no collective" in caught.value.reason
        assert PlanningJob.objects.count() == 1

    def test_a_model_that_fits_nowhere_is_a_400_from_the_api(self, people):
        record = spec_create(team=people.team, owner=people.owner, spec=load_model_preset("qwen3-next-80b-a3b"))
        response = api_as(people.member).post(reverse("api:jobs"), {"spec": record.pk, **HYBRID_JOB, "gpus": 8,
                                                                  "global_batch": 512}, format="json")
        assert response.status_code == 400
        [error] = response.json()["errors"]
        assert error["field"] == "memory" and "no configuration fits" in error["reason"]
        assert not PlanningJob.objects.exists()


class TestApiValidation:
    @pytest.mark.parametrize("changes, field, reason", [
        ({"tp": 3}, "tp", "3 cannot split the model"),
        ({"gpus": 12, "tp": 8}, "tp", "must divide gpus (12)"),
        ({"dp": 16, "global_batch": 24}, "global_batch", "cannot be split into micro-batches"),
        ({"recompute": "most"}, "recompute", '"most" is not a valid choice; give one of none, selective, full.'),
        ({"tp": "two"}, "tp", "A valid integer is required."),
        ({"gpus": None}, "gpus", "is required for a hybrid-parallel job"),
        ({"seq_len": MAX_SEQ_LEN + 1}, "seq_len", f"less than or equal to {MAX_SEQ_LEN}"),
        ({"gpus": 0}, "gpus", "greater than or equal to 1"),
        ({"mode": "both"}, "mode", '"both" is not a valid choice; give one of pipeline, hybrid, capacity.'),
        ({"cluster_preset": "b300-1x8"}, "cluster_preset", "unknown preset 'b300-1x8'"),
        ({"vpp": 0}, "vpp", "greater than or equal to 1"),
        ({"pp": 4, "vpp": 16}, "vpp", "need a pipeline of 64 stages"),   # llama-3-8b has 32 blocks
        # the pins as the job returns them, one object: refused, not dropped (the job would plan unpinned)
        ({"pins": {"tp": 2}}, "pins", "send each pin as a field of its own (tp, cp, pp"),
        ({"gpu": 16}, "gpu", "is not a field of this request; its fields are spec, mode,"),
    ])
    def test_bad_input_is_a_400_naming_the_field(self, people, llama, changes, field, reason):
        response = api_as(people.member).post(reverse("api:jobs"), {"spec": llama.pk, **HYBRID_JOB, **changes},
                                            format="json")
        assert response.status_code == 400, response.content
        [error] = response.json()["errors"]
        assert error["field"] == field and reason in error["reason"], error
        assert not PlanningJob.objects.exists()

    def test_context_parallelism_for_a_mamba_1_model_is_a_400_naming_cp(self, people):
        """Jamba's Mamba-1 layers have no context-parallel form (no framework splits them over CP): refused, not
        planned, and not a server error (the search had crashed scoring them)."""
        jamba = spec_create(team=people.team, owner=people.owner, spec=load_model_preset("jamba-v0.1"))
        response = api_as(people.member).post(reverse("api:jobs"), {"spec": jamba.pk, **HYBRID_JOB, "cp": 2},
                                            format="json")
        assert response.status_code == 400, response.content
        [error] = response.json()["errors"]
        assert error["field"] == "cp" and "Mamba-1 has no context-parallel form" in error["reason"], error
        assert not PlanningJob.objects.exists()

    def test_a_local_cpu_cluster_is_named_by_its_rank_count(self, people):
        """cpu-1x8: this host's CPU as 8 local ranks, to rehearse a TP x PP x DP plan on a workstation."""
        tiny = spec_create(team=people.team, owner=people.owner, spec=load_model_preset("tiny-llama"))
        response = api_as(people.member).post(reverse("api:jobs"), {
            "spec": tiny.pk, "mode": "hybrid", "cluster_preset": "cpu-1x8", "gpus": 8, "seq_len": 32,
            "global_batch": 16, "tp": 2, "pp": 2, "dp": 2, "recompute": "none"}, format="json")
        assert response.status_code == 201, response.content
        job = PlanningJob.objects.get(pk=response.json()["id"])
        assert job.cluster_doc["devices_per_node"] == 8 and job.cluster_doc["device"]["name"] == "CPU"

    def test_a_saved_cluster_of_no_team_of_yours_is_a_404_naming_it(self, people, llama):
        response = api_as(people.member).post(reverse("api:jobs"), {"spec": llama.pk, **HYBRID_JOB,
                                                                  "saved_cluster": 999999}, format="json")
        assert response.status_code == 404, response.content
        assert response.json()["errors"] == [{"field": "saved_cluster",
                                              "reason": "no cluster with id 999999 among your teams' clusters"}]
        assert not PlanningJob.objects.exists()

    def test_a_pipeline_job_still_needs_its_devices(self, people, llama):
        response = api_as(people.member).post(reverse("api:jobs"), {"spec": llama.pk, "cluster_preset": "cpu-host",
                                                                  "num_microbatches": 4}, format="json")
        assert response.status_code == 400
        assert response.json()["errors"] == [{"field": "num_devices", "reason": "is required for a pipeline-only job"}]

    def test_create_queues_a_hybrid_job_on_a_saved_cluster(self, people, llama, django_capture_on_commit_callbacks):
        saved = cluster_create(team=people.team, owner=people.member, cluster=load_cluster_preset("h100-sxm-2x8"),
                               name="our pod")
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = api_as(people.member).post(reverse("api:jobs"), {
                "spec": llama.pk, **{**HYBRID_JOB, "cluster_preset": ""}, "saved_cluster": saved.pk, "tp": 2,
                "vpp": 2, "distributed_optimizer": False}, format="json")
        assert response.status_code == 201, response.content
        body = response.json()
        assert (body["status"], body["mode"], body["saved_cluster"], body["cluster_preset"]) == ("queued", "hybrid",
                                                                                               saved.pk, "")
        assert body["pins"] == {"tp": 2, "vpp": 2, "distributed_optimizer": False}
        assert body["cluster"] == saved.doc and len(callbacks) == 1

    def test_the_schema_documents_the_hybrid_fields(self, client):
        schema = client.get(reverse("api-schema"), HTTP_ACCEPT="application/json").json()
        job_input = schema["components"]["schemas"]["JobCreateInputRequest"]["properties"]
        for field in ("mode", "gpus", "seq_len", "global_batch", "tp", "cp", "pp", "dp", "ep", "etp", "microbatch_size",
                      "vpp", "recompute", "sharding", "precision", "distributed_optimizer", "saved_cluster",
                      "token_budget", "gpu_counts"):
            assert field in job_input, field
        hybrid = schema["components"]["schemas"]["HybridResultOutput"]["properties"]
        assert {"best", "runners_up", "considered", "pruned_by_memory"} <= set(hybrid)
        memory = schema["components"]["schemas"]["HybridMemoryOutput"]["properties"]
        assert {"params_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "buffers_bytes",
                "overhead_bytes", "capacity_bytes"} <= set(memory)


class TestPicture:
    def test_a_large_job_draws_its_first_nodes_and_counts_the_rest(self):
        parallel = {"tp": 4, "cp": 2, "pp": 32, "dp": 8, "ep": 1, "microbatch_size": 2, "num_microbatches": 960}
        picture = cluster_picture(parallel, load_cluster_preset("h800-sxm-256x8"))
        assert len(picture["nodes"]) == PICTURE_FIRST_NODES and picture["shown_gpus"] == 64
        assert (picture["hidden_nodes"], picture["hidden_gpus"]) == (248, 1984)
        assert len(picture["stages"]) == 32
        assert picture["stages"][1] == {**picture["stages"][1], "first_gpu": 64, "last_gpu": 127, "first_node": 8,
                                        "last_node": 15}

    def test_every_gpu_of_a_small_job_is_drawn_with_its_coordinate(self):
        parallel = {"tp": 2, "cp": 1, "pp": 2, "dp": 4, "ep": 4}
        picture = cluster_picture(parallel, load_cluster_preset("h100-sxm-4x8"))
        cells = [cell for node in picture["nodes"] for cell in node["gpus"]]
        assert len(cells) == 16 and picture["idle_gpus"] == 16
        assert cells[9] == {**cells[9], "gpu": 9, "tp": 1, "dp": 0, "pp": 1, "ep": 0, "node": 1}
        assert cells[0]["colour"] != cells[8]["colour"], "pipeline ranks are told apart by colour"

    def test_memory_bars_are_in_percent_of_the_capacity(self):
        rank = {"pipeline_rank": 0, "params_bytes": 10 * 2**30, "gradients_bytes": 20 * 2**30,
                "optimizer_bytes": 5 * 2**30, "activations_bytes": 25 * 2**30, "buffers_bytes": 2**30,
                "overhead_bytes": 2**30, "total_bytes": 62 * 2**30, "capacity_bytes": 80 * 2**30, "fits": True}
        [bar] = memory_bars([rank])["bars"]
        assert [part["percent"] for part in bar["parts"]] == [12.5, 25.0, 6.25, 31.25, 2.5]
        assert bar["capacity_percent"] == 100.0 and bar["total_gib"] == 62

    def test_step_bars_are_in_percent_of_the_longest_step(self):
        def score(short, **parts):
            breakdown = {part: float(parts.get(part, 0)) for part in STEP_PARTS}
            return {"short": short, "predicted": {"iteration_ms": sum(breakdown.values()), "breakdown_ms": breakdown,
                                                  "schedule": "1f1b", "chunks": 1}}

        # stored before steps were broken down
        old = {"short": "old", "predicted": {"iteration_ms": 500.0, "schedule": "1f1b", "chunks": 1}}
        steps = step_bars({"best": score("a", compute=600, bubble=200),
                           "runners_up": [score("b", compute=700, tp=250, optimizer=50), old]})
        chosen, runner, before = steps["bars"]
        assert [part["key"] for part in steps["parts"]] == list(STEP_PARTS)
        assert chosen["chosen"] and not runner["chosen"]
        assert {part["key"]: part["percent"] for part in chosen["parts"] if part["percent"]} == {"compute": 60,
                                                                                                "bubble": 20}
        assert sum(part["percent"] for part in runner["parts"]) == 100 and runner["iteration_s"] == 1.0
        assert before["parts"] is None and before["iteration_s"] == 0.5


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
class TestThroughTheWorker:
    def test_a_hybrid_job_is_searched_by_the_worker_and_served_by_the_api(self, celery_worker, people, llama,
                                                                          wait_for):
        client = api_as(people.member)
        response = client.post(reverse("api:jobs"), {"spec": llama.pk, **HYBRID_JOB}, format="json")
        assert response.status_code == 201, response.content
        url = reverse("api:job", args=[response.json()["id"]])
        body = wait_for(lambda: (lambda job: job if job["status"] in ("succeeded", "failed") else None)(
            client.get(url).json()), timeout_s=120, message="the hybrid job to finish")
        assert body["status"] == "succeeded", (body["error"], celery_worker.log_tail())
        best = body["result"]["best"]
        assert best["predicted"]["fits"] and best["predicted"]["tokens_per_s"] > 0 and 0 < best["predicted"]["mfu"] < 1
        assert len(best["rank_mapping"]["ranks"]) == 16 and body["progress"] == 1.0
        plan = client.get(reverse("api:plan", args=[best["plan_id"]])).json()
        assert plan["plan"]["format"] == "adaptis.plan/v2" and plan["plan"]["parallel"] == best["parallel"]

    def test_a_running_hybrid_search_is_cancelled_within_the_search(self, celery_worker, people, wait_for):
        record = spec_create(team=people.team, owner=people.owner, spec=load_model_preset("deepseek-v3"))
        client = api_as(people.member)
        response = client.post(reverse("api:jobs"), {
            "spec": record.pk, "mode": "hybrid", "cluster_preset": "h800-sxm-256x8", "gpus": 2048, "seq_len": 4096,
            "global_batch": 15360, "time_budget_s": 60}, format="json")
        assert response.status_code == 201, response.content
        job_id = response.json()["id"]
        wait_for(lambda: PlanningJob.objects.get(pk=job_id).started_at, timeout_s=60,  # stays set, unlike a status
                 message="the worker to start the search")
        time.sleep(1.0)
        assert client.post(reverse("api:job-cancel", args=[job_id])).status_code == 200
        job = wait_for(lambda: (lambda row: row if row.is_finished else None)(PlanningJob.objects.get(pk=job_id)),
                       timeout_s=60, message="the search to stop")
        assert job.status == JobStatus.CANCELLED, (job.error, celery_worker.log_tail())
        if job.result:  # cancelled after a plan was simulated: that plan is kept
            assert job.result["cancelled"] and Plan.objects.filter(job=job).count() == 1
            # Noticed within the search, not after it: by its own record the search stopped far short of the
            # budget it would otherwise have spent refining its best configurations.
            assert job.result["seconds"] < job.time_budget_s / 2, job.result["seconds"]
        else:  # noticed while it scored the configurations (planner.parallel.search raised SearchCancelled)
            assert job.progress_message == "Cancelled before any configuration was simulated"


def test_the_pipeline_jobs_page_is_unchanged_beside_hybrid_ones(client, people, planned):
    client.force_login(people.owner)
    page = client.get(reverse("studio:job", args=[planned.job.pk])).content.decode()
    assert 'id="timeline"' in page and 'id="hybrid-configuration"' not in page
    assert json.loads(re.search(r'id="timeline-data" type="application/json">(.*?)</script>', page).group(1))


class TestOverlap:
    def test_a_job_searches_with_the_overlaps_it_names_and_its_plan_keeps_them(self, people, llama,
                                                                              django_capture_on_commit_callbacks):
        from adaptis_web.studio.planning.jobs import job_request_check

        request = _hybrid_request(software={"overlap": " tp, ep "})
        assert request.hybrid.software.overlap == "tp,ep"
        assert _hybrid_request().hybrid.software.overlap == "dp"
        with pytest.raises(SpecError) as caught:
            job_request_check(spec=LLAMA, cluster_preset="h100-sxm-2x8", mode="hybrid", gpus=16, seq_len=4096,
                              global_batch=64, software={"overlap": "tp,pp"})
        assert caught.value.field == "overlap" and "pp is no overlap" in caught.value.reason
        response = api_as(people.member).post(reverse("api:jobs"), {"spec": llama.pk, **HYBRID_JOB,
                                                                  "overlap": "dp,xp"}, format="json")
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == "overlap"
        assert not PlanningJob.objects.exists()
        with django_capture_on_commit_callbacks(execute=False):
            response = api_as(people.member).post(reverse("api:jobs"), {"spec": llama.pk, **HYBRID_JOB,
                                                                      "overlap": "tp,dp"}, format="json")
        assert response.status_code == 201, response.content
        assert response.json()["overlap"] == "tp,dp" and PlanningJob.objects.get().overlap == "tp,dp"

    def test_the_service_searches_with_the_overlaps_and_writes_them_into_the_plan(self):
        outcomes = [planner_service.plan_hybrid_job(spec=load_model_preset("mixtral-8x7b"),
                                                    cluster=load_cluster_preset("h100-sxm-2x8"), gpus=16, seq_len=4096,
                                                    global_batch=64, pins={"tp": 2, "pp": 2, "ep": 8, "etp": 1},
                                                    time_budget_s=2, software=planner_service.Software(overlap=overlap))
                    for overlap in ("dp", "dp,ep")]
        plain, hidden = (outcome.plan.plan_doc for outcome in outcomes)
        assert "overlap" not in plain["meta"] and hidden["meta"]["overlap"] == "dp,ep"
        assert hidden["predicted"]["breakdown_ms"]["ep"] < plain["predicted"]["breakdown_ms"]["ep"]


class TestFramework:
    def test_a_job_names_its_framework_and_bad_names_are_refused_naming_the_field(
            self, people, llama, django_capture_on_commit_callbacks):
        assert _hybrid_request(software={"framework": "torchtitan"}).hybrid.software.framework == "torchtitan"
        assert _hybrid_request().hybrid.software.framework == "megatron"
        capacity = job_request_check(spec=LLAMA, cluster_preset="h100-sxm-2x8", mode="capacity", seq_len=4096,
                                     global_batch=64, gpu_counts=[8, 16], token_budget=10**12,
                                     software={"framework": "torchtitan"})
        assert capacity.capacity.software.framework == "torchtitan"
        with pytest.raises(SpecError) as caught:
            _hybrid_request(software={"framework": "deepspeed"})
        assert caught.value.field == "framework" and "megatron, torchtitan" in caught.value.reason
        page = _job_field_through_the_api(people, llama, django_capture_on_commit_callbacks, "framework",
                                          bad="jax", good="torchtitan")
        assert "torchtitan's kernels" in page

    def test_the_service_searches_on_the_frameworks_kernels_and_writes_it_into_the_plan(self):
        outcomes = [planner_service.plan_hybrid_job(spec=LLAMA, cluster=load_cluster_preset("h100-sxm-2x8"), gpus=16,
                                                    seq_len=4096, global_batch=64,
                                                    pins={"tp": 2, "pp": 1, "cp": 1, "microbatch_size": 1,
                                                          "recompute": "none", "sharding": "optimizer"},
                                                    time_budget_s=2,
                                                    software=planner_service.Software(framework=framework))
                    for framework in ("megatron", "torchtitan")]
        megatron, titan = (outcome.plan.plan_doc for outcome in outcomes)
        assert "framework" not in megatron["meta"] and titan["meta"]["framework"] == "torchtitan"
        assert titan["predicted"]["breakdown_ms"]["compute"] > megatron["predicted"]["breakdown_ms"]["compute"]


def _job_field_through_the_api(people, llama, callbacks, field: str, *, bad: str, good: str) -> str:
    """POST a hybrid job with ``field`` ``bad`` (a 400 naming it, nothing stored), then ``good`` (stored and returned
    as given); the job page's HTML."""
    response = api_as(people.member).post(reverse("api:jobs"), {"spec": llama.pk, **HYBRID_JOB, field: bad},
                                          format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == field
    assert not PlanningJob.objects.exists()
    with callbacks(execute=False):
        response = api_as(people.member).post(reverse("api:jobs"), {"spec": llama.pk, **HYBRID_JOB, field: good},
                                              format="json")
    assert response.status_code == 201, response.content
    job = PlanningJob.objects.get()
    assert response.json()[field] == good and getattr(job, field) == good
    browser = Client()
    browser.force_login(people.member)
    return browser.get(reverse("studio:job", args=[job.pk])).content.decode()


class TestRecomputeModules:
    def test_a_job_names_its_recompute_modules_and_bad_ones_are_refused_naming_the_field(
            self, people, llama, django_capture_on_commit_callbacks):
        request = _hybrid_request(software={"recompute_modules": " mlp,core_attn "})
        assert request.hybrid.software.recompute_modules == "core_attn,mlp"
        assert _hybrid_request().hybrid.software.recompute_modules == "core_attn"
        capacity = job_request_check(spec=LLAMA, cluster_preset="h100-sxm-2x8", mode="capacity", seq_len=4096,
                                     global_batch=64, gpu_counts=[8, 16], token_budget=10**12,
                                     software={"recompute_modules": "mlp"})
        assert capacity.capacity.software.recompute_modules == "mlp"
        for modules, framework, said in (("mhc", "megatron", "mhc is no recompute module"),
                                         ("mlp", "torchtitan", "per-op checkpointing")):
            with pytest.raises(SpecError) as caught:
                _hybrid_request(software={"recompute_modules": modules, "framework": framework})
            assert caught.value.field == "recompute_modules" and said in caught.value.reason
        page = _job_field_through_the_api(people, llama, django_capture_on_commit_callbacks, "recompute_modules",
                                          bad="mhc", good="mlp")
        assert "recompute modules: mlp" in page

    def test_the_jobs_check_fits_the_model_with_its_recompute_modules(self):
        """Llama 3 8B fully sharded over 2 H100s at sequence 4,096 with selective recomputation fits only where the MLP
        is recomputed too: the check before queueing is made on the job's own software, not the defaults."""
        pins = {"tp": 1, "pp": 1, "cp": 1, "microbatch_size": 1, "recompute": "selective", "sharding": "full"}
        shape = dict(cluster_preset="h100-sxm-1x8", gpus=2, seq_len=4096, global_batch=2, pins=pins)
        with pytest.raises(SpecError) as caught:
            _hybrid_request(**shape)
        assert caught.value.field == "memory"
        request = _hybrid_request(**shape, software={"recompute_modules": "mlp"})
        assert request.hybrid.software.recompute_modules == "mlp"

    def test_the_service_recomputes_the_named_modules_and_a_re_prediction_keeps_them(self):
        """Megatron-Core's ``mlp`` module frees a dense MLP's kept activations and re-runs its kernels: the plan holds
        less, takes longer, says so in its meta, and predicting it again from its document gives the same step."""
        cluster = load_cluster_preset("h100-sxm-2x8")
        outcomes = [planner_service.plan_hybrid_job(spec=LLAMA, cluster=cluster, gpus=16, seq_len=4096, global_batch=64,
                                                    pins={"tp": 2, "pp": 1, "cp": 1, "microbatch_size": 1,
                                                          "recompute": "selective", "sharding": "optimizer"},
                                                    time_budget_s=2,
                                                    software=planner_service.Software(recompute_modules=modules))
                    for modules in ("core_attn", "mlp")]
        attention, mlp = (outcome.plan.plan_doc for outcome in outcomes)
        assert "recompute_modules" not in attention["meta"] and mlp["meta"]["recompute_modules"] == "mlp"
        assert mlp["predicted"]["peak_memory_bytes"] < attention["predicted"]["peak_memory_bytes"]
        assert mlp["predicted"]["breakdown_ms"]["recompute"] > attention["predicted"]["breakdown_ms"]["recompute"]
        again, without = (predict(load_plan(mlp), LLAMA, cluster, 4096, options) for options in (None, CostOptions()))
        assert again["predicted"]["iteration_ms"] == pytest.approx(mlp["predicted"]["iteration_ms"])
        assert without["predicted"]["iteration_ms"] < again["predicted"]["iteration_ms"]   # the meta was read


class TestEpDispatcher:
    def test_a_job_names_its_moe_dispatcher_searches_with_it_and_bad_names_are_refused(
            self, people, llama, django_capture_on_commit_callbacks):
        assert _hybrid_request().hybrid.software.ep_dispatcher == "alltoall"
        assert _hybrid_request(software={"ep_dispatcher": "deepep"}).hybrid.software.ep_dispatcher == "deepep"
        with pytest.raises(SpecError) as caught:
            _hybrid_request(software={"ep_dispatcher": "nccl"})
        assert caught.value.field == "ep_dispatcher" and "alltoall, deepep, hybridep" in caught.value.reason
        page = _job_field_through_the_api(people, llama, django_capture_on_commit_callbacks, "ep_dispatcher",
                                          bad="nccl", good="deepep")
        assert "DeepEP dispatch" in page
        # Qwen3-30B-A3B's 128 experts over EP 16 on 2 nodes: DeepEP's dispatch costs less, and the plan records it
        outcomes = [planner_service.plan_hybrid_job(spec=load_model_preset("qwen3-30b-a3b"),
                                                    cluster=load_cluster_preset("h100-sxm-2x8"), gpus=16, seq_len=4096,
                                                    global_batch=64,
                                                    pins={"tp": 1, "pp": 1, "ep": 16, "recompute": "full"},
                                                    time_budget_s=2,
                                                    software=planner_service.Software(ep_dispatcher=dispatcher))
                    for dispatcher in ("alltoall", "deepep")]
        alltoall, deepep = (outcome.plan.plan_doc for outcome in outcomes)
        assert "ep_dispatcher" not in alltoall["meta"] and deepep["meta"]["ep_dispatcher"] == "deepep"
        assert deepep["predicted"]["breakdown_ms"]["ep"] < alltoall["predicted"]["breakdown_ms"]["ep"]
