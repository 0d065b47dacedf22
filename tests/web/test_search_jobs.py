"""AdaPtis search jobs in-process: request checks, the stored plans and summary, progress, cancellation, the
API and the job page. ``test_worker.py`` runs searches (and cancels them) through a real worker."""

import html
import json
import re
import time

import pytest
from django.urls import reverse

from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import JobStatus, Plan, PlanningJob
from adaptis_web.studio.planning import progress
from adaptis_web.studio.planning.jobs import job_cancel, job_request_check, job_run
from planner.baselines import build_baseline
from planner.cluster import load_cluster, load_cluster_preset
from planner.cost import analytic_profile
from planner.errors import SpecError
from planner.plan import load_plan
from planner.profile import load_profile
from planner.simulator import simulate
from planner.spec.presets import load_model_preset
from tests.web.conftest import api_as

HYBRID = load_model_preset("tiny-hybrid")
CPU_HOST_MEMORY = load_cluster_preset("cpu-host").device.memory_bytes


def _request(**overrides):
    values = dict(spec=HYBRID, num_devices=2, num_microbatches=8, cluster_preset="cpu-host", schedule="adaptis",
                  time_budget_s=5.0)
    values.update(overrides)
    return job_request_check(**values)


def _search_job(people, **overrides) -> PlanningJob:
    record = spec_create(team=people.team, owner=people.owner, spec=HYBRID)
    request = _request(**overrides)
    return PlanningJob.objects.create(
        spec=record, created_by=people.member, cluster_preset=request.cluster_preset,
        cluster_doc=request.cluster.to_dict(), num_devices=request.num_devices,
        num_microbatches=request.num_microbatches, schedule=request.schedule, partition=request.partition,
        seed=request.seed, time_budget_s=request.time_budget_s, memory_limit_bytes=request.memory_limit_bytes)


class TestSearchRequestCheck:
    def test_accepts_the_search_with_its_settings(self):
        request = _request(seed=7, time_budget_s=2, memory_limit_bytes=2**30)
        assert (request.schedule, request.seed, request.time_budget_s) == ("adaptis", 7, 2.0)
        assert request.memory_limit_bytes == 2**30
        assert request.partition == "", "the search chooses its own partition"

    def test_needs_no_chunks_only_a_layer_per_device(self):
        tiny_llama = load_model_preset("tiny-llama")  # 6 layers: zb-v could use at most 3 devices
        assert _request(spec=tiny_llama, cluster_preset="h100-sxm-1x8", num_devices=6).num_devices == 6
        with pytest.raises(SpecError) as caught:
            _request(spec=tiny_llama, cluster_preset="h100-sxm-1x8", num_devices=7)
        assert caught.value.field == "num_devices" and "has only 6 layers" in caught.value.reason

    @pytest.mark.parametrize("overrides, field, reason", [
        ({"seed": -1}, "seed", "between 0 and 2147483647; got -1"),
        ({"seed": 2**31}, "seed", "between 0 and 2147483647"),
        ({"seed": True}, "seed", "must be an integer"),
        ({"time_budget_s": 0.5}, "time_budget_s", "between 1 and 600 seconds; got 0.5"),
        ({"time_budget_s": 601}, "time_budget_s", "between 1 and 600 seconds"),
        ({"time_budget_s": float("nan")}, "time_budget_s", "between 1 and 600 seconds"),
        ({"memory_limit_bytes": 0}, "memory_limit_bytes", "between 1 and the CPU's 17,179,869,184 (16 GiB)"),
        ({"memory_limit_bytes": CPU_HOST_MEMORY + 1}, "memory_limit_bytes", "between 1 and"),
        ({"memory_limit_bytes": 1.5}, "memory_limit_bytes", "got 1.5"),
    ])
    def test_rejects_search_settings_out_of_range(self, overrides, field, reason):
        with pytest.raises(SpecError) as caught:
            _request(**overrides)
        assert caught.value.field == field
        assert reason in caught.value.reason


