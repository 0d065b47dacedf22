"""What the OpenAPI schema says of a request is what the API does with it: each case here is one the stateful
schema fuzzing found (tests/web/test_openapi_fuzz.py), checked both ways: the request's verdict by the schema (as
JSON Schema) and the API's answer. And the schema's links lead from a response to operations that exist, through
fields the response has."""

from __future__ import annotations

import json
import re

import jsonschema_rs
import pytest
from django.core.management import call_command
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator

from adaptis_web.studio.api.fields import WHITE_SPACE
from adaptis_web.studio.api.schema_links import ENDS, MEMBER_ENDS
from adaptis_web.studio.catalog.clusters import cluster_create
from adaptis_web.studio.models import ClusterRecord, Invitation, Plan, PlanningJob
from planner.cluster import load_cluster_preset
from tests.web.conftest import api_as


@pytest.fixture(scope="module")
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def _json_schema(node):
    """OpenAPI 3.0's ``nullable`` as JSON Schema's null type."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _json_schema(value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable"):
        converted = {"anyOf": [converted, {"type": "null"}]}
    return converted


def _valid(schema: dict, path: str, method: str, body, media_type: str = "application/json") -> bool:
    request = schema["paths"][path][method]["requestBody"]["content"][media_type]["schema"]
    document = {**_json_schema(request), "components": _json_schema(schema["components"])}
    # Schemathesis' validator: its regular expressions are ECMA 262's, as JSON Schema says (Python's $ would also
    # match before a final newline)
    return jsonschema_rs.Draft4Validator(document).is_valid(body)


def _refused(response, field: str) -> None:
    assert response.status_code == 400, response.content[:500]
    assert response.json()["errors"][0]["field"] == field, response.json()


def test_the_schema_is_valid_openapi_3_0(tmp_path):
    """A null retry_after_s was written as 3.1's type list, which a 3.0 reader refuses."""
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))


def test_white_space_is_what_python_strips():
    """DRF strips text with str.strip(); the schema's patterns spell those characters out."""
    spelt = re.compile(f"[{WHITE_SPACE}]")
    assert {chr(c) for c in range(0x110000) if chr(c).isspace()} == {
        chr(c) for c in range(0x110000) if spelt.fullmatch(chr(c))}


@pytest.mark.parametrize("name, accepted", [
    ("\x00", False),  # \S took the NUL: the schema said valid, the API refused it
    ("\x1d", False),  # white space to Python (stripped, then blank), not to the schema's \S
    ("  ", False),
    ("\ufeff", True),  # white space to the schema's \s, not to Python
    (" ci ", True),
    (" " * 60 + "x" * 41, False),  # 101 characters as sent: DRF counted them after stripping
])
def test_a_token_name_is_valid_by_the_schema_exactly_when_the_api_takes_it(schema, people, name, accepted):
    assert _valid(schema, "/api/tokens/", "post", {"name": name}) is accepted
    response = api_as(people.owner).post("/api/tokens/", {"name": name}, format="json")
    assert response.status_code == (201 if accepted else 400), response.content


def test_a_blank_name_is_valid_where_the_api_takes_it(schema, people, planned):
    """drf-spectacular wrote a blank-allowed text as oneOf(its pattern, empty), and an empty text matches both."""
    owner = api_as(people.owner)
    assert _valid(schema, "/api/jobs/{job_id}/", "patch", {"name": ""})
    assert owner.patch(reverse("api:job", args=[planned.job.pk]), {"name": ""}, format="json").status_code == 200
    for name in ("", " "):  # a spec keeps a name
        assert not _valid(schema, "/api/specs/{spec_id}/", "patch", {"name": name})
        _refused(owner.patch(reverse("api:spec", args=[planned.spec.pk]), {"name": name}, format="json"), "name")


