"""Profiles measured where the runs happen: who may ask for one and what the API refuses (a real worker
measuring one for a cpu-host job: test_worker_profiles.py)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.models import MeasuredProfile
from adaptis_web.studio.services.specs import spec_create
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
