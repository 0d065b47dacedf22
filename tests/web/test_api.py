"""REST API: access by team (owner, member, outsider, anonymous), the 400 error shape, nothing half-stored."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.accounts.tokens import token_create
from adaptis_web.studio.models import JobStatus, ModelSpecRecord, PlanningJob, Run
from adaptis_web.studio.planning.predictions import plan_prediction
from planner.cluster import load_cluster_preset, preset_names
from planner.spec.presets import load_model_preset, model_preset_names


def api_as(user) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def _detail_urls(planned, finished_run):
    return [reverse("api:spec", args=[planned.spec.pk]), reverse("api:job", args=[planned.job.pk]),
            reverse("api:plan", args=[planned.plan.pk]), reverse("api:run", args=[finished_run.pk]),
            reverse("api:run-events", args=[finished_run.pk])]


class TestAccess:
    @pytest.mark.parametrize("who", ["owner", "member"])
    def test_team_members_read_every_object(self, people, planned, finished_run, who):
        client = api_as(getattr(people, who))
        for url in _detail_urls(planned, finished_run):
            assert client.get(url).status_code == 200, url

    def test_an_outsider_gets_404_for_every_object_of_another_team(self, people, planned, finished_run):
        client = api_as(people.outsider)
        for url in _detail_urls(planned, finished_run):
            response = client.get(url)
            assert response.status_code == 404, url
            assert set(response.json()) == {"detail"}

    def test_lists_hold_only_the_users_teams_objects(self, people, planned, finished_run):
        for name in ("specs", "jobs", "runs"):
            assert len(api_as(people.member).get(reverse(f"api:{name}")).json()["results"]) == 1, name
            assert api_as(people.outsider).get(reverse(f"api:{name}")).json()["results"] == [], name
        teams = api_as(people.member).get(reverse("api:teams")).json()["results"]
        assert teams == [{"id": people.team.pk, "name": "pipeline-team", "role": "member"}]

    def test_anonymous_requests_are_refused(self, planned, finished_run):
        client = api_as(None)
        for url in [*_detail_urls(planned, finished_run), reverse("api:specs"), reverse("api:presets")]:
            assert client.get(url).status_code == 401, url

    def test_token_authentication_works(self, people, planned):
        _, key = token_create(user=people.member, name="ci", expires_in_days=1)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        assert client.get(reverse("api:job", args=[planned.job.pk])).status_code == 200
        client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
        assert client.get(reverse("api:job", args=[planned.job.pk])).status_code == 401


class TestSpecs:
    def test_upload_a_file(self, people, spec_text):
        response = api_as(people.member).post(reverse("api:specs"), {
            "file": SimpleUploadedFile("tiny.json", spec_text("tiny-hybrid").encode())}, format="multipart")
        assert response.status_code == 201
        body = response.json()
        assert (body["name"], body["team"], body["owner"]) == ("tiny-hybrid", people.team.pk, "bob")
        assert body["doc"] == load_model_preset("tiny-hybrid").to_dict()

    def test_create_from_an_inline_document_with_a_name(self, people):
        response = api_as(people.owner).post(reverse("api:specs"), {
            "doc": load_model_preset("tiny-llama").to_dict(), "name": "my llama", "team": people.team.pk},
            format="json")
        assert response.status_code == 201 and response.json()["name"] == "my llama"

    def test_a_bad_document_names_the_field_and_stores_nothing(self, people):
        doc = load_model_preset("tiny-llama").to_dict()
        doc["layers"][1]["mlp"]["intermediate_size"] = -1
        response = api_as(people.member).post(reverse("api:specs"), {"doc": doc}, format="json")
        assert response.status_code == 400
        assert response.json() == {"errors": [{"field": "doc.layers[1].mlp.intermediate_size",
                                               "reason": "must be >= 1, got -1"}]}
        assert ModelSpecRecord.objects.count() == 0

    def test_a_deepseek_config_keeps_its_node_limited_routing_and_a_bad_group_limit_is_a_400(self, people):
        from pathlib import Path

        fixture = Path(__file__).parents[1] / "planner" / "fixtures" / "hf" / "deepseek-v3.json"
        config = json.loads(fixture.read_text())
        response = api_as(people.member).post(reverse("api:specs"), {"doc": config}, format="json")
        assert response.status_code == 201
        moe = next(layer["mlp"] for layer in response.json()["doc"]["layers"]
                   if layer.get("mlp", {}).get("type") == "moe")
        assert (moe["router_groups"], moe["router_group_topk"]) == (8, 4)
        # the config names no model: the model is named after its model_type (a name in the request names it)
        assert response.json()["doc"]["name"] == "deepseek_v3"
        named = api_as(people.member).post(reverse("api:specs"), {"doc": config, "name": "v3 base"}, format="json")
        assert (named.json()["name"], named.json()["doc"]["name"]) == ("v3 base", "v3 base")
        response = api_as(people.member).post(reverse("api:specs"), {"doc": {**config, "topk_group": 9}}, format="json")
        assert response.status_code == 400
        assert response.json() == {"errors": [{"field": "doc.topk_group", "reason": "must be <= the 8 groups, got 9"}]}
        assert ModelSpecRecord.objects.count() == 2

    def test_a_misspelt_hf_key_is_a_warning_kept_with_the_spec(self, people):
        from pathlib import Path

        config = json.loads((Path(__file__).parents[1] / "planner" / "fixtures" / "hf" / "llama-3-8b.json").read_text())
        config["num_hiden_layers"] = config.pop("num_hidden_layers")
        response = api_as(people.member).post(reverse("api:specs"), {"doc": config}, format="json")
        assert response.status_code == 201
        warnings = response.json()["warnings"]
        assert [warning["field"] for warning in warnings] == ["doc.num_hiden_layers"]
        assert "did you mean 'num_hidden_layers'?" in warnings[0]["reason"]
        detail = api_as(people.member).get(reverse("api:spec", args=[response.json()["id"]])).json()
        assert detail["warnings"] == warnings
        correct = api_as(people.member).post(reverse("api:specs"), {"doc": load_model_preset("tiny-llama").to_dict()},
                                             format="json")
        assert correct.json()["warnings"] == []

    def test_neither_file_nor_doc_is_a_400(self, people):
        response = api_as(people.member).post(reverse("api:specs"), {}, format="json")
        assert response.status_code == 400
        assert response.json()["errors"][0]["field"] == "file"

    def test_another_teams_id_is_refused(self, people):
        response = api_as(people.member).post(reverse("api:specs"), {
            "doc": load_model_preset("tiny-llama").to_dict(), "team": people.outsider_team.pk}, format="json")
        assert response.status_code == 404  # as every object of a team you are not in
        assert response.json()["errors"] == [{"field": "team",
                                              "reason": f"no team with id {people.outsider_team.pk} among your teams"}]
        assert ModelSpecRecord.objects.count() == 0


class TestJobs:
    def test_create_queues_a_job_and_reports_progress(self, people, planned, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = api_as(people.member).post(reverse("api:jobs"), {
                "spec": planned.spec.pk, "cluster_preset": "h100-sxm-1x8", "num_devices": 2,
                "num_microbatches": 8}, format="json")
        assert response.status_code == 201
        body = response.json()
        assert (body["status"], body["progress"], body["schedule"], body["plans"]) == ("queued", 0.0, "1f1b", [])
        assert body["partition"] == "uniform"
        assert body["cluster"] == load_cluster_preset("h100-sxm-1x8").to_dict()
        assert len(callbacks) == 1

    def test_create_with_a_custom_cluster(self, people, planned, django_capture_on_commit_callbacks):
        cluster = load_cluster_preset("a100-40gb-pcie-1x8").to_dict()
        with django_capture_on_commit_callbacks(execute=False):
            response = api_as(people.member).post(reverse("api:jobs"), {
                "spec": planned.spec.pk, "cluster": cluster, "num_devices": 4, "num_microbatches": 8}, format="json")
        assert response.status_code == 201 and response.json()["cluster"] == cluster

    @pytest.mark.parametrize("changes, field, reason", [
        ({"num_devices": 99}, "num_devices", "must be between 1 and the cluster's 4 devices"),
        ({"num_devices": "two"}, "num_devices", "A valid integer is required."),
        ({"schedule": "dualpipe"}, "schedule", '"dualpipe" is not a valid choice; give one of adaptis, gpipe, 1f1b, '
                                               'interleaved-1f1b, zb-h1, zb-v.'),
        ({"cluster_preset": "nope"}, "cluster_preset", "unknown preset 'nope'"),
        ({"num_microbatches": None}, "num_microbatches", "This field may not be null."),
        ({"partition": "random"}, "partition", '"random" is not a valid choice; give one of uniform, '
                                               'param-balanced, time-balanced.'),
    ])
    def test_bad_input_is_a_400_naming_the_field(self, people, planned, changes, field, reason):
        data = {"spec": planned.spec.pk, "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": 4}
        data.update(changes)
        response = api_as(people.member).post(reverse("api:jobs"), data, format="json")
        assert response.status_code == 400
        [error] = response.json()["errors"]
        assert error["field"] == field and reason in error["reason"]
        assert PlanningJob.objects.count() == 1

    def test_a_custom_cluster_error_names_the_nested_field(self, people, planned):
        cluster = load_cluster_preset("cpu-host").to_dict()
        cluster["links"]["intra_node"]["bandwidth_gb_s"] = 0
        response = api_as(people.member).post(reverse("api:jobs"), {
            "spec": planned.spec.pk, "cluster": cluster, "num_devices": 2, "num_microbatches": 4}, format="json")
        assert response.status_code == 400
        assert response.json()["errors"] == [{"field": "cluster.links.intra_node.bandwidth_gb_s",
                                              "reason": "must be > 0.0, got 0"}]

    def test_an_outsider_cannot_plan_another_teams_spec(self, people, planned):
        response = api_as(people.outsider).post(reverse("api:jobs"), {
            "spec": planned.spec.pk, "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": 4},
            format="json")
        assert response.status_code == 404
        assert response.json()["errors"][0]["field"] == "spec"
        assert PlanningJob.objects.count() == 1

    def test_detail_shows_progress_and_plans(self, people, planned):
        body = api_as(people.owner).get(reverse("api:job", args=[planned.job.pk])).json()
        assert (body["status"], body["progress"]) == ("succeeded", 1.0)
        assert body["plans"] == [{"id": planned.plan.pk, "name": "", "strategy": "1f1b",
                                  "iteration_ms": planned.plan.iteration_ms,
                                  "bubble_ratio": planned.plan.bubble_ratio, "parent": None}]
        assert body["plan"] == planned.plan.pk
        assert (body["schedule"], body["result"], body["cancel_requested"]) == ("1f1b", {}, False)


class TestPlans:
    def test_detail_includes_plan_profile_and_simulation_with_timeline(self, people, planned):
        body = api_as(people.member).get(reverse("api:plan", args=[planned.plan.pk])).json()
        assert body["plan"]["format"] == "adaptis.plan/v1" and body["profile"]["format"] == "adaptis.profile/v1"
        assert body["simulation"]["timeline"] == plan_prediction(planned.plan)["timeline"]
        assert body["iteration_ms"] == pytest.approx(planned.plan.simulation["iteration_ms"])
        assert body["layout"] == "E,t*2|t*2,L"


class TestRuns:
    def test_create_queues_a_run(self, people, planned, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = api_as(people.member).post(reverse("api:runs"), {"plan": planned.plan.pk, "steps": 2},
                                                  format="json")
        assert response.status_code == 201
        body = response.json()
        assert (body["status"], body["world_size"], body["steps"], body["event_count"]) == ("queued", 2, 2, 0)
        assert len(callbacks) == 1

    def test_refusals_name_the_field(self, people, planned):
        client = api_as(people.member)
        response = client.post(reverse("api:runs"), {"plan": planned.plan.pk, "steps": 500}, format="json")
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == "steps"
        response = api_as(people.outsider).post(reverse("api:runs"), {"plan": planned.plan.pk}, format="json")
        assert response.status_code == 404 and response.json()["errors"][0]["field"] == "plan"
        # a misspelt field is refused, not dropped (the run would take the default 3 steps)
        response = client.post(reverse("api:runs"), {"plan": planned.plan.pk, "step": 5}, format="json")
        assert response.status_code == 400 and response.json()["errors"] == [
            {"field": "step", "reason": "is not a field of this request; its fields are plan, steps, scale_down, "
                                        "target, environment, time_limit"}]
        assert Run.objects.count() == 0

    def test_every_request_refuses_a_field_it_does_not_take_and_changes_nothing(self, people, planned):
        """Each request body the API takes (uploads, renames, a derived plan, a measured profile, teams, members,
        invitations, tokens) is a 400 naming a key it does not know, where DRF would drop it without a word."""
        from adaptis_web.studio.models import (ApiToken, ClusterRecord, Invitation, MeasuredProfile, Membership, Plan,
                                               Team)

        def state():
            return (ModelSpecRecord.objects.count(), ClusterRecord.objects.count(), Plan.objects.count(),
                    MeasuredProfile.objects.count(), sorted(Team.objects.values_list("name", flat=True)),
                    sorted(Membership.objects.values_list("user__username", "role")), Invitation.objects.count(),
                    ApiToken.objects.count(), ModelSpecRecord.objects.get(pk=planned.spec.pk).name,
                    PlanningJob.objects.get(pk=planned.job.pk).name)

        team = people.team.pk
        requests = [
            ("post", reverse("api:specs"), {"doc": load_model_preset("tiny-llama").to_dict()}),
            ("post", reverse("api:clusters"), {"doc": load_cluster_preset("cpu-host").to_dict()}),
            ("patch", reverse("api:spec", args=[planned.spec.pk]), {"name": "renamed"}),
            ("patch", reverse("api:job", args=[planned.job.pk]), {"name": "renamed"}),
            ("post", reverse("api:plan-derive", args=[planned.plan.pk]), {"plan": planned.plan.plan_doc}),
            ("post", reverse("api:spec-profiles", args=[planned.spec.pk]), {"num_ranks": 1}),
            ("post", reverse("api:teams"), {"name": "new team"}),
            ("patch", reverse("api:team", args=[team]), {"name": "renamed team"}),
            ("post", reverse("api:team-members", args=[team]), {"username": "mallory"}),
            ("patch", reverse("api:team-member", args=[team, people.member.pk]), {"role": "admin"}),
            ("post", reverse("api:team-transfer", args=[team]), {"user_id": people.member.pk}),
            ("post", reverse("api:team-invitations", args=[team]), {"role": "member"}),
            ("post", reverse("api:tokens"), {"name": "ci"}),
        ]
        client = api_as(people.owner)
        before = state()
        for method, url, body in requests:
            response = getattr(client, method)(url, {**body, "colour": "blue"}, format="json")
            assert response.status_code == 400, (url, response.content)
            errors = response.json()["errors"]
            assert [error["field"] for error in errors] == ["colour"], url
            assert errors[0]["reason"].startswith("is not a field of this request; its fields are "), url
            assert state() == before, url

    def test_the_schema_says_which_requests_take_no_other_fields(self, people):
        schema = api_as(people.member).get("/api/schema/?format=json").json()["components"]["schemas"]
        assert schema["JobCreateInputRequest"]["additionalProperties"] is False
        assert schema["RunCreateInputRequest"]["additionalProperties"] is False
        for name in ("PlanDeriveInput", "RenameInput", "RequiredNameInput", "MeasuredProfileCreateInput",
                     "IngestBatchInput", "TeamCreateInput", "TeamUpdateInput", "TokenCreateInput"):
            assert schema[f"{name}Request"]["additionalProperties"] is False, name
        specs = api_as(people.member).get("/api/schema/?format=json").json()["paths"]["/api/specs/"]["post"]
        assert all(body["schema"]["additionalProperties"] is False for body in specs["requestBody"]["content"].values())

    def test_the_schema_documents_gunicorns_answer_to_an_overlong_request_line(self, people):
        """gunicorn answers 414 with its own HTML page before Django sees the request (the OpenAPI fuzzing's stateful
        phase found one: a 5,187-byte query on GET /api/teams/)."""
        paths = api_as(people.member).get("/api/schema/?format=json").json()["paths"]
        assert all("414" in operation["responses"] for operations in paths.values()
                   for operation in operations.values() if isinstance(operation, dict) and "responses" in operation)
        assert "text/html" in paths["/api/teams/"]["get"]["responses"]["414"]["content"]

    def test_events_page_by_seq(self, people, finished_run):
        client = api_as(people.member)
        url = reverse("api:run-events", args=[finished_run.pk])
        first = client.get(url, {"after": 0, "limit": 5}).json()
        assert [event["seq"] for event in first["events"]] == [1, 2, 3, 4, 5]
        assert first["last_seq"] == 5 and first["finished"] is True and first["status"] == "succeeded"
        rest = client.get(url, {"after": first["last_seq"]}).json()
        total = finished_run.events.count()
        assert [event["seq"] for event in rest["events"]] == list(range(6, total + 1))
        empty = client.get(url, {"after": total}).json()
        assert empty["events"] == [] and empty["last_seq"] == total
        event = first["events"][0]
        assert set(event) == {"seq", "rank", "device", "action", "stage", "kind", "microbatch", "step", "start_ms",
                              "end_ms"}

    def test_the_live_events_poll_reads_no_plan_profile_or_spec_document(self, people, finished_run):
        client = api_as(people.member)
        url = reverse("api:run-events", args=[finished_run.pk])
        with CaptureQueriesContext(connection) as queries:
            body = client.get(url, {"after": 0, "limit": 5}).json()
        assert body["status"] == "succeeded" and len(body["events"]) == 5
        sql = " ".join(query["sql"] for query in queries.captured_queries)
        for column in ("plan_doc", "profile_doc", "cluster_doc", "simulation", '"doc"'):
            assert column not in sql, column
        assert api_as(people.outsider).get(url).status_code == 404

    def test_events_rejects_a_bad_cursor(self, people, finished_run):
        response = api_as(people.member).get(reverse("api:run-events", args=[finished_run.pk]), {"after": -1})
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == "after"

    def test_run_detail_reports_the_summary_and_event_count(self, people, finished_run):
        body = api_as(people.owner).get(reverse("api:run", args=[finished_run.pk])).json()
        assert body["status"] == JobStatus.SUCCEEDED and body["loss"] == 6.2
        assert body["event_count"] == finished_run.events.count()
        assert body["summary"]["per_device"][0]["busy_ms"] == 28.0


def test_presets_lists_clusters_models_and_schedules(people):
    body = api_as(people.member).get(reverse("api:presets")).json()
    assert body["clusters"] == preset_names() and body["models"] == model_preset_names()
    assert "1f1b" in body["schedules"] and "time-balanced" in body["partitions"]


def test_the_openapi_schema_describes_the_endpoints(people):
    response = api_as(people.member).get(reverse("api-schema"), {"format": "json"})
    assert response.status_code == 200
    schema = json.loads(response.content)
    for path in ("/api/specs/", "/api/jobs/{job_id}/", "/api/plans/{plan_id}/", "/api/runs/",
                 "/api/runs/{run_id}/events/"):
        assert path in schema["paths"], path


def test_the_docs_page_uses_the_vendored_swagger_ui(people, client):
    client.force_login(people.member)
    page = client.get(reverse("api-docs")).content.decode()
    assert "/static/vendor/swagger-ui-dist-5.35.0/swagger-ui-bundle.js" in page
    assert "cdn" not in page.lower()


def test_lists_cost_the_same_number_of_queries_for_many_rows(people, planned, finished_run,
                                                             django_assert_max_num_queries):
    for _ in range(6):
        job = PlanningJob.objects.create(spec=planned.spec, created_by=people.owner, cluster_preset="cpu-host",
                                         cluster_doc=planned.job.cluster_doc, num_devices=2, num_microbatches=4,
                                         schedule="1f1b", status=JobStatus.SUCCEEDED)
        plan = planned.plan
        plan.pk, plan.job = None, job
        plan.save()
        Run.objects.create(plan=plan, created_by=people.owner, world_size=2)
    client = api_as(people.member)
    # a cursor page (+ one prefetch of plan ids for jobs); no count
    for name, expected_rows in (("jobs", 7), ("runs", 7), ("specs", 1)):
        with django_assert_max_num_queries(3):
            body = client.get(reverse(f"api:{name}")).json()
        assert len(body["results"]) == expected_rows, name
