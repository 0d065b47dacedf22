"""Tasks executed by a real Celery worker over the real Redis, against the shared test database.

Rows are committed (``transaction=True``), so each enqueue happens on commit exactly as in production.
"""

import json

import pytest
import redis
from django.conf import settings
from django.urls import reverse

from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import JobStatus, Plan, PlanningJob, Run, RunEvent
from adaptis_web.studio.planning.jobs import job_cancel, job_create, job_request_check
from adaptis_web.studio.planning.predictions import plan_prediction
from adaptis_web.studio.runs.live_events import run_stream_key
from planner.cluster import load_cluster_preset
from planner.simulator import simulate
from planner.spec.presets import load_model_preset
from tests.web.conftest import api_as

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _finished(model, pk):
    row = model.objects.get(pk=pk)
    return row if row.is_finished else None


def test_the_worker_plans_an_uploaded_spec(celery_worker, people, spec_text, wait_for):
    response = api_as(people.member).post(reverse("api:specs"), {"doc": json.loads(spec_text())}, format="json")
    spec_id = response.json()["id"]
    response = api_as(people.member).post(reverse("api:jobs"), {
        "spec": spec_id, "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": 8}, format="json")
    assert response.status_code == 201
    job = wait_for(lambda: _finished(PlanningJob, response.json()["id"]), timeout_s=60,
                   message=f"the planning job\n{celery_worker.log_tail()}")
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert (job.progress, job.progress_message) == (1.0, "Plan ready")
    assert job.started_at <= job.finished_at
    plan = Plan.objects.get(job=job)
    # The worker's numbers agree with the simulator run here on the stored plan and the profile the job planned
    # on: on cpu-host, the one measured on the runs' host (runs.profiling).
    cluster = load_cluster_preset("cpu-host")
    from planner.plan import load_plan
    from planner.profile import load_profile

    assert job.measured_profile.status == JobStatus.SUCCEEDED
    expected = simulate(load_plan(plan.plan_doc), load_profile(job.measured_profile.profile_doc), cluster)
    assert plan.iteration_ms == pytest.approx(expected.iteration_ms)
    assert {entry["device"] for entry in plan_prediction(plan)["timeline"]} == {0, 1}
    body = api_as(people.owner).get(reverse("api:job", args=[job.pk])).json()
    assert [entry["id"] for entry in body["plans"]] == [plan.pk] and body["status"] == "succeeded"


def test_the_worker_records_a_planning_failure_on_the_job(celery_worker, people, planned, wait_for):
    # A job row that slipped past the request checks (e.g. written by an older release): the task must
    # still end it with the planner's error instead of leaving it queued.
    job = PlanningJob.objects.create(spec=planned.spec, created_by=people.owner, cluster_preset="cpu-host",
                                     cluster_doc=planned.job.cluster_doc, num_devices=2, num_microbatches=4,
                                     schedule="not-a-schedule", celery_task_id="test-failing-job")
    from adaptis_web.studio.tasks import plan_job_run

    plan_job_run.apply_async(args=[job.pk], task_id=job.celery_task_id)
    job = wait_for(lambda: _finished(PlanningJob, job.pk), timeout_s=60,
                   message=f"the failing job\n{celery_worker.log_tail()}")
    assert job.status == JobStatus.FAILED
    assert "schedule" in job.error and job.finished_at is not None