class TestSearchJobRun:
    def test_stores_the_adaptis_plan_and_every_baseline_it_beat(self, people):
        job = _search_job(people, num_devices=4, num_microbatches=8)
        plan = job_run(job_id=job.pk)
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED, job.error
        assert job.progress == 1.0 and job.progress_message.startswith("AdaPtis plan ready: ")
        assert plan.strategy == "adaptis" and plan.plan_doc["strategy"] == "adaptis"
        result = job.result
        json.dumps(result, allow_nan=False)  # plain JSON: no infinities or NaNs in the stored summary

        # The stored numbers are the simulator's on the stored plan, profile and cluster.
        cluster = load_cluster(job.cluster_doc)
        profile = analytic_profile(HYBRID, cluster)
        assert plan.profile_doc == profile.to_dict()
        resimulated = simulate(load_plan(plan.plan_doc), load_profile(plan.profile_doc), cluster)
        assert plan.iteration_ms == pytest.approx(resimulated.iteration_ms, rel=1e-12)
        assert result["iteration_ms"] == pytest.approx(plan.iteration_ms, rel=1e-12)

        baselines = {row.strategy: row for row in Plan.objects.filter(job=job).exclude(pk=plan.pk)}
        assert set(baselines) == set(result["baselines"]) and len(baselines) >= 5
        for name, row in baselines.items():
            metrics = result["baselines"][name]
            expected = build_baseline(metrics["schedule"], profile, 4, 8, cluster=cluster,
                                      partition=metrics["partition"])
            assert row.plan_doc["actions"] == expected.to_dict()["actions"], name
            assert row.iteration_ms == pytest.approx(expected.predicted["iteration_ms"], rel=1e-12), name
            assert (metrics["plan_id"], metrics["layout"]) == (row.pk, row.layout) and metrics["fits_memory"]
            assert plan.iteration_ms <= row.iteration_ms * (1 + 1e-12), f"AdaPtis is slower than {name}"
            assert metrics["adaptis_speedup"] == pytest.approx(row.iteration_ms / plan.iteration_ms)
        assert (result["plan_id"], result["layout"]) == (plan.pk, plan.layout)

        assert result["lower_bound_ms"] <= plan.iteration_ms
        assert result["gap"] == pytest.approx(plan.iteration_ms / result["lower_bound_ms"] - 1)
        assert result["lower_bound_ms"] == max(value for name, value in result["lower_bound"].items()
                                               if name != "lower_bound_ms")
        assert result["candidates"][0]["rank"] == 1 and result["candidates"][0]["iteration_ms"] > 0
        assert result["stats"]["seed"] == 0 and result["cancelled"] is False
        assert result["memory_limit_bytes"] == CPU_HOST_MEMORY, "no limit given: the device's memory"

    def test_the_same_seed_finds_the_same_plan(self, people):
        first = job_run(job_id=_search_job(people, seed=3).pk)
        second = job_run(job_id=_search_job(people, seed=3).pk)
        assert first.plan_doc["stages"] == second.plan_doc["stages"]
        assert first.plan_doc["actions"] == second.plan_doc["actions"]

    # tiny-hybrid's model state is 11,628,000 bytes: 1 KiB cannot hold its largest layer's, and half of the
    # state plus one byte holds the state on two devices but leaves no room for any micro-batch in flight.
    def test_a_memory_limit_below_the_model_state_is_refused_before_queueing_in_binary_units(self, people):
        with pytest.raises(SpecError) as refused:
            _request(memory_limit_bytes=1024)
        assert refused.value.field == "memory_limit_bytes"
        assert "of model state (parameters, gradients and optimizer state) but a device holds 1.0 KiB (1,024 " \
               "bytes); no partition can fit it" in refused.value.reason, refused.value.reason
        with pytest.raises(SpecError) as refused:
            _request(memory_limit_bytes=4_000_000)  # the largest layer fits, the whole state not on 2 devices
        assert refused.value.field == "memory_limit_bytes" and "but 2 devices x 3.8 MiB hold 7.6 MiB (8,000,000 " \
            "bytes); use more devices" in refused.value.reason, refused.value.reason

    @pytest.mark.parametrize("limit, reason", [
        (5_814_001, "no plan fits 5.5 MiB (5,814,001 bytes) per device: the closest candidate"),
    ])
    def test_a_memory_limit_nothing_fits_fails_the_job_naming_the_field(self, people, limit, reason):
        job = _search_job(people, memory_limit_bytes=limit)
        assert job_run(job_id=job.pk) is None
        job.refresh_from_db()
        assert job.status == JobStatus.FAILED and job.finished_at is not None
        assert job.error.startswith("memory_limit_bytes: ") and reason in job.error, job.error
        assert Plan.objects.filter(job=job).count() == 0, "nothing half-stored"

    def test_a_tight_memory_limit_is_met_and_the_baselines_over_it_are_marked(self, people):
        limit = 6_400_000
        job = _search_job(people, memory_limit_bytes=limit)
        plan = job_run(job_id=job.pk)
        result = PlanningJob.objects.get(pk=job.pk).result
        assert plan.simulation["peak_memory_bytes"] <= limit
        over = {name for name, metrics in result["baselines"].items() if not metrics["fits_memory"]}
        assert over and all(result["baselines"][name]["peak_memory_bytes"] > limit for name in over)
        for name, metrics in result["baselines"].items():
            if metrics["fits_memory"]:
                assert plan.iteration_ms <= metrics["iteration_ms"] * (1 + 1e-12), name


