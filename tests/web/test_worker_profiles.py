"""A real worker measures a profile on the runs queue, and a job on cpu-host waits for it and plans on it (measured
once per spec, ranks and backward split, then reused). Named to run after the tests that run the executor in
this process: the session's worker, once started, would take their runs."""

from __future__ import annotations

import json

import pytest
from celery import current_app
from django.urls import reverse

from adaptis_web.studio.models import JobStatus, MeasuredProfile, Plan, PlanningJob, Run
from planner.cluster import load_cluster_preset
from planner.plan import load_plan
from planner.profile import load_profile
from planner.simulator import simulate
from planner.spec.presets import load_model_preset
from tests.web.conftest import api_as


def route_of_runs() -> str:
    return current_app.amqp.router.route({}, "studio.run_execute")["queue"].name


def _finished(model, pk):
    row = model.objects.get(pk=pk)
    return row if row.is_finished else None


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_cpu_host_job_waits_for_the_profile_measured_on_the_runs_worker_and_plans_on_it(
        celery_worker, people, spec_text, wait_for, client):
    spec_id = api_as(people.member).post(reverse("api:specs"), {"doc": json.loads(spec_text("tiny-llama"))},
                                       format="json").json()["id"]
    job_body = {"spec": spec_id, "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": 4,
                "schedule": "1f1b"}
    response = api_as(people.member).post(reverse("api:jobs"), job_body, format="json")
    assert response.status_code == 201
    job_id, profile_id = response.json()["id"], response.json()["measured_profile"]
    assert profile_id is not None and response.json()["progress_message"].startswith(f"Waiting for profile {profile_id}")
    measured = wait_for(lambda: _finished(MeasuredProfile, profile_id), timeout_s=240,
                        message=f"the profile\n{celery_worker.log_tail()}")
    assert measured.status == JobStatus.SUCCEEDED, measured.error
    route = current_app.amqp.router.route({}, "studio.profile_measure")["queue"].name
    assert route == route_of_runs() and route.endswith("-runs"), "measured where the runs run: on their queue"
    profile = load_profile(measured.profile_doc)
    assert profile.source == "measured" and profile.num_layers == load_model_preset("tiny-llama").num_layers
    assert (measured.num_ranks, measured.split_backward) == (2, False) and "cores)" in measured.host
    job = wait_for(lambda: _finished(PlanningJob, job_id), timeout_s=60, message=f"the job\n{celery_worker.log_tail()}")
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.analytic_profile_reason == "", "it planned on the measured profile: no reason to give"
    plan = Plan.objects.get(job=job)
    assert plan.profile_doc == measured.profile_doc, "the plan was built on the measured profile"
    # Measured once per spec, ranks and backward split, then reused.
    again = api_as(people.member).post(reverse("api:jobs"), job_body, format="json").json()
    assert again["measured_profile"] == profile_id
    assert MeasuredProfile.objects.filter(plan__isnull=True).count() == 1
    # The job's plan then has its stages timed on the runs' host, and its local-run prediction is made on that.
    staged = wait_for(lambda: _finished(MeasuredProfile, MeasuredProfile.objects.get(plan=plan).pk), timeout_s=240,
                      message=f"the plan's stage timing\n{celery_worker.log_tail()}")
    assert staged.status == JobStatus.SUCCEEDED and not staged.split_backward, staged.error
    expected = simulate(load_plan(plan.plan_doc), load_profile(staged.profile_doc), load_cluster_preset("cpu-host"))
    run = Run.objects.create(plan=plan, created_by=people.member, world_size=2)  # queued, never sent
    client.force_login(people.member)
    run_page = " ".join(client.get(reverse("studio:run", args=[run.pk])).content.decode().split())
    assert f"Predicted on profile #{staged.pk}: this plan's stages timed as its ranks run them" in run_page
    chart = run_page.split('<script id="timeline-data" type="application/json">')[1].split("</script>")[0]
    assert json.loads(chart)["iteration_ms"] == \
        pytest.approx(expected.iteration_ms)
    page = " ".join(client.get(reverse("studio:job", args=[job_id])).content.decode().split())
    assert f"measured on the runs' host <span class=\"mono\">{measured.host}</span>" in page
    assert f"(profile #{profile_id}, 2 ranks at once, one full backward" in page


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_profile_with_a_plan_is_scaled_to_the_stages_timed_as_its_ranks_run_them(celery_worker, people, planned,
                                                                                  wait_for):
    response = api_as(people.member).post(reverse("api:spec-profiles", args=[planned.spec.pk]),
                                        {"plan": planned.plan.pk, "num_ranks": 7}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["plan"], body["num_ranks"]) == (planned.plan.pk, 2), "a plan's profile has its devices as ranks"
    measured = wait_for(lambda: _finished(MeasuredProfile, body["id"]), timeout_s=240,
                        message=f"the stage-timed profile\n{celery_worker.log_tail()}")
    assert measured.status == JobStatus.SUCCEEDED, measured.error
    profile = load_profile(measured.profile_doc)
    assert profile.source == "calibrated" and profile.num_layers == 6  # scaled
    assert all(layer.forward > 0 for layer in profile.layers)
