"""Saved team clusters: created from a JSON or YAML document, a file or a copy of a named cluster (page and API),
validated by planner.cluster with the field named; listed, filtered, renamed, archived, deleted and restored through
the history and curation framework; offered by the job forms of their team only."""

import json

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from adaptis_web.studio.catalog.clusters import cluster_create
from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import ClusterRecord, PlanningJob
from planner.cluster import load_cluster_preset
from planner.spec.presets import load_model_preset
from tests.web.conftest import api_as

POD = load_cluster_preset("h100-sxm-2x8").to_dict()


class TestApi:
    def test_an_inline_document_is_saved_for_the_team(self, people):
        response = api_as(people.member).post(reverse("api:clusters"), {"doc": POD, "name": "our pod"}, format="json")
        assert response.status_code == 201, response.content
        body = response.json()
        assert (body["name"], body["num_devices"], body["device_name"], body["owner"]) == (
            "our pod", 16, "H100-SXM-80GB", "bob")
        assert body["doc"] == POD and body["team"] == people.team.pk

    def test_a_yaml_file_is_saved_under_the_documents_name(self, people):
        upload = SimpleUploadedFile("pod.yaml", yaml.safe_dump(POD).encode())
        response = api_as(people.member).post(reverse("api:clusters"), {"file": upload}, format="multipart")
        assert response.status_code == 201, response.content
        assert response.json()["name"] == POD["name"] and response.json()["source_filename"] == "pod.yaml"

    @pytest.mark.parametrize("change, field, reason", [
        (lambda doc: doc["links"]["intra_node"].update(bandwidth_gb_s=0), "doc.links.intra_node.bandwidth_gb_s",
         "must be > 0.0"),
        (lambda doc: doc.update(nvlink_domain=3), "doc.nvlink_domain", "must divide devices_per_node (8)"),
        (lambda doc: doc.update(format="adaptis.cluster/v9"), "doc.format", "adaptis.cluster/v1"),
    ])
    def test_a_bad_document_is_a_400_naming_the_field_inside_it(self, people, change, field, reason):
        doc = json.loads(json.dumps(POD))
        change(doc)
        response = api_as(people.member).post(reverse("api:clusters"), {"doc": doc}, format="json")
        assert response.status_code == 400
        [error] = response.json()["errors"]
        assert error["field"] == field and reason in error["reason"], error
        assert not ClusterRecord.objects.exists()

    def test_exactly_one_of_file_and_doc(self, people):
        response = api_as(people.member).post(reverse("api:clusters"), {"name": "empty"}, format="json")
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == "file"

    def test_the_list_is_the_teams_history_filtered_by_device(self, people):
        cluster_create(team=people.team, owner=people.owner, cluster=load_cluster_preset("h100-sxm-2x8"))
        mine = cluster_create(team=people.team, owner=people.member, cluster=load_cluster_preset("mi300x-4x8"))
        cluster_create(team=people.outsider_team, owner=people.outsider, cluster=load_cluster_preset("b200-1x8"))
        client = api_as(people.member)
        names = [row["name"] for row in client.get(reverse("api:clusters")).json()["results"]]
        assert names == [load_cluster_preset(name).name for name in ("mi300x-4x8", "h100-sxm-2x8")], \
            "newest first, only the team's"
        by_device = client.get(reverse("api:clusters"), {"device": "mi300"}).json()["results"]
        assert [row["id"] for row in by_device] == [mine.pk]
        assert [row["id"] for row in client.get(reverse("api:clusters"), {"user": "bob"}).json()["results"]] == [
            mine.pk]

    def test_rename_archive_delete_and_an_admins_restore(self, people):
        record = cluster_create(team=people.team, owner=people.member, cluster=load_cluster_preset("h100-sxm-2x8"))
        member, owner = api_as(people.member), api_as(people.owner)
        url = reverse("api:cluster", args=[record.pk])
        assert member.patch(url, {"name": "the big pod"}, format="json").json()["name"] == "the big pod"
        assert member.patch(url, {"name": " "}, format="json").json() == {
            "errors": [{"field": "name", "reason": "is required for a cluster"}]}
        dependents = member.get(reverse("api:dependents", args=["clusters", record.pk])).json()
        assert dependents == {}, "jobs keep a copy of the document: nothing is taken along"
        member.post(reverse("api:curated-action", args=["clusters", record.pk, "archive"]))
        assert member.get(reverse("api:clusters")).json()["results"] == []
        assert len(member.get(reverse("api:clusters"), {"archived": "true"}).json()["results"]) == 1
        assert member.delete(url).status_code == 200
        assert member.get(url).status_code == 404
        refused = member.post(reverse("api:curated-action", args=["clusters", record.pk, "restore"]))
        assert refused.status_code == 403
        assert owner.post(reverse("api:curated-action", args=["clusters", record.pk, "restore"])).status_code == 200
        assert member.get(url).json()["name"] == "the big pod"

    def test_a_job_planned_on_a_deleted_cluster_keeps_its_document(self, people, django_capture_on_commit_callbacks):
        record = cluster_create(team=people.team, owner=people.member, cluster=load_cluster_preset("h100-sxm-2x8"))
        spec = spec_create(team=people.team, owner=people.member, spec=load_model_preset("tiny-llama"))
        client = api_as(people.member)
        with django_capture_on_commit_callbacks(execute=False):
            job_id = client.post(reverse("api:jobs"), {"spec": spec.pk, "saved_cluster": record.pk, "num_devices": 2,
                                                       "num_microbatches": 4}, format="json").json()["id"]
        client.delete(reverse("api:cluster", args=[record.pk]))
        job = PlanningJob.objects.get(pk=job_id)
        assert job.cluster_doc == POD and job.deleted_at is None


