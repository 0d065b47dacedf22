"""Profiles measured where the runs happen: the API's checks, a real worker measuring on the runs queue, and
planning on cpu-host with the measured profile by default (measured once, reused)."""

from __future__ import annotations

import json

import pytest
from celery import current_app
from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.models import JobStatus, MeasuredProfile, Plan, PlanningJob
from adaptis_web.studio.services.specs import spec_create
from planner.profile import load_profile
from planner.spec.presets import load_model_preset


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _profiles_url(spec_id: int) -> str:
    return reverse("api:spec-profiles", args=[spec_id])


@pytest.mark.django_db
def test_who_may_measure_a_profile_and_what_is_refused(crew):
    spec_id = crew.planned.spec.pk
    assert _api(crew.viewer).post(_profiles_url(spec_id), {}, format="json").status_code == 403
    assert _api(crew.people.outsider).post(_profiles_url(spec_id), {}, format="json").status_code == 404
    for body, field in (({"num_ranks": 0}, "num_ranks"), ({"num_ranks": 99}, "num_ranks")):
        response = _api(crew.people.member).post(_profiles_url(spec_id), body, format="json")
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == field, response.json()
    big = spec_create(team=crew.people.team, owner=crew.people.owner, spec=load_model_preset("llama-3-8b"))
    response = _api(crew.people.member).post(_profiles_url(big.pk), {}, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "spec"
    response = _api(crew.people.member).post(_profiles_url(big.pk), {"plan": crew.planned.plan.pk}, format="json")
    assert response.status_code == 400 and response.json()["errors"][0] == {
        "field": "plan", "reason": f"plan {crew.planned.plan.pk} is a plan of another spec"}
    assert MeasuredProfile.objects.count() == 0, "nothing refused is stored"
    response = _api(crew.people.member).post(_profiles_url(spec_id), {"num_ranks": 2}, format="json")
    assert response.status_code == 201 and response.json()["status"] == "queued"
    assert _api(crew.viewer).get(reverse("api:profile", args=[response.json()["id"]])).status_code == 200
    assert _api(crew.people.outsider).get(reverse("api:profile", args=[response.json()["id"]])).status_code == 404


def route_of_runs() -> str:
    return current_app.amqp.router.route({}, "studio.run_execute")["queue"].name


def _finished(model, pk):
    row = model.objects.get(pk=pk)
    return row if row.is_finished else None


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_cpu_host_job_waits_for_the_profile_measured_on_the_runs_worker_and_plans_on_it(
        celery_worker, people, spec_text, wait_for, client):
    spec_id = _api(people.member).post(reverse("api:specs"), {"doc": json.loads(spec_text("tiny-llama"))},
                                       format="json").json()["id"]
    job_body = {"spec": spec_id, "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": 4,
                "schedule": "1f1b"}
    response = _api(people.member).post(reverse("api:jobs"), job_body, format="json")
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
    plan = Plan.objects.get(job=job)
    assert plan.profile_doc == measured.profile_doc, "the plan was built on the measured profile"
    # Measured once per spec, ranks and backward split, then reused.
    again = _api(people.member).post(reverse("api:jobs"), job_body, format="json").json()
    assert again["measured_profile"] == profile_id and MeasuredProfile.objects.count() == 1
    client.force_login(people.member)
    page = " ".join(client.get(reverse("studio:job", args=[job_id])).content.decode().split())
    assert f"measured on the runs' host <span class=\"mono\">{measured.host}</span>" in page
    assert f"(profile #{profile_id}, 2 ranks at once, one full backward" in page