def _search_job_over_api(people, spec: str, **fields) -> int:
    record = spec_create(team=people.team, owner=people.owner, spec=load_model_preset(spec))
    response = api_as(people.member).post(reverse("api:jobs"), {"spec": record.pk, "schedule": "adaptis", **fields},
                                        format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def test_the_worker_runs_a_search_and_stores_it_with_every_baseline(celery_worker, people, wait_for):
    job_id = _search_job_over_api(people, "tiny-hybrid", cluster_preset="cpu-host", num_devices=2,
                                  num_microbatches=8, time_budget_s=5)
    job = wait_for(lambda: _finished(PlanningJob, job_id), timeout_s=60,
                   message=f"the search job\n{celery_worker.log_tail()}")
    assert job.status == JobStatus.SUCCEEDED, job.error
    adaptis = Plan.objects.get(job=job, strategy="adaptis")
    assert job.result["plan_id"] == adaptis.pk
    baselines = Plan.objects.filter(job=job).exclude(pk=adaptis.pk)
    assert {plan.strategy for plan in baselines} == set(job.result["baselines"])
    assert all(adaptis.iteration_ms <= plan.iteration_ms * (1 + 1e-12) for plan in baselines)


def test_a_search_that_cannot_fit_its_memory_limit_fails_naming_the_field(celery_worker, people, wait_for):
    """A 1 KiB limit cannot hold tiny-hybrid's largest layer: refused before anything is queued. Half of its analytic
    (bf16) model state plus one byte passes that check, but not the worker: the job plans on the profile measured on
    this host, whose float32 state is twice that (or, on the analytic profile, the search finds no micro-batch in
    flight fits). The job fails in the worker, naming the field, the limit in binary units."""
    record = spec_create(team=people.team, owner=people.owner, spec=load_model_preset("tiny-hybrid"))
    body = {"spec": record.pk, "schedule": "adaptis", "cluster_preset": "cpu-host", "num_devices": 2,
            "num_microbatches": 8}
    refused = api_as(people.member).post(reverse("api:jobs"), {**body, "memory_limit_bytes": 1024}, format="json")
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "memory_limit_bytes"
    assert "no partition can fit it" in refused.json()["errors"][0]["reason"] and not PlanningJob.objects.exists()
    job_id = _search_job_over_api(people, "tiny-hybrid", cluster_preset="cpu-host", num_devices=2,
                                  num_microbatches=8, memory_limit_bytes=5_814_001)
    job = wait_for(lambda: _finished(PlanningJob, job_id), timeout_s=120,
                   message=f"the failing search\n{celery_worker.log_tail()}")
    assert job.status == JobStatus.FAILED
    assert job.error.startswith("memory_limit_bytes: ") and "5.5 MiB" in job.error, job.error
    assert Plan.objects.filter(job=job).count() == 0


def test_a_job_cancelled_while_queued_is_never_run(celery_worker, people, wait_for):
    from django.db import transaction

    spec = load_model_preset("tiny-hybrid")
    record = spec_create(team=people.team, owner=people.owner, spec=spec)
    request = job_request_check(spec=spec, num_devices=2, num_microbatches=8, cluster_preset="cpu-host",
                                schedule="adaptis", time_budget_s=5)
    with transaction.atomic():  # the task is sent when this commits, with the job already cancelled
        job = job_create(spec_record=record, user=people.member, request=request)
        job_cancel(job=job, user=people.member)
    skipped = f"planning job {job.pk} is not queued; skipping"
    wait_for(lambda: skipped in celery_worker.log_tail(20_000), timeout_s=60,
             message=f"the worker to skip the job\n{celery_worker.log_tail()}")
    job.refresh_from_db()
    assert (job.status, job.started_at, job.progress) == (JobStatus.CANCELLED, None, 0.0)
    assert Plan.objects.filter(job=job).count() == 0


def test_a_running_search_is_cancelled_over_the_api_and_keeps_its_best_plan_so_far(celery_worker, people, wait_for):
    # gemma-2-9b on 16 devices x 64 micro-batches: about 7 s of search on one core left alone, 120 s allowed.
    job_id = _search_job_over_api(people, "gemma-2-9b", cluster_preset="h100-sxm-2x8", num_devices=16,
                                  num_microbatches=64, time_budget_s=120)

    def searched_some():  # progress only rises: once past the search's start it stays past, unlike a message
        job = PlanningJob.objects.get(pk=job_id)
        return job.progress > 0.2 and job  # the search's share: 0.2-0.85

    searching = wait_for(searched_some, timeout_s=60, interval_s=0.05,
                         message=f"the search to report progress\n{celery_worker.log_tail()}")
    assert searching.progress < 0.85, "the search reports into its share of the job's progress"
    response = api_as(people.member).post(reverse("api:job-cancel", args=[job_id]))
    assert response.status_code == 200 and response.json()["cancel_requested"] is True
    job = wait_for(lambda: _finished(PlanningJob, job_id), timeout_s=60, interval_s=0.05,
                   message=f"the search to stop\n{celery_worker.log_tail()}")
    assert job.status == JobStatus.CANCELLED, job.error
    # Noticed within the search, not after it: the search itself says it stopped for the cancel, well inside its
    # time budget.
    assert job.result["cancelled"] and job.result["stats"]["stopped"] == "cancelled"
    assert 0 < job.result["stats"]["seconds"] < job.result["stats"]["time_budget_s"]
    assert Plan.objects.filter(job=job, strategy="adaptis").exists(), "the best plan so far is kept"
    response = api_as(people.member).post(reverse("api:job-cancel", args=[job_id]))
    assert response.status_code == 409 and response.json()["errors"][0]["field"] == "status"


def test_a_cpu_run_streams_events_into_redis_and_the_database_while_it_runs(celery_worker, people, planned,
                                                                            wait_for):
    response = api_as(people.member).post(reverse("api:runs"), {"plan": planned.plan.pk, "steps": 8}, format="json")
    assert response.status_code == 201
    run_id = response.json()["id"]
    stream = redis.Redis.from_url(settings.REDIS_URL)
    key = run_stream_key(run_id)

    def first_events_stored():
        """Waited for as stored events, which stay (a "running" status passes by). They are counted before the
        run is read: a run not over then was not over when they were counted."""
        stored = RunEvent.objects.filter(run_id=run_id).count()
        return stored and (stored, Run.objects.get(pk=run_id).is_finished, stream.xlen(key))

    stored_mid_run, finished_then, streamed = wait_for(first_events_stored, timeout_s=120, interval_s=0.05,
                                                       message=f"events stored\n{celery_worker.log_tail()}")
    assert not finished_then and streamed > 0, "events were in Redis and the database before the run ended"
    run = wait_for(lambda: _finished(Run, run_id), timeout_s=180,
                   message=f"the run to finish\n{celery_worker.log_tail()}")
    assert run.status == JobStatus.SUCCEEDED, run.error
    actions_per_step = sum(len(device_actions) for device_actions in planned.plan.plan_doc["actions"])
    total = RunEvent.objects.filter(run=run).count()
    assert total == actions_per_step * 8
    assert stored_mid_run < total, "events were in the database before the run ended"
    seqs = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, total + 1))
    observed = {(event.device, event.action) for event in RunEvent.objects.filter(run=run, step=0)}
    predicted = {(entry["device"], entry["action"]) for entry in plan_prediction(planned.plan)["timeline"]}
    assert observed == predicted, "every planned action ran on its planned device"
    assert run.loss is not None and len(run.summary["per_device"]) == 2
    assert run.executed_spec == planned.spec.doc
    assert stream.ttl(key) > 0
    events = api_as(people.owner).get(reverse("api:run-events", args=[run_id]), {"after": total - 3}).json()
    assert events["finished"] and [event["seq"] for event in events["events"]] == [total - 2, total - 1, total]
    stream.close()


def test_a_run_the_executor_refuses_ends_failed_with_its_reason(celery_worker, people, planned, wait_for):
    plan_doc = dict(planned.plan.plan_doc)
    # Device 0 starts with the backward of a micro-batch it has not run forward yet: a deadlock, which the
    # executor's lowering proves before any rank starts.
    plan_doc["actions"] = [["0B0", "0F0", "0F1", "0B1", "0F2", "0B2", "0F3", "0B3"], plan_doc["actions"][1]]
    Plan.objects.filter(pk=planned.plan.pk).update(plan_doc=plan_doc)
    response = api_as(people.member).post(reverse("api:runs"), {"plan": planned.plan.pk}, format="json")
    run = wait_for(lambda: _finished(Run, response.json()["id"]), timeout_s=60,
                   message=f"the refused run\n{celery_worker.log_tail()}")
    assert run.status == JobStatus.FAILED
    assert "0B0" in run.error, run.error
    assert RunEvent.objects.filter(run=run).count() == 0