class TestPages:
    def test_a_member_copies_a_named_cluster_and_the_job_form_offers_it(self, client, people):
        client.force_login(people.member)
        response = client.post(reverse("studio:cluster-new"), {"team": people.team.pk, "name": "our H100s",
                                                                "from_preset": "h100-sxm-16x8"})
        record = ClusterRecord.objects.get()
        assert response.status_code == 302 and response.url == reverse("studio:cluster", args=[record.pk])
        assert (record.num_devices, record.owner) == (128, people.member)
        page = client.get(response.url).content.decode()
        assert "our H100s" in page and 'data-metric="gpus">128<' in page
        # the kernel model the planner uses on it: rates by shape on the H100's 132 SMs, large GEMMs at 72 %
        assert 'data-metric="kernel-rates">by shape on 132 SMs, large GEMMs at 72 %<' in page
        spec = spec_create(team=people.team, owner=people.member, spec=load_model_preset("tiny-llama"))
        form = client.get(reverse("studio:spec", args=[spec.pk])).content.decode()
        assert f'<option value="{record.pk}">our H100s (128 × H100-SXM-80GB, team pipeline-team)</option>' in form

    def test_a_device_without_multiprocessors_runs_every_gemm_at_one_rate(self, client, people):
        record = cluster_create(team=people.team, owner=people.member, cluster=load_cluster_preset("cpu-host"))
        client.force_login(people.member)
        page = client.get(reverse("studio:cluster", args=[record.pk])).content.decode()
        assert 'data-metric="kernel-rates">every GEMM at 30 %<' in page

    def test_another_teams_clusters_are_not_offered(self, client, people):
        cluster_create(team=people.outsider_team, owner=people.outsider, cluster=load_cluster_preset("b200-1x8"),
                       name="theirs")
        spec = spec_create(team=people.team, owner=people.member, spec=load_model_preset("tiny-llama"))
        client.force_login(people.member)
        assert "theirs" not in client.get(reverse("studio:spec", args=[spec.pk])).content.decode()
        assert "theirs" not in client.get(reverse("studio:upload")).content.decode()

    @pytest.mark.parametrize("data, message", [
        ({"from_preset": "h100-sxm-2x8", "text": "{}"}, "give one of a file, a pasted document or a preset name"),
        ({"text": "format: adaptis.cluster/v1\nname: x\n"}, "device: must be an object"),
        ({"from_preset": "h100-sxm-x8"}, "unknown preset"),
    ])
    def test_a_bad_cluster_is_refused_on_its_field(self, client, people, data, message):
        client.force_login(people.member)
        response = client.post(reverse("studio:cluster-new"), {"team": people.team.pk, **data})
        assert response.status_code == 400 and message in response.content.decode()
        assert not ClusterRecord.objects.exists()

    def test_the_history_lists_clusters(self, client, people):
        record = cluster_create(team=people.team, owner=people.member, cluster=load_cluster_preset("h100-sxm-2x8"))
        client.force_login(people.owner)
        page = client.get(reverse("studio:history"), {"kind": "clusters"}).content.decode()
        assert f'href="{reverse("studio:cluster", args=[record.pk])}"' in page and "16 × H100-SXM-80GB" in page

    def test_planning_on_a_saved_cluster_from_the_spec_page(self, client, people, django_capture_on_commit_callbacks):
        record = cluster_create(team=people.team, owner=people.member, cluster=load_cluster_preset("h100-sxm-2x8"))
        spec = spec_create(team=people.team, owner=people.member, spec=load_model_preset("llama-3-8b"))
        client.force_login(people.member)
        with django_capture_on_commit_callbacks(execute=False):
            response = client.post(reverse("studio:spec", args=[spec.pk]), {
                "mode": "hybrid", "cluster_preset": "cpu-host", "saved_cluster": record.pk, "gpus": 16,
                "seq_len": 4096, "global_batch": 64, "tp": 2, "recompute": "", "sharding": "none", "precision": "fp8",
                "schedule": "adaptis", "time_budget_s": 5})
        assert response.status_code == 302, response.content.decode()[-2000:]
        job = PlanningJob.objects.get()
        assert (job.mode, job.cluster_record, job.cluster_preset, job.gpus) == ("hybrid", record, "", 16)
        assert job.pins == {"tp": 2, "sharding": "none", "precision": "fp8"}

    def test_a_named_cluster_typed_in_overrides_the_preset_and_its_errors_go_there(self, client, people):
        spec = spec_create(team=people.team, owner=people.member, spec=load_model_preset("llama-3-8b"))
        client.force_login(people.member)
        response = client.post(reverse("studio:spec", args=[spec.pk]), {
            "mode": "hybrid", "cluster_preset": "cpu-host", "cluster_name": "h100-sxm-9x9x9", "gpus": 16,
            "seq_len": 4096, "global_batch": 64, "schedule": "adaptis"})
        assert response.status_code == 400
        page = response.content.decode()
        assert "unknown preset &#x27;h100-sxm-9x9x9&#x27;" in page
        assert PlanningJob.objects.count() == 0