class TestProgressAndCancelCallbacks:
    def test_progress_is_mapped_onto_the_jobs_span_and_throttled(self, people):
        job = _search_job(people)
        write = progress.search_reporter(job.pk, 0.2, 0.8)
        write(0.5, "40 candidates scored, best 10.7 ms")
        write(0.9, "too soon after the last write")
        job.refresh_from_db()
        assert job.progress == pytest.approx(0.5)
        assert job.progress_message == "Searching: 40 candidates scored, best 10.7 ms"

    def test_the_cancel_flag_is_read_from_the_row_at_most_every_interval(self, people):
        job = _search_job(people)
        cancelled = progress.cancel_reader(job.pk)
        assert cancelled() is False
        PlanningJob.objects.filter(pk=job.pk).update(cancel_requested=True)
        assert cancelled() is False, "read again only after the throttle interval"
        time.sleep(progress.ROW_IO_INTERVAL_S + 0.05)
        assert cancelled() is True


class TestJobCancel:
    def test_a_queued_job_is_cancelled_at_once_and_never_runs(self, people):
        job = _search_job(people)
        job = job_cancel(job=job, user=people.member)
        assert (job.status, job.cancel_requested) == (JobStatus.CANCELLED, True)
        assert job.is_finished and job.finished_at is not None
        assert job_run(job_id=job.pk) is None, "the worker only claims queued jobs"
        job.refresh_from_db()
        assert job.status == JobStatus.CANCELLED and job.started_at is None
        assert Plan.objects.filter(job=job).count() == 0

    def test_a_running_job_is_asked_to_stop(self, people):
        job = _search_job(people)
        PlanningJob.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
        job = job_cancel(job=job, user=people.owner)
        assert (job.status, job.cancel_requested) == (JobStatus.RUNNING, True)

    @pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED])
    def test_a_finished_job_cannot_be_cancelled(self, people, status):
        job = _search_job(people)
        PlanningJob.objects.filter(pk=job.pk).update(status=status)
        with pytest.raises(SpecError) as caught:
            job_cancel(job=job, user=people.owner)
        assert caught.value.field == "status" and f"already {status}" in caught.value.reason

    def test_a_cancel_that_arrives_during_the_search_ends_it_cancelled_keeping_its_plans(self, people, monkeypatch):
        job = _search_job(people)
        real_reader = progress.cancel_reader

        def cancel_once_searching(job_id):
            read = real_reader(job_id)
            PlanningJob.objects.filter(pk=job_id).update(cancel_requested=True)  # as job_cancel does
            return read

        monkeypatch.setattr(progress, "cancel_reader", cancel_once_searching)
        plan = job_run(job_id=job.pk)
        job.refresh_from_db()
        assert job.status == JobStatus.CANCELLED and job.is_finished
        assert job.progress_message.startswith("Cancelled: kept the best plan found so far")
        assert job.result["cancelled"] is True and job.result["stats"]["stopped"] == "cancelled"
        assert plan.strategy == "adaptis" and job.result["plan_id"] == plan.pk
        assert job.plans.count() == 1 + len(job.result["baselines"])


