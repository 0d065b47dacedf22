"""What one API request costs, as the load benchmark's clients send them (an API token, the list and detail
endpoints): a bounded number of queries, a plan's prediction simulated once per process, event pages as plain rows.
Their latency under load is ``benchmarks/web_latency.py``'s (README, "Web latency")."""

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from adaptis_web.studio.accounts.tokens import token_create
from adaptis_web.studio.api.auth import LAST_USED_RESOLUTION
from adaptis_web.studio.api.renderers import JSONRenderer, RawJSON
from adaptis_web.studio.common.bounded_cache import BoundedCache
from adaptis_web.studio.models import ApiToken, Plan, RunEvent
from adaptis_web.studio.planning import predictions
from adaptis_web.studio.planning import plan_json as plan_json_module
from adaptis_web.studio.planning.predictions import plan_prediction
from adaptis_web.studio.runs.serializers import RunEventOutput
from planner import service as planner_service


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
    # + the run's status and its page of collectives (a hybrid run's; none here, the query still asked)
    "events": (lambda world: reverse("api:run-events", args=[world.finished_run.pk]), 4),
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


class TestPredictionCache:
    def test_a_plan_is_simulated_once_then_served_from_the_process(self, people, planned, monkeypatch):
        predictions.PREDICTIONS.clear()
        plan_json_module.PLAN_JSON.clear()
        calls = []
        real = planner_service.stored_plan_simulation
        monkeypatch.setattr(planner_service, "stored_plan_simulation", lambda *args: calls.append(args) or real(*args))
        client = APIClient()
        client.force_authenticate(people.member)
        first = client.get(reverse("api:plan", args=[planned.plan.pk])).json()
        second = client.get(reverse("api:plan", args=[planned.plan.pk])).json()
        assert len(calls) == 1 and first == second and first["simulation"]["timeline"]
        assert first["simulation"] == real(*calls[0])

    def test_another_plan_row_has_a_prediction_of_its_own(self, people, planned):
        original = plan_prediction(planned.plan)
        copy = Plan.objects.get(pk=planned.plan.pk)
        copy.pk = None
        copy.save()
        # a plan's id and creation time name its prediction; another row never shares it, even with equal documents
        assert plan_prediction(copy) is not original and plan_prediction(copy) == original
        assert plan_prediction(Plan.objects.get(pk=planned.plan.pk)) is original

    def test_who_may_see_the_plan_is_checked_on_every_request(self, people, planned):
        plan_prediction(planned.plan)
        outsider = APIClient()
        outsider.force_authenticate(people.outsider)
        assert outsider.get(reverse("api:plan", args=[planned.plan.pk])).status_code == 404

    def test_the_least_recently_used_leave_first_within_the_bound(self):
        cache = BoundedCache(max_size=10, size_of=len)
        cache.put("a", "x" * 3)  # size 3 + 1
        cache.put("b", "x" * 3)
        assert cache.get("a") is not None  # a is now the most recently used
        cache.put("c", "x" * 3)  # 12 in all: b, the least recently used, leaves
        assert cache.get("b") is None and cache.get("a") and cache.get("c")
        cache.put("huge", "x" * 10)  # larger than the whole bound: not kept at all
        assert cache.get("huge") is None and cache.get("a") and cache.get("c")


class TestPlanJSON:
    def test_the_plan_endpoint_sends_what_drf_would_encode_from_the_documents(self, people, planned):
        plan_json_module.PLAN_JSON.clear()
        client = APIClient()
        client.force_authenticate(people.member)
        for _ in range(2):  # encoded, then from the process
            body = client.get(reverse("api:plan", args=[planned.plan.pk])).json()
            plan = Plan.objects.get(pk=planned.plan.pk)
            assert body["plan"] == plan.plan_doc and body["profile"] == plan.profile_doc
            assert body["simulation"] == plan_prediction(plan) and body["id"] == plan.pk

    def test_a_plan_encoded_once_is_sent_with_one_query_and_no_documents_read(self, people, planned,
                                                                              django_assert_num_queries):
        client = APIClient()
        client.force_authenticate(people.member)
        client.get(reverse("api:plan", args=[planned.plan.pk]))
        with django_assert_num_queries(1):
            assert client.get(reverse("api:plan", args=[planned.plan.pk])).status_code == 200

    def test_the_renderer_puts_raw_json_in_place_and_leaves_lookalike_strings_alone(self):
        data = {"doc": RawJSON('{"a":[1,2.5,"\u2028"]}'), "text": "raw-json-0", "list": [RawJSON("null"), 3]}
        assert json.loads(JSONRenderer().render(data)) == {"doc": {"a": [1, 2.5, "\u2028"]}, "text": "raw-json-0",
                                                           "list": [None, 3]}

    def test_dumps_writes_what_the_renderer_writes(self):
        value = {"name": "ümlaut \u2028", "x": [1.5, None, True]}
        assert plan_json_module.dumps(value).encode() == JSONRenderer().render(value)
        with pytest.raises(ValueError):
            plan_json_module.dumps(float("nan"))  # as DRF's strict JSON refuses it


