"""Server-rendered pages: every page checked with the team owner, a team member, an outsider and anonymous."""

import html
import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.accounts.tokens import token_create
from adaptis_web.studio.models import ApiToken, JobStatus, ModelSpecRecord, PlanningJob, Run
from adaptis_web.studio.planning.predictions import plan_prediction
from planner.cluster import load_cluster_preset
from planner.limits import MAX_MICROBATCHES
from planner.spec.model import load_model_spec
from planner.spec.presets import load_model_preset


def _client(client, user):
    if user is not None:
        client.force_login(user)
    return client


def _object_pages(planned, finished_run):
    return [reverse("studio:spec", args=[planned.spec.pk]), reverse("studio:job", args=[planned.job.pk]),
            reverse("studio:run", args=[finished_run.pk])]


class TestAccess:
    @pytest.mark.parametrize("who", ["owner", "member"])
    def test_team_members_see_every_page_of_their_team(self, client, people, planned, finished_run, who):
        client = _client(client, getattr(people, who))
        for url in _object_pages(planned, finished_run):
            assert client.get(url).status_code == 200, url

    def test_an_outsider_gets_404_for_another_teams_objects(self, client, people, planned, finished_run):
        client = _client(client, people.outsider)
        for url in _object_pages(planned, finished_run):
            assert client.get(url).status_code == 404, url
        response = client.post(reverse("studio:plan-run", args=[planned.plan.pk]), {"steps": 1})
        assert response.status_code == 404
        assert Run.objects.count() == 1

    def test_anonymous_visitors_are_sent_to_log_in(self, client, planned, finished_run):
        urls = [reverse("studio:dashboard"), reverse("studio:upload"), reverse("studio:api-tokens"),
                *_object_pages(planned, finished_run)]
        for url in urls:
            response = client.get(url)
            assert response.status_code == 302 and response.url.startswith(reverse("login")), url

    def test_the_dashboard_lists_only_the_users_teams_objects(self, client, people, planned, finished_run):
        outsider_page = _client(client, people.outsider).get(reverse("studio:dashboard")).content.decode()
        assert "tiny-llama" not in outsider_page and "other-team" in outsider_page
        client.logout()
        member_page = _client(client, people.member).get(reverse("studio:dashboard")).content.decode()
        assert f'href="{reverse("studio:job", args=[planned.job.pk])}"' in member_page
        assert f'href="{reverse("studio:run", args=[finished_run.pk])}"' in member_page


def test_login_page_logs_a_user_in(client, people):
    response = client.post(reverse("login"), {"username": "bob", "password": "bob-pass-2026"})
    assert response.status_code == 302 and response.url == reverse("studio:dashboard")
    assert client.get(reverse("studio:dashboard")).status_code == 200


