"""Hostile and absurd input, as the fuzzing of the live server found it: every one a 400 in the error shape that
names the field and the bound it broke (refused by that bound, before the work it guards), with nothing stored."""

import json

import pytest
from rest_framework.test import APIClient

from adaptis_web.studio.models import ModelSpecRecord, PlanningJob
from planner.cluster import load_cluster_preset
from planner.limits import MAX_LAYERS


@pytest.fixture
def owner(people) -> APIClient:
    client = APIClient()
    client.force_authenticate(people.owner)
    return client


def _refused(response, field_prefix: str) -> str:
    assert response.status_code == 400, response.content[:500]
    errors = response.json()["errors"]
    assert errors and errors[0]["field"].startswith(field_prefix), errors
    assert len(response.content) < 4096, "an error message must not grow with the document"
    return errors[0]["reason"]


def _upload(client, people, name: str, content: str | bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile

    data = content.encode() if isinstance(content, str) else content
    return client.post("/api/specs/", {"team": people.team.pk, "file": SimpleUploadedFile(name, data)},
                       format="multipart")


def test_a_huge_repeat_is_refused_before_any_layer_is_built(owner, people, spec_text):
    doc = json.loads(spec_text("tiny-llama"))
    doc["layers"][1]["repeat"] = 1_000_000
    reason = _refused(owner.post("/api/specs/", {"team": people.team.pk, "doc": doc}, format="json"),
                      "doc.layers[1].repeat")
    assert f"{MAX_LAYERS:,}" in reason
    assert not ModelSpecRecord.objects.exists()


def test_a_yaml_alias_bomb_is_refused_at_once(owner, people):
    bomb = "\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
                     + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
                        f"*a{i - 1}, *a{i - 1}]" for i in range(1, 9)]
                     + ["format: adaptis.model/v1", "hidden_size: *a8"])
    assert len(bomb) < 1024
    reason = _refused(_upload(owner, people, "bomb.yaml", bomb), "file")
    assert "aliases" in reason
    assert not ModelSpecRecord.objects.exists()


@pytest.mark.parametrize("name, text, expected", [
    ("deep.json", "[" * 100_000 + "]" * 100_000, "nests deeper"),
    ("bigint.json", '{"format": "adaptis.model/v1", "hidden_size": ' + "9" * 5000 + "}", "4300 digits"),
])
def test_pathological_json_files_are_refused(owner, people, name, text, expected):
    assert expected in _refused(_upload(owner, people, name, text), "file")


def test_a_deep_or_huge_json_body_is_a_400_naming_the_body(owner):
    deep = owner.post("/api/jobs/", data="[" * 100_000 + "]" * 100_000, content_type="application/json")
    assert "nests" in _refused(deep, "body")
    big_number = owner.post("/api/jobs/", data='{"spec": ' + "1" * 5000 + "}", content_type="application/json")
    _refused(big_number, "body")
    huge = owner.post("/api/jobs/", data=b'{"pad": "' + b"x" * (9 << 20) + b'"}', content_type="application/json")
    assert "larger than" in _refused(huge, "body")


def test_an_oversized_upload_is_refused_by_its_size(owner, people):
    reason = _refused(_upload(owner, people, "big.json", b" " * (3 << 20)), "file")
    assert "limit" in reason


def test_a_hf_config_whose_model_type_is_a_list_names_model_type(owner, people):
    response = _upload(owner, people, "config.json", json.dumps({"model_type": ["llama"], "hidden_size": 8}))
    assert "must be a string" in _refused(response, "file.model_type")


@pytest.mark.parametrize("field, value", [("hidden_size", 10**30), ("vocab_size", 10**12), ("seq_len", 10**9)])
def test_absurd_model_sizes_are_refused(owner, people, spec_text, field, value):
    doc = json.loads(spec_text("tiny-llama"))
    doc[field] = value
    assert "must be <=" in _refused(owner.post("/api/specs/", {"team": people.team.pk, "doc": doc}, format="json"),
                                    f"doc.{field}")


@pytest.mark.parametrize("path, value", [
    (("device", "peak_tflops"), 1e-300), (("device", "peak_tflops"), 5e-324), (("nodes",), 10**9),
    (("device", "memory_bytes"), 10**30), (("links", "intra_node", "bandwidth_gb_s"), 1e30),
])
def test_absurd_clusters_are_refused_before_a_job_is_stored(owner, planned, path, value):
    cluster = load_cluster_preset("cpu-host").to_dict()
    target = cluster
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    before = PlanningJob.objects.count()
    response = owner.post("/api/jobs/", {"spec": planned.spec.pk, "cluster": cluster, "num_devices": 2,
                                         "num_microbatches": 4, "schedule": "1f1b"}, format="json")
    _refused(response, "cluster")
    assert path[-1] in response.json()["errors"][0]["field"]
    assert PlanningJob.objects.count() == before


def test_a_pipeline_too_large_to_hold_as_a_plan_is_refused(owner, planned):
    response = owner.post("/api/jobs/", {"spec": planned.spec.pk, "cluster_preset": "h100-sxm-16x8",
                                         "num_devices": 128, "num_microbatches": 1024, "schedule": "1f1b"},
                          format="json")
    assert "slots" in _refused(response, "num_microbatches")


@pytest.mark.parametrize("value", [0, 1, "yes", "True", None])
def test_a_boolean_is_true_or_false_and_nothing_else(owner, planned, value):
    """0 and 1 are not booleans in JSON (Python's 0 == False made them pass once), nor are the words DRF's
    BooleanField also takes."""
    from adaptis_web.studio.models import Run

    response = owner.post("/api/runs/", {"plan": planned.plan.pk, "scale_down": value}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["errors"][0]["field"] == "scale_down"
    assert not Run.objects.exists()


def test_a_form_sends_an_optional_id_as_null_or_nothing(owner, planned, people):
    """In a form every value is text: an optional id given as "null" (as OpenAPI tools encode JSON's null in a
    form) or empty means none; any other word is refused."""
    from adaptis_web.studio.models import MeasuredProfile

    url = f"/api/specs/{planned.spec.pk}/profiles/"
    for value in ("null", ""):
        response = owner.post(url, {"num_ranks": "2", "plan": value}, format="multipart")
        assert response.status_code == 201, response.content
        assert response.json()["plan"] is None
    response = owner.post(url, {"num_ranks": "2", "plan": "none"}, format="multipart")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "plan"
    response = owner.post(url, {"num_ranks": 2, "plan": "null"}, format="json")  # in JSON, the text is not null
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "plan"
    assert MeasuredProfile.objects.count() == 2
