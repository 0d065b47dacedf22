"""What one API request costs, as the load benchmark's clients send them (an API token, the list and detail
endpoints): a bounded number of queries, a plan's prediction simulated once per process, event pages as plain rows.
Their latency under load is ``benchmarks/web_latency.py``'s (README, "Web latency")."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from adaptis_web.studio.api.auth import LAST_USED_RESOLUTION
from adaptis_web.studio.models import ApiToken
from adaptis_web.studio.services.accounts import token_create


def with_token(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def token_client(people):
    """bob's API client, its token's last use already stamped (as it is for all but one request a minute)."""
    _, key = token_create(user=people.member, name="load", expires_in_days=7)
    client = with_token(key)
    assert client.get(reverse("api:presets")).status_code == 200
    return client


ENDPOINTS = {  # name: (URL, queries at most: the token, then the endpoint's own)
    "specs list": (lambda world: reverse("api:specs"), 2),
    "jobs list": (lambda world: reverse("api:jobs"), 3),  # + one prefetch of the jobs' plans
    "job detail": (lambda world: reverse("api:job", args=[world.planned.job.pk]), 3),  # + the same prefetch
    "plans list": (lambda world: reverse("api:plans"), 2),
    "plan detail": (lambda world: reverse("api:plan", args=[world.planned.plan.pk]), 2),
    "runs list": (lambda world: reverse("api:runs"), 2),
    "run detail": (lambda world: reverse("api:run", args=[world.finished_run.pk]), 2),
    "events": (lambda world: reverse("api:run-events", args=[world.finished_run.pk]), 3),  # + the run's status
}


class World:
    def __init__(self, planned, finished_run):
        self.planned, self.finished_run = planned, finished_run


@pytest.mark.parametrize("name", ENDPOINTS)
def test_each_endpoint_costs_a_bounded_number_of_queries_with_a_token(name, token_client, planned, finished_run,
                                                                      django_assert_max_num_queries):
    url, bound = ENDPOINTS[name]
    path = url(World(planned, finished_run))
    token_client.get(path)  # a plan's first prediction is simulated; the bound is for every request after it
    with django_assert_max_num_queries(bound):
        response = token_client.get(path)
    assert response.status_code == 200


def test_the_token_row_is_written_at_most_once_a_minute_and_expired_tokens_swept_then(people):
    _, key = token_create(user=people.member, name="load", expires_in_days=7)
    old, _ = token_create(user=people.member, name="old", expires_in_days=1)
    ApiToken.objects.filter(pk=old.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    client = with_token(key)
    assert client.get(reverse("api:presets")).status_code == 200
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["load"], "swept with the first stamp"
    stamped = ApiToken.objects.get(name="load").last_used_at
    old, _ = token_create(user=people.member, name="old", expires_in_days=1)
    ApiToken.objects.filter(pk=old.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    assert client.get(reverse("api:presets")).status_code == 200
    assert ApiToken.objects.get(name="load").last_used_at == stamped, "not written again within the minute"
    assert ApiToken.objects.filter(name="old").exists(), "swept with the next stamp, not on every request"
    ApiToken.objects.filter(name="load").update(last_used_at=stamped - LAST_USED_RESOLUTION - timedelta(seconds=1))
    assert client.get(reverse("api:presets")).status_code == 200
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["load"]