def test_login_page_rejects_a_wrong_password(client, people):
    response = client.post(reverse("login"), {"username": "bob", "password": "nope"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()


class TestUpload:
    def _post(self, client, people, content, filename="tiny.json", **fields):
        data = {"team": people.team.pk, "file": SimpleUploadedFile(filename, content), "cluster_preset": "cpu-host",
                "num_devices": 2, "num_microbatches": 8, "schedule": "1f1b"}
        data.update(fields)
        return client.post(reverse("studio:upload"), data)

    def test_the_form_offers_the_users_teams_and_the_cluster_presets(self, client, people):
        page = _client(client, people.member).get(reverse("studio:upload")).content.decode()
        assert "pipeline-team" in page and "other-team" not in page
        assert "h100-sxm-1x8" in page and "cpu-host" in page

    def test_a_valid_spec_creates_spec_and_job_and_opens_the_job(self, client, people, spec_text,
                                                                 django_capture_on_commit_callbacks):
        client = _client(client, people.member)
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = self._post(client, people, spec_text().encode())
        job = PlanningJob.objects.get()
        assert response.status_code == 302 and response.url == reverse("studio:job", args=[job.pk])
        assert (job.spec.team, job.spec.owner, job.spec.source_filename) == (people.team, people.member, "tiny.json")
        assert (job.num_devices, job.num_microbatches, job.status) == (2, 8, JobStatus.QUEUED)
        assert len(callbacks) == 2, "the planning task and, on cpu-host, the profile it waits for (runs.profiling)"
        page = client.get(response.url).content.decode()
        assert "data-job-progress" in page, "a queued job shows the polling progress bar"

    def test_a_bad_spec_shows_field_and_reason_and_stores_nothing(self, client, people, spec_text):
        doc = json.loads(spec_text())
        doc["layers"][1]["mixer"]["num_kv_heads"] = 3
        response = self._post(_client(client, people.member), people, json.dumps(doc).encode())
        page = response.content.decode()
        assert response.status_code == 400
        assert "layers[1].mixer.num_kv_heads: must divide num_heads (4) for grouped-query attention, got 3" in page
        assert "Nothing was stored" in page
        assert ModelSpecRecord.objects.count() == 0 and PlanningJob.objects.count() == 0

    def test_a_misspelt_hf_key_is_shown_on_the_job_and_the_spec_page(self, client, people):
        from pathlib import Path

        config = json.loads((Path(__file__).parents[1] / "planner" / "fixtures" / "hf" / "llama-3-8b.json").read_text())
        config["num_hiden_layers"] = config.pop("num_hidden_layers")
        client = _client(client, people.member)
        response = self._post(client, people, json.dumps(config).encode(), filename="config.json",
                              cluster_preset="h100-sxm-1x8", num_devices=8)
        assert response.status_code == 302
        record = ModelSpecRecord.objects.get()
        assert [warning["field"] for warning in record.warnings] == ["file.num_hiden_layers"]
        for page in (client.get(response.url), client.get(reverse("studio:spec", args=[record.pk]))):
            text = html.unescape(re.sub(r"\s+", " ", page.content.decode()))
            assert "accepted with 1 warning" in text
            assert "file.num_hiden_layers</span> is not a key this model's config reads; did you mean " \
                   "'num_hidden_layers'?" in text

    def test_new_plan_picks_a_spec_of_the_team_or_a_preset_instead_of_an_upload(self, client, people, planned,
                                                                                 django_capture_on_commit_callbacks):
        client = _client(client, people.member)
        data = {"team": people.team.pk, "cluster_preset": "h100-sxm-1x8", "num_devices": 8, "num_microbatches": 16,
                "schedule": "1f1b"}
        page = client.get(reverse("studio:upload") + f"?spec={planned.spec.pk}").content.decode()
        assert f'<option value="{planned.spec.pk}" selected>{planned.spec.name} · pipeline-team</option>' in page
        with django_capture_on_commit_callbacks(execute=False):
            response = client.post(reverse("studio:upload"), {**data, "existing_spec": planned.spec.pk,
                                                               "cluster_preset": "cpu-host", "num_devices": 2})
        assert response.status_code == 302, re.findall(r'class="errorlist"><li>(.*?)</li>', response.content.decode())
        job = PlanningJob.objects.latest("id")
        assert response.url == reverse("studio:job", args=[job.pk])
        assert job.spec_id == planned.spec.pk and ModelSpecRecord.objects.count() == 1, "no second copy of the spec"
        with django_capture_on_commit_callbacks(execute=False):
            response = client.post(reverse("studio:upload"), {**data, "preset": "llama-3-8b"})
        job = PlanningJob.objects.latest("id")
        assert response.url == reverse("studio:job", args=[job.pk])
        assert load_model_spec(job.spec.doc) == load_model_preset("llama-3-8b")
        assert job.spec.source_filename == "preset llama-3-8b" and job.spec.team == people.team
        jobs = PlanningJob.objects.count()
        for chosen in ({}, {"preset": "llama-3-8b", "existing_spec": planned.spec.pk}):
            refused = client.post(reverse("studio:upload"), {**data, **chosen})
            assert refused.status_code == 400 and "choose the model" in refused.content.decode()
        assert PlanningJob.objects.count() == jobs

    def test_an_unparseable_file_is_reported(self, client, people):
        response = self._post(_client(client, people.member), people, b"layers: [unclosed", filename="spec.yaml")
        assert response.status_code == 400
        assert "invalid YAML" in response.content.decode()
        assert ModelSpecRecord.objects.count() == 0

    def test_too_many_devices_for_the_cluster_is_reported_on_its_field(self, client, people, spec_text):
        response = self._post(_client(client, people.member), people, spec_text().encode(), num_devices=9)
        assert response.status_code == 400
        assert "must be between 1 and the cluster&#x27;s 4 devices" in response.content.decode()
        assert ModelSpecRecord.objects.count() == 0

    def test_a_custom_cluster_file_replaces_the_preset(self, client, people, spec_text):
        from planner.cluster import load_cluster_preset

        cluster = load_cluster_preset("h100-sxm-1x8").to_dict()
        response = self._post(_client(client, people.member), people, spec_text().encode(), num_devices=6,
                              cluster_file=SimpleUploadedFile("cluster.json", json.dumps(cluster).encode()))
        assert response.status_code == 302
        job = PlanningJob.objects.get()
        assert job.cluster_preset == "" and job.cluster_doc == cluster

    def test_a_bad_custom_cluster_names_its_field(self, client, people, spec_text):
        response = self._post(_client(client, people.member), people, spec_text().encode(),
                              cluster_file=SimpleUploadedFile("cluster.yaml", b"format: adaptis.cluster/v1\n"))
        assert response.status_code == 400
        assert re.search(r"devices_per_node: is required|device: must be an object", response.content.decode())
        assert PlanningJob.objects.count() == 0

    def test_an_outsider_cannot_upload_into_another_team(self, client, people, spec_text):
        response = self._post(_client(client, people.outsider), people, spec_text().encode())
        assert response.status_code == 400
        assert "Select a valid choice" in response.content.decode()
        assert ModelSpecRecord.objects.count() == 0


class TestSpecPage:
    def test_shows_the_layers_and_plans_again(self, client, people, planned, django_capture_on_commit_callbacks):
        client = _client(client, people.member)
        url = reverse("studio:spec", args=[planned.spec.pk])
        page = client.get(url).content.decode()
        assert "layers.3" in page and "embed" in page and "head" in page
        with django_capture_on_commit_callbacks(execute=False):
            response = client.post(url, {"cluster_preset": "h100-sxm-1x8", "num_devices": 3, "num_microbatches": 6,
                                         "schedule": "zb-h1", "partition": "param-balanced"})
        new_job = PlanningJob.objects.exclude(pk=planned.job.pk).get()
        assert response.status_code == 302 and response.url == reverse("studio:job", args=[new_job.pk])
        assert (new_job.spec, new_job.num_devices, new_job.created_by) == (planned.spec, 3, people.member)
        assert (new_job.schedule, new_job.partition) == ("zb-h1", "param-balanced")

    def test_bad_parameters_are_reported_and_nothing_is_queued(self, client, people, planned):
        response = _client(client, people.member).post(reverse("studio:spec", args=[planned.spec.pk]), {
            "cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": MAX_MICROBATCHES + 1, "schedule": "1f1b"})
        assert response.status_code == 400
        assert f"must be between 1 and {MAX_MICROBATCHES}; got {MAX_MICROBATCHES + 1}" in response.content.decode()
        assert PlanningJob.objects.count() == 1


    def test_a_pipeline_job_at_another_sequence_length_and_micro_batch_size_plans_that_shape(
            self, client, people, planned, django_capture_on_commit_callbacks):
        """tiny-llama (sequences of 32 tokens, micro-batches of 1) planned at 16 tokens in micro-batches of 4: the
        job plans a spec of that shape, stored once beside the original and named for it; the same shape again
        reuses it; no override plans the spec itself; a shape the model cannot take is refused on the page."""
        client = _client(client, people.member)
        url = reverse("studio:spec", args=[planned.spec.pk])
        base = {"cluster_preset": "h100-sxm-1x8", "num_devices": 2, "num_microbatches": 4, "schedule": "1f1b"}
        with django_capture_on_commit_callbacks(execute=False):
            first = client.post(url, {**base, "pipeline_seq_len": 16, "pipeline_micro_batch_size": 4})
            again = client.post(url, {**base, "pipeline_seq_len": 16, "pipeline_micro_batch_size": 4})
            plain = client.post(url, base)
        jobs = list(PlanningJob.objects.exclude(pk=planned.job.pk).order_by("id"))
        assert [response.status_code for response in (first, again, plain)] == [302, 302, 302] and len(jobs) == 3
        shaped = jobs[0].spec
        assert (shaped.doc["seq_len"], shaped.doc["micro_batch_size"]) == (16, 4)
        assert shaped.name == f"{planned.spec.name} · seq 16 · mbs 4" and shaped.team == planned.spec.team
        assert {key: value for key, value in shaped.doc.items() if key not in ("seq_len", "micro_batch_size")} == \
            {key: value for key, value in planned.spec.doc.items() if key not in ("seq_len", "micro_batch_size")}
        assert jobs[1].spec == shaped, "the same shape again is the same spec"
        assert jobs[2].spec == planned.spec, "no override: the spec itself"
        too_long = client.post(url, {**base, "pipeline_seq_len": 1 << 25})
        field = too_long.content.decode().split('name="pipeline_seq_len"')[1].split("</div>\n</div>")[0]
        assert too_long.status_code == 400 and "must be &lt;= 16,777,216, got 33554432" in field, field
        assert PlanningJob.objects.count() == 4 and ModelSpecRecord.objects.count() == 2, "nothing half-stored"


class TestJobPage:
    def test_shows_the_plan_metrics_table_and_chart_data(self, client, people, planned):
        page = _client(client, people.member).get(reverse("studio:job", args=[planned.job.pk])).content.decode()
        plan = planned.plan
        assert plan.layout in page
        assert f"{plan.iteration_ms:.3f} ms" in page
        assert f"{plan.bubble_ratio:.3f}" in page
        assert 'id="timeline"' in page and "chart.js-4.6.1/chart.umd.min.js" in page
        data = json.loads(re.search(r'<script id="timeline-data" type="application/json">(.*?)</script>', page,
                                    re.S).group(1))
        assert data["predicted"] == plan_prediction(plan)["timeline"] and data["num_devices"] == 2
        assert page.count("<tr><td>") >= 2, "one per-device row per device"
        assert "data-job-progress" not in page, "a finished job does not poll"

    def test_a_failed_job_shows_its_error(self, client, people, planned):
        PlanningJob.objects.filter(pk=planned.job.pk).update(status=JobStatus.FAILED, error="num_devices: too many")
        planned.plan.delete()
        page = _client(client, people.owner).get(reverse("studio:job", args=[planned.job.pk])).content.decode()
        assert "Planning failed." in page and "num_devices: too many" in page

    def test_run_on_cpu_creates_a_run_and_opens_it(self, client, people, planned, django_capture_on_commit_callbacks):
        client = _client(client, people.member)
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = client.post(reverse("studio:plan-run", args=[planned.plan.pk]), {"steps": 2})
        run = Run.objects.get()
        assert response.status_code == 302 and response.url == reverse("studio:run", args=[run.pk])
        assert (run.steps, run.world_size, run.created_by, run.scaled_down) == (2, 2, people.member, False)
        assert len(callbacks) == 1

    def test_run_on_cpu_refuses_a_realistic_model_with_a_message(self, client, people, planned):
        planned.spec.doc = load_model_preset("llama-3-8b").to_dict()
        planned.spec.save()
        client = _client(client, people.member)
        page = client.get(reverse("studio:job", args=[planned.job.pk])).content.decode()
        assert "choose the scaled-down variant" in page, "the page warns before the button is pressed"
        response = client.post(reverse("studio:plan-run", args=[planned.plan.pk]), {"steps": 1})
        assert response.status_code == 400
        assert "more than a CPU run takes" in response.content.decode()
        assert Run.objects.count() == 0


    def test_a_run_defaults_to_a_steady_state_and_says_its_limit(self, client, people, planned,
                                                                  django_capture_on_commit_callbacks):
        from adaptis_web.studio.runs.local_runs import MAX_RUN_STEPS

        client = _client(client, people.member)
        page = html.unescape(client.get(reverse("studio:job", args=[planned.job.pk])).content.decode())
        assert re.search(r'<input type="number" name="steps" value="12"[^>]*max="50"', page)
        assert f"at most {MAX_RUN_STEPS}: the first warms up" in page
        over = client.post(reverse("studio:plan-run", args=[planned.plan.pk]), {"steps": MAX_RUN_STEPS + 1})
        assert over.status_code == 400 and "less than or equal to 50" in over.content.decode()
        with django_capture_on_commit_callbacks(execute=False):
            api = APIClient()
            api.force_authenticate(people.member)
            created = api.post(reverse("api:runs"), {"plan": planned.plan.pk}, format="json")
        assert created.status_code == 201 and created.json()["steps"] == 12 == Run.objects.get().steps

    def test_a_plan_page_runs_its_plan_and_shows_a_refusal_on_itself(self, client, people, planned,
                                                                       django_capture_on_commit_callbacks):
        client = _client(client, people.member)
        plan_url = reverse("studio:plan", args=[planned.plan.pk])
        page = client.get(plan_url).content.decode()
        assert f'action="{reverse("studio:plan-run", args=[planned.plan.pk])}"' in page
        assert '<input type="hidden" name="page" value="plan">' in page
        with django_capture_on_commit_callbacks(execute=False):
            response = client.post(reverse("studio:plan-run", args=[planned.plan.pk]), {"steps": 3, "page": "plan"})
        run = Run.objects.get()
        assert response.url == reverse("studio:run", args=[run.pk]) and run.plan_id == planned.plan.pk
        assert f'href="{reverse("studio:run", args=[run.pk])}">#{run.pk}</a>' in client.get(plan_url).content.decode()
        refused = client.post(reverse("studio:plan-run", args=[planned.plan.pk]), {"steps": 0, "page": "plan"})
        assert refused.status_code == 400 and Run.objects.count() == 1
        text = refused.content.decode()
        assert f"<h1>Plan #{planned.plan.pk}" in text, "the plan page again, not the job page"
        assert "Ensure this value is greater than or equal to 1." in text


def test_the_spec_page_charts_costs_on_the_cluster_it_was_last_planned_on(client, people, planned):
    client = _client(client, people.member)
    spec_url = reverse("studio:spec", args=[planned.spec.pk])
    assert 'analytic, ' + load_cluster_preset("cpu-host").device.name in client.get(spec_url).content.decode()
    PlanningJob.objects.filter(pk=planned.job.pk).update(cluster_preset="h100-sxm-1x8")
    page = client.get(spec_url).content.decode()
    assert 'analytic, ' + load_cluster_preset("h100-sxm-1x8").device.name in page
    asked = client.get(spec_url + "?cluster=a100-40gb-pcie-1x8").content.decode()
    assert 'analytic, ' + load_cluster_preset("a100-40gb-pcie-1x8").device.name in asked


class TestRunPage:
    def test_shows_predicted_and_observed_data_and_the_summary(self, client, people, finished_run):
        page = _client(client, people.member).get(reverse("studio:run", args=[finished_run.pk])).content.decode()
        data = json.loads(re.search(r'<script id="timeline-data" type="application/json">(.*?)</script>', page,
                                    re.S).group(1))
        assert len(data["observed"]) == finished_run.events.count() == len(data["predicted"])
        assert [event["seq"] for event in data["observed"]] == sorted(event["seq"] for event in data["observed"])
        assert 'data-finished="true"' in page
        assert "Observed per device" in page and "40.00 ms" in page and "6.2000" in page
        simulation = finished_run.plan.simulation
        for row in simulation["per_device"]:  # predicted bubble ratio per device, next to the observed 0.300
            assert f"<td class=\"num\">{row['bubble_ms'] / simulation['iteration_ms']:.3f}</td>" in page
        assert page.count('<td class="num">0.300</td>') == 2

    def test_a_running_run_polls_its_events(self, client, people, finished_run):
        Run.objects.filter(pk=finished_run.pk).update(status=JobStatus.RUNNING)
        page = _client(client, people.owner).get(reverse("studio:run", args=[finished_run.pk])).content.decode()
        assert 'data-finished="false"' in page
        assert reverse("api:run-events", args=[finished_run.pk]) in page
        assert "Observed per device" not in page


class TestApiTokenPage:
    def test_a_new_token_is_shown_once_and_stored_as_a_digest(self, client, people):
        client = _client(client, people.member)
        assert "You have no token yet" in client.get(reverse("studio:api-tokens")).content.decode()
        response = client.post(reverse("studio:api-tokens"), {"name": "laptop", "expires_in_days": 7})
        assert response.status_code == 201
        key = re.search(r"data-token>([^<]+)<", response.content.decode()).group(1)
        token = ApiToken.objects.get(user=people.member)
        assert token.name == "laptop" and key not in (token.digest, token.token_key) and key.startswith(token.token_key)
        listing = client.get(reverse("studio:api-tokens")).content.decode()
        assert "laptop" in listing and key not in listing

    def test_a_token_without_a_name_is_refused_and_not_stored(self, client, people):
        response = _client(client, people.member).post(reverse("studio:api-tokens"), {"name": "", "expires_in_days": 7})
        assert response.status_code == 400 and "This field is required" in response.content.decode()
        assert not ApiToken.objects.exists()

    def test_revoking_deletes_the_token(self, client, people):
        token, _ = token_create(user=people.member, name="ci", expires_in_days=1)
        _client(client, people.member).post(reverse("studio:api-token-revoke", args=[token.token_key]))
        assert not ApiToken.objects.exists()

    def test_another_users_token_cannot_be_revoked(self, client, people):
        token, _ = token_create(user=people.member, name="ci", expires_in_days=1)
        response = _client(client, people.outsider).post(reverse("studio:api-token-revoke", args=[token.token_key]))
        assert response.status_code == 404 and ApiToken.objects.count() == 1
