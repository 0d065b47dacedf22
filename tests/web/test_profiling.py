"""Profiles measured where the runs happen: who may ask for one, what the API refuses, and a cpu-host job that
planned on the analytic profile saying so and why on its page and in the API (a real worker measuring one for a
cpu-host job: test_worker_profiles.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import JobStatus, MeasuredProfile, Plan
from adaptis_web.studio.planning.jobs import job_run
from planner.cluster import load_cluster_preset
from planner.cost import analytic_profile
from planner.spec.presets import load_model_preset
from tests.web.conftest import api_as


def _profiles_url(spec_id: int) -> str:
    return reverse("api:spec-profiles", args=[spec_id])


@pytest.mark.django_db
def test_who_may_measure_a_profile_and_what_is_refused(crew):
    spec_id = crew.planned.spec.pk
    assert api_as(crew.viewer).post(_profiles_url(spec_id), {}, format="json").status_code == 403
    assert api_as(crew.people.outsider).post(_profiles_url(spec_id), {}, format="json").status_code == 404
    for body, field in (({"num_ranks": 0}, "num_ranks"), ({"num_ranks": 99}, "num_ranks")):
        response = api_as(crew.people.member).post(_profiles_url(spec_id), body, format="json")
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == field, response.json()
    big = spec_create(team=crew.people.team, owner=crew.people.owner, spec=load_model_preset("llama-3-8b"))
    response = api_as(crew.people.member).post(_profiles_url(big.pk), {}, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "spec"
    response = api_as(crew.people.member).post(_profiles_url(big.pk), {"plan": crew.planned.plan.pk}, format="json")
    assert response.status_code == 400 and response.json()["errors"][0] == {
        "field": "plan", "reason": f"plan {crew.planned.plan.pk} is a plan of another spec"}
    assert MeasuredProfile.objects.count() == 0, "nothing refused is stored"
    response = api_as(crew.people.member).post(_profiles_url(spec_id), {"num_ranks": 2}, format="json")
    assert response.status_code == 201 and response.json()["status"] == "queued"
    assert api_as(crew.viewer).get(reverse("api:profile", args=[response.json()["id"]])).status_code == 200
    assert api_as(crew.people.outsider).get(reverse("api:profile", args=[response.json()["id"]])).status_code == 404


def _cpu_host_job(user, spec_id: int) -> dict:
    response = api_as(user).post(reverse("api:jobs"), {"spec": spec_id, "cluster_preset": "cpu-host", "num_devices": 2,
                                                     "num_microbatches": 4, "schedule": "1f1b"}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def _page(client, user, job_id: int) -> str:
    client.force_login(user)
    return " ".join(client.get(reverse("studio:job", args=[job_id])).content.decode().split())


@pytest.mark.django_db
def test_a_job_whose_profile_failed_to_measure_says_it_planned_on_the_analytic_profile_and_why(people, client):
    spec = spec_create(team=people.team, owner=people.owner, spec=load_model_preset("tiny-llama"))
    created = _cpu_host_job(people.member, spec.pk)
    assert created["analytic_profile_reason"] == "", "nothing to say while its profile is being measured"
    error = "process 1 of 2 (_profile_in_process) was killed by SIGKILL before its result"
    MeasuredProfile.objects.filter(pk=created["measured_profile"]).update(status=JobStatus.FAILED, error=error,
                                                                           finished_at=timezone.now())
    job_run(job_id=created["id"])
    body = api_as(people.member).get(reverse("api:job", args=[created["id"]])).json()
    assert body["status"] == "succeeded"
    reason = f"measuring profile {created['measured_profile']} on the runs' host failed: {error}"
    assert body["analytic_profile_reason"] == reason
    assert Plan.objects.get(job_id=created["id"]).profile_doc["source"] == "analytic", "what the reason says it did"
    assert [job["analytic_profile_reason"] for job in api_as(people.member).get(reverse("api:jobs")).json()["results"]
            if job["id"] == created["id"]] == [reason], "the job list says it too"
    page = _page(client, people.member, created["id"])
    assert '<div class="alert note" id="analytic-profile-reason"><strong>Planned on the analytic profile</strong>' in page
    assert f"Why: {escape(reason)}</div>" in page


@pytest.mark.django_db
def test_a_job_of_a_model_the_runs_host_does_not_measure_says_so_from_the_start(people, client):
    big = spec_create(team=people.team, owner=people.owner, spec=load_model_preset("llama-3-8b"))
    created = _cpu_host_job(people.member, big.pk)
    assert created["measured_profile"] is None
    assert created["analytic_profile_reason"].startswith(
        "the runs' host does not measure this model as it is: 'llama-3-8b' has 8,030M parameters, more than a CPU run "
        "takes"), created["analytic_profile_reason"]
    page = _page(client, people.member, created["id"])
    assert "Profile:</strong> analytic (CPU), not one measured on the runs' host (below)." in page
    assert f"Why: {escape(created['analytic_profile_reason'])}</div>" in page


@pytest.mark.django_db
def test_a_job_planned_on_its_measured_profile_gives_no_reason(people, client):
    spec = spec_create(team=people.team, owner=people.owner, spec=load_model_preset("tiny-llama"))
    created = _cpu_host_job(people.member, spec.pk)
    MeasuredProfile.objects.filter(pk=created["measured_profile"]).update(
        status=JobStatus.SUCCEEDED, finished_at=timezone.now(), host="runs-host (2 cores)",
        profile_doc=replace(analytic_profile(load_model_preset("tiny-llama"), load_cluster_preset("cpu-host")),
                            source="measured").to_dict())
    job_run(job_id=created["id"])
    body = api_as(people.member).get(reverse("api:job", args=[created["id"]])).json()
    assert (body["status"], body["analytic_profile_reason"]) == ("succeeded", "")
    assert "analytic-profile-reason" not in _page(client, people.member, created["id"])


def test_the_schema_documents_the_reason(client):
    schema = client.get(reverse("api-schema"), HTTP_ACCEPT="application/json").json()
    for component in ("JobOutput", "JobDetailOutput"):
        field = schema["components"]["schemas"][component]["properties"]["analytic_profile_reason"]
        assert field["type"] == "string" and "planned on the analytic profile" in field["description"]