class TestJobs:
    def _body(self, planned, **fields) -> dict:
        return {"spec": planned.spec.pk, "num_devices": 2, "num_microbatches": 4, **fields}

    def test_a_job_names_one_cluster(self, schema, people, planned):
        owner = api_as(people.owner)
        saved = cluster_create(team=people.team, owner=people.owner, cluster=load_cluster_preset("cpu-host"))
        body = self._body(planned, cluster_preset="cpu-host")
        assert _valid(schema, "/api/jobs/", "post", body)
        assert owner.post("/api/jobs/", body, format="json").status_code == 201
        for body, field in ((self._body(planned), "cluster_preset"),
                            (self._body(planned, cluster_preset="cpu-host", saved_cluster=saved.pk), "saved_cluster"),
                            (self._body(planned, cluster_preset="cpu-host", cluster={}), "cluster")):
            assert not _valid(schema, "/api/jobs/", "post", body)
            _refused(owner.post("/api/jobs/", body, format="json"), field)
        assert PlanningJob.objects.count() == 2  # the planned job and the one above

    def test_a_pipeline_job_needs_its_devices_a_hybrid_job_its_gpus(self, schema, people, planned):
        owner = api_as(people.owner)
        pipeline = {"spec": planned.spec.pk, "cluster_preset": "cpu-host", "num_devices": 2}
        hybrid = {"spec": planned.spec.pk, "cluster_preset": "h100-sxm-1x8", "mode": "hybrid", "gpus": 8,
                  "seq_len": 4096}
        for body, field in ((pipeline, "num_microbatches"), (hybrid, "global_batch")):
            assert not _valid(schema, "/api/jobs/", "post", body)
            _refused(owner.post("/api/jobs/", body, format="json"), field)
        assert _valid(schema, "/api/jobs/", "post", {**hybrid, "global_batch": 64})

    @pytest.mark.parametrize("preset, accepted", [
        ("cpu-host", True), ("b200-131072x1024", True), ("h100-sxm-007x8", True),
        ("b200-131073x8", False), ("b200-1x1025", False), ("h100-sxm-0x8", False), ("tpu-pod", False),
        ("h100-sxm-1x8\n", False),  # the name's pattern ended in $, which takes a final newline in Python
    ])
    def test_a_cluster_preset_is_valid_by_the_schema_exactly_when_the_api_knows_it(self, schema, people, planned,
                                                                                     preset, accepted):
        body = self._body(planned, cluster_preset=preset, num_devices=1)
        assert _valid(schema, "/api/jobs/", "post", body) is accepted
        response = api_as(people.owner).post("/api/jobs/", body, format="json")
        if accepted:
            assert response.status_code == 201, response.content
        else:
            _refused(response, "cluster_preset")

    def test_a_form_sends_an_optional_choice_or_flag_as_null(self, people, planned):
        owner = api_as(people.owner)
        form = {**self._body(planned, cluster_preset="cpu-host"), "recompute": "null",
                "distributed_optimizer": "null"}
        assert owner.post("/api/jobs/", form, format="multipart").status_code == 201
        for flag in (0, 1, "yes"):  # JSON's 0 is no boolean
            _refused(owner.post("/api/jobs/", self._body(planned, cluster_preset="cpu-host",
                                                         distributed_optimizer=flag), format="json"),
                     "distributed_optimizer")

    def test_a_custom_cluster_is_a_document(self, schema, people, planned):
        body = self._body(planned, cluster=[])
        assert not _valid(schema, "/api/jobs/", "post", body)
        _refused(api_as(people.owner).post("/api/jobs/", body, format="json"), "cluster")


def test_documents_are_objects(schema, people, planned):
    owner = api_as(people.owner)
    derive = reverse("api:plan-derive", args=[planned.plan.pk])
    for body, field in (({"plan": []}, "plan"), ({"plan": None}, "plan"), ({"plan": {}, "name": 5}, "name")):
        assert not _valid(schema, "/api/plans/{plan_id}/derive/", "post", body)
        _refused(owner.post(derive, body, format="json"), field)
    assert not _valid(schema, "/api/clusters/", "post", {"doc": None})
    _refused(owner.post("/api/clusters/", {"doc": None}, format="json"), "doc")
    assert Plan.objects.count() == 1 and not ClusterRecord.objects.exists()


def test_a_saved_cluster_is_sent_as_a_document_in_json_or_a_file_in_a_form(schema):
    content = schema["paths"]["/api/clusters/"]["post"]["requestBody"]["content"]
    assert content["application/json"]["schema"]["required"] == ["doc"]
    assert content["multipart/form-data"]["schema"]["required"] == ["file"]