class TestSearchApi:
    def test_create_a_search_job(self, people, django_capture_on_commit_callbacks):
        record = spec_create(team=people.team, owner=people.owner, spec=HYBRID)
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = api_as(people.member).post(reverse("api:jobs"), {
                "spec": record.pk, "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": 8,
                "schedule": "adaptis", "seed": 5, "time_budget_s": 3, "memory_limit_bytes": 2**30}, format="json")
        assert response.status_code == 201
        body = response.json()
        assert (body["schedule"], body["seed"], body["time_budget_s"], body["memory_limit_bytes"]) == \
            ("adaptis", 5, 3.0, 2**30)
        assert (body["status"], body["cancel_requested"], body["result"], body["plans"]) == \
            ("queued", False, {}, [])
        assert len(callbacks) == 2, "the planning task and, on cpu-host, the profile it waits for (runs.profiling)"

    @pytest.mark.parametrize("changes, field, reason", [
        ({"seed": -3}, "seed", "greater than or equal to 0"),
        ({"seed": "lucky"}, "seed", "A valid integer is required."),
        ({"time_budget_s": 0}, "time_budget_s", "greater than or equal to 1"),
        ({"time_budget_s": 3600}, "time_budget_s", "less than or equal to 600"),
        ({"memory_limit_bytes": -1}, "memory_limit_bytes", "greater than or equal to 1"),
        ({"memory_limit_bytes": 1 << 40}, "memory_limit_bytes", "between 1 and the CPU's"),
        ({"num_devices": 10}, "num_devices", "between 1 and the cluster's 4 devices"),
    ])
    def test_bad_search_input_is_a_400_naming_the_field(self, people, changes, field, reason):
        record = spec_create(team=people.team, owner=people.owner, spec=HYBRID)
        data = {"spec": record.pk, "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": 8,
                "schedule": "adaptis"}
        data.update(changes)
        response = api_as(people.member).post(reverse("api:jobs"), data, format="json")
        assert response.status_code == 400
        [error] = response.json()["errors"]
        assert error["field"] == field and reason in error["reason"], error
        assert PlanningJob.objects.count() == 0

    def test_detail_returns_the_summary_and_every_plan(self, people):
        job = _search_job(people)
        plan = job_run(job_id=job.pk)
        body = api_as(people.member).get(reverse("api:job", args=[job.pk])).json()
        assert body["status"] == "succeeded" and body["progress"] == 1.0
        assert body["plans"][0] == {"id": plan.pk, "name": "", "strategy": "adaptis", "iteration_ms": plan.iteration_ms,
                                    "bubble_ratio": plan.bubble_ratio, "parent": None}
        assert body["plan"] == plan.pk
        assert {entry["strategy"] for entry in body["plans"][1:]} == set(body["result"]["baselines"])
        assert body["result"]["lower_bound_ms"] <= body["result"]["iteration_ms"]
        assert {"adaptis_speedup", "plan_id", "peak_memory_bytes"} <= set(body["result"]["baselines"]["1f1b"])

    def test_cancel_a_queued_job(self, people):
        job = _search_job(people)
        response = api_as(people.member).post(reverse("api:job-cancel", args=[job.pk]))
        assert response.status_code == 200
        assert (response.json()["status"], response.json()["cancel_requested"]) == ("cancelled", True)

    def test_cancel_of_a_finished_job_is_a_409_naming_status(self, people):
        job = _search_job(people)
        job_run(job_id=job.pk)
        response = api_as(people.member).post(reverse("api:job-cancel", args=[job.pk]))
        assert response.status_code == 409
        assert response.json() == {"errors": [{
            "field": "status", "reason": "the job has already succeeded; only a queued or running job can be "
                                         "cancelled"}]}

    def test_an_outsider_cannot_cancel(self, people):
        job = _search_job(people)
        assert api_as(people.outsider).post(reverse("api:job-cancel", args=[job.pk])).status_code == 404
        job.refresh_from_db()
        assert job.status == JobStatus.QUEUED and not job.cancel_requested

    def test_presets_and_schema_offer_the_search(self, people):
        assert "adaptis" in api_as(people.member).get(reverse("api:presets")).json()["schedules"]
        schema = json.loads(api_as(people.member).get(reverse("api-schema"), {"format": "json"}).content)
        assert "/api/jobs/{job_id}/cancel/" in schema["paths"]