def test_the_detail_endpoints_leave_out_documents_they_do_not_show(people, planned, finished_run):
    from adaptis_web.studio.planning.selectors import job_detail_for_user, plan_detail_for_user
    from adaptis_web.studio.runs.selectors import run_detail_for_user

    run = run_detail_for_user(user=people.member, run_id=finished_run.pk)
    assert "plan" not in run._state.fields_cache and run.event_count == finished_run.events.count()
    plan = plan_detail_for_user(user=people.member, plan_id=planned.plan.pk)
    assert {"plan_doc", "profile_doc", "simulation"} <= plan.get_deferred_fields()  # planning.plan_json's
    assert {"doc"} <= plan.job.spec.get_deferred_fields() and {"cluster_doc"} <= plan.job.get_deferred_fields()
    job = job_detail_for_user(user=people.member, job_id=planned.job.pk)
    assert {"doc"} <= job.spec.get_deferred_fields() and {"profile_doc"} <= job.get_deferred_fields()


def test_an_events_page_has_the_serializers_shape(people, finished_run):
    client = APIClient()
    client.force_authenticate(people.member)
    body = client.get(reverse("api:run-events", args=[finished_run.pk]), {"after": 2}).json()
    events = RunEvent.objects.filter(run=finished_run, seq__gt=2).order_by("seq")
    assert body["events"] == RunEventOutput(events, many=True).data and len(body["events"]) == events.count()
    assert body["last_seq"] == events.last().seq and body["status"] == "succeeded" and body["finished"] is True


def test_the_listed_rows_are_what_drf_itself_makes_of_them(people, planned, finished_run):
    from rest_framework import serializers

    from adaptis_web.studio.catalog.serializers import SpecOutput
    from adaptis_web.studio.history.selectors import history_for_user
    from adaptis_web.studio.planning.selectors import job_detail_for_user
    from adaptis_web.studio.planning.serializers import JobDetailOutput, JobOutput, JobPlanOutput, PlanListOutput
    from adaptis_web.studio.runs.serializers import RunOutput

    member = people.member
    rows = {SpecOutput: history_for_user(user=member, kind="specs"),
            JobOutput: history_for_user(user=member, kind="jobs"),
            JobDetailOutput: [job_detail_for_user(user=member, job_id=planned.job.pk)],
            JobPlanOutput: planned.job.plans.all(),
            PlanListOutput: history_for_user(user=member, kind="plans"),
            RunOutput: history_for_user(user=member, kind="runs")}
    for output, queryset in rows.items():
        for row in queryset:
            plain = output(row).data
            drf = serializers.ModelSerializer.to_representation(output(row), row)
            assert plain == drf and len(plain) == len(output().fields), output.__name__


@pytest.mark.parametrize("kind", ["specs", "clusters", "jobs", "plans", "runs"])
def test_a_list_without_filters_has_the_rows_the_filter_set_gives(kind, people, planned, finished_run):
    from adaptis_web.studio.history.selectors import history_for_user
    from adaptis_web.studio.history.filters import HISTORY_FILTERS
    from adaptis_web.studio.history.curation import object_archive

    archived = {"specs": None, "clusters": None, "jobs": None, "plans": planned.plan, "runs": finished_run}[kind]
    if archived is not None:
        object_archive(obj=archived, user=people.owner)
    client = APIClient()
    client.force_authenticate(people.member)
    listed = [row["id"] for row in client.get(reverse(f"api:{kind}")).json()["results"]]
    rows = history_for_user(user=people.member, kind=kind)
    expected = HISTORY_FILTERS[kind]({}, queryset=rows).qs.order_by("-created_at", "-id")
    assert listed == [row.pk for row in expected]
    assert archived is None or archived.pk not in listed
    unknown = client.get(reverse(f"api:{kind}"), {"status": "no-such-status"})  # a filter named: still checked
    assert kind in ("specs", "clusters") or unknown.status_code == 400


def test_output_fields_are_built_once_per_class_and_each_instance_gets_its_own(planned):
    from rest_framework import serializers

    from adaptis_web.studio.catalog.serializers import SpecDetailOutput, SpecOutput
    from adaptis_web.studio.planning.serializers import JobDetailOutput, JobOutput, PlanListOutput
    from adaptis_web.studio.runs.serializers import RunOutput

    for output in (SpecOutput, SpecDetailOutput, JobOutput, JobDetailOutput, PlanListOutput, RunOutput):
        first, second = output(), output()
        fresh = serializers.ModelSerializer.get_fields(output())  # DRF building them anew
        assert list(first.fields) == list(fresh), output.__name__
        for name, field in first.fields.items():
            assert type(field) is type(fresh[name]) and field.source == (fresh[name].source or name), (output, name)
            assert field is not second.fields[name] and field.parent is first, (output, name)


def test_the_cache_backend_keeps_one_redis_client_and_serves_every_thread():
    import threading

    from django.core.cache import cache

    client = cache._cache.get_client("a-key")
    assert cache._cache.get_client("another-key") is client  # Django's own backend builds one per call
    results = []

    def use(number: int) -> None:
        cache.set(f"shared-client-{number}", number, 30)
        results.append(cache.get(f"shared-client-{number}"))

    threads = [threading.Thread(target=use, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == list(range(8))
