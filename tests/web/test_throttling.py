"""The endpoints that create expensive work are throttled per user: the request past the rate gets a 429 in the
error shape with Retry-After, stores nothing, and neither another user nor reading is held back."""

import json

import pytest
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from adaptis_web.studio.models import ModelSpecRecord, PlanningJob


@pytest.fixture
def rates(monkeypatch):
    """DRF's throttles read their rates once, at import, into a class attribute."""
    def set_rates(**overrides):
        monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {**SimpleRateThrottle.THROTTLE_RATES, **overrides})

    return set_rates


def _client(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_spec_uploads_past_the_rate_are_refused_with_429_and_store_nothing(people, spec_text, rates):
    rates(specs="2/hour")
    owner = _client(people.owner)
    statuses = []
    for index in range(3):
        doc = json.loads(spec_text("tiny-llama"))
        doc["name"] = f"tiny-{index}"
        statuses.append(owner.post("/api/specs/", {"team": people.team.pk, "doc": doc}, format="json"))
    assert [response.status_code for response in statuses] == [201, 201, 429], [r.content for r in statuses]
    refused = statuses[-1]
    body = refused.json()
    assert int(refused["Retry-After"]) == body["retry_after_s"] > 0
    assert body["errors"][0]["reason"].startswith("too many requests")
    assert ModelSpecRecord.objects.filter(name__startswith="tiny-").count() == 2
    assert owner.get("/api/specs/").status_code == 200, "reading is never throttled"
    doc = json.loads(spec_text("tiny-llama"))
    doc["name"] = "tiny-member"
    assert _client(people.member).post("/api/specs/", {"team": people.team.pk, "doc": doc},
                                       format="json").status_code == 201, "another user has a count of their own"


def test_planning_jobs_past_the_rate_are_refused_with_429(people, planned, rates):
    rates(jobs="1/hour")
    member = _client(people.member)
    body = {"spec": planned.spec.pk, "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": 4,
            "schedule": "1f1b"}
    before = PlanningJob.objects.count()
    assert member.post("/api/jobs/", body, format="json").status_code == 201
    refused = member.post("/api/jobs/", body, format="json")
    assert refused.status_code == 429 and "Retry-After" in refused
    assert PlanningJob.objects.count() == before + 1


def test_a_body_that_is_not_json_is_a_400_naming_the_body(people):
    response = _client(people.owner).post("/api/jobs/", data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "body"