class TestSearchPages:
    def test_the_upload_form_offers_the_search_first_with_its_settings(self, client, people):
        client.force_login(people.member)
        page = client.get(reverse("studio:upload")).content.decode()
        assert re.search(r'<option value="adaptis" selected>AdaPtis search</option>', page)
        for field in ("id_seed", "id_time_budget_s", "id_memory_limit_gib"):
            assert f'id="{field}"' in page, field

    def test_a_memory_limit_in_gib_is_stored_in_bytes_and_checked_on_its_field(self, client, people, spec_text,
                                                                               django_capture_on_commit_callbacks):
        from django.core.files.uploadedfile import SimpleUploadedFile

        client.force_login(people.member)
        data = {"team": people.team.pk, "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": 8,
                "schedule": "adaptis", "seed": 4, "time_budget_s": 2}
        response = client.post(reverse("studio:upload"), {
            **data, "file": SimpleUploadedFile("h.json", spec_text("tiny-hybrid").encode()), "memory_limit_gib": 99})
        assert response.status_code == 400
        assert re.search(r'id="id_memory_limit_gib".*?<ul class="errorlist"><li>must be a number of bytes between 1 '
                         r"and the CPU&#x27;s 17,179,869,184 \(16 GiB\)", response.content.decode(), re.S)
        with django_capture_on_commit_callbacks(execute=False):
            response = client.post(reverse("studio:upload"), {
                **data, "file": SimpleUploadedFile("h.json", spec_text("tiny-hybrid").encode()),
                "memory_limit_gib": 0.5})
        job = PlanningJob.objects.get()
        assert response.status_code == 302
        assert (job.schedule, job.seed, job.time_budget_s, job.memory_limit_bytes) == ("adaptis", 4, 2.0, 2**29)

    def test_a_running_search_shows_progress_and_a_cancel_button_that_cancels(self, client, people):
        job = _search_job(people)
        client.force_login(people.member)
        page = client.get(reverse("studio:job", args=[job.pk])).content.decode()
        assert "data-job-progress" in page and 'id="cancel-job"' in page
        response = client.post(reverse("studio:job-cancel", args=[job.pk]))
        assert response.status_code == 302 and response.url == reverse("studio:job", args=[job.pk])
        job.refresh_from_db()
        assert job.status == JobStatus.CANCELLED
        page = client.get(response.url).content.decode()
        assert "Cancelled." in page and "data-job-progress" not in page

    def test_a_finished_search_compares_adaptis_with_every_baseline(self, client, people):
        job = _search_job(people)
        plan = job_run(job_id=job.pk)
        job.refresh_from_db()
        client.force_login(people.member)
        page = client.get(reverse("studio:job", args=[job.pk])).content.decode()
        rows = re.findall(r'<tr data-strategy="([^"]+)"', page)
        assert rows[0] == "adaptis" and set(rows[1:]) == set(job.result["baselines"])
        assert f"{job.result['lower_bound_ms']:.3f} ms" in page and f"{100 * job.result['gap']:.1f} %" in page
        binding, memory = job.result["binding"], job.result["memory_binding"]
        bound = job.result["lower_bound"]
        assert bound[binding["term"]] == max(value for name, value in bound.items() if name != "lower_bound_ms")
        assert f"The bound is set by {html.escape(binding['text'])}." in page
        assert memory["text"].startswith(f"memory on device {memory['device']} allows")
        assert f"For the plan's own partition, {html.escape(memory['text'])}." in page
        assert 'id="candidates"' in page
        assert f"Plan #{plan.pk} · adaptis" in page, "the page opens on the AdaPtis plan"
        slowest = max(job.result["baselines"].items(), key=lambda item: item[1]["iteration_ms"])
        assert f"{slowest[1]['adaptis_speedup']:.2f}×" in page
        # Any row opens that plan, with its chart and its own Run on CPU form.
        baseline_id = slowest[1]["plan_id"]
        page = client.get(reverse("studio:job", args=[job.pk]), {"plan": baseline_id}).content.decode()
        assert f"Plan #{baseline_id} · {slowest[0]}" in page
        assert reverse("studio:plan-run", args=[baseline_id]) in page