def test_a_multipart_body_whose_parts_name_no_field_is_refused(people):
    """An array is no form: Django skipped the part without a name and the invitation went out with the defaults."""
    owner, url = api_as(people.owner), reverse("api:team-invitations", args=[people.team.pk])
    boundary = "b0undary"
    for body in (f"--{boundary}\r\n[]--{boundary}--\r\n",
                 f"--{boundary}\r\nContent-Type: text/plain\r\n\r\nx\r\n--{boundary}--\r\n"):
        response = owner.post(url, data=body.encode(), content_type=f"multipart/form-data; boundary={boundary}")
        _refused(response, "body")
    assert not Invitation.objects.exists()
    named = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"role\"\r\n\r\nviewer\r\n"
             f"--{boundary}--\r\n")
    response = owner.post(url, data=named.encode(), content_type=f"multipart/form-data; boundary={boundary}")
    assert response.status_code == 201 and response.json()["role"] == "viewer"
    empty = owner.post(url, data=f"--{boundary}--\r\n".encode(),
                       content_type=f"multipart/form-data; boundary={boundary}")
    assert empty.status_code == 201 and empty.json()["role"] == "member"


def test_an_empty_or_repeated_events_cursor_is_refused(schema, people, finished_run):
    """?after= is no integer, as the schema says: it was read as 0 (and the page was answered from the start)."""
    parameters = {parameter["name"]: parameter["schema"]
                  for parameter in schema["paths"]["/api/runs/{run_id}/events/"]["get"]["parameters"]}
    assert parameters["after"]["type"] == parameters["limit"]["type"] == "integer"
    url = reverse("api:run-events", args=[finished_run.pk])
    for query, field in (("after=", "after"), ("limit=", "limit"), ("after=1&after=2", "after"), ("after=+1", "after")):
        _refused(api_as(people.owner).get(f"{url}?{query}"), field)
    assert api_as(people.owner).get(f"{url}?after=1&limit=2").json()["last_seq"] == 3


def _pointed(schema: dict, node: dict, pointer: str) -> bool:
    """Whether a response of schema ``node`` can have a value at ``pointer`` (numbers index arrays)."""
    for part in pointer.strip("/").split("/"):
        while "$ref" in node:
            node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
        if part.isdigit():
            node = node.get("items")
        else:
            node = (node.get("properties") or {}).get(part)
        if node is None:
            return False
    return True


def test_every_link_leads_through_a_field_of_its_response_to_an_operation_that_exists(schema):
    operations = {operation["operationId"]: operation for item in schema["paths"].values()
                  for operation in item.values()}
    count = 0
    for operation_id, operation in operations.items():
        for status, response in operation["responses"].items():
            body = (response.get("content") or {}).get("application/json", {}).get("schema", {})
            for name, link in (response.get("links") or {}).items():
                count += 1
                target = operations[link["operationId"]]
                names = {f"{parameter['in']}.{parameter['name']}" for parameter in target.get("parameters", [])}
                for key, value in link.get("parameters", {}).items():
                    assert key in names, (operation_id, name, key)
                    if value.startswith("$response.body#"):
                        assert _pointed(schema, body, value.split("#", 1)[1]), (operation_id, name, value)
                for value in re.findall(r"\$response\.body#(/[\w/]*)", json.dumps(link.get("requestBody", ""))):
                    assert _pointed(schema, body, value), (operation_id, name, value)
    assert count > 250


def test_what_ends_an_object_is_linked_only_from_the_response_that_created_or_cancelled_it(schema):
    ending = {opens.operation_id for kind in ENDS.values() for opens in kind} | {
        opens.operation_id for opens in MEMBER_ENDS}
    sources = set()
    for item in schema["paths"].values():
        for operation in item.values():
            for status, response in operation["responses"].items():
                for link in (response.get("links") or {}).values():
                    if link["operationId"] in ending:
                        sources.add(operation["operationId"])
    assert sources == {"specs_create", "clusters_create", "jobs_create", "jobs_cancel_create", "runs_replan_create",
                       "plans_derive_create", "runs_create", "runs_cancel_create", "teams_create", "tokens_create",
                       "teams_members_create"}
