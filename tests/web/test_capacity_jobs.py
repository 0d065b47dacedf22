"""Capacity jobs: the best configuration at each GPU count and what a token budget costs there, as a Celery job with
progress (the planning worker ``make run`` starts), through the API and on the job page; bad input refused naming
the field, nothing stored."""

import re

import pytest
from django.urls import reverse

from adaptis_web.studio.models import JobStatus, PlanningJob
from adaptis_web.studio.templatetags.units import decimal_count
from planner.cluster import load_cluster_preset
from planner.errors import SpecError
from planner.parallel.capacity import cluster_of, parse_gpu_counts
from planner.parallel.search import search
from planner.spec.presets import load_model_preset
from tests.web.conftest import api_as

LLAMA = load_model_preset("llama-3-8b")
TOKENS = 15 * 10**12
CAPACITY_JOB = {"mode": "capacity", "cluster_preset": "h100-sxm-1x8", "gpu_counts": [64, 128, 256],
                "token_budget": TOKENS, "seq_len": 4096, "global_batch": 1024}


@pytest.mark.parametrize("changes, field, reason", [
    ({"token_budget": None}, "token_budget", "is required for a capacity job"),
    ({"gpu_counts": [64, 0]}, "gpu_counts.1", "greater than or equal to 1"),
    ({"gpu_counts": list(range(1, 18))}, "gpu_counts", "no more than 16"),
    ({"token_budget": 0}, "token_budget", "greater than or equal to 1"),
    ({"global_batch": None}, "global_batch", "is required for a capacity job"),
    ({"tp": 512}, "tp", "between 1 and 256"),
])
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_stored(people, llama, changes, field, reason):
    response = api_as(people.member).post(reverse("api:jobs"), {"spec": llama.pk, **CAPACITY_JOB, **changes},
                                        format="json")
    assert response.status_code == 400, response.content
    errors = {error["field"]: error["reason"] for error in response.json()["errors"]}
    assert reason in errors.get(field, ""), errors
    assert not PlanningJob.objects.exists()


def test_token_counts_are_written_as_the_field_writes_them():
    assert decimal_count(15 * 10**12) == "15 T" and decimal_count(15_600_000_000_000) == "15.6 T"
    assert decimal_count(405e9) == "405 B" and decimal_count(1_234_567) == "1.23 M" and decimal_count(512) == "512"
    assert decimal_count(None) == "—"


def test_the_forms_counts_are_a_list_or_a_doubling_range():
    assert parse_gpu_counts("64, 128,256") == [64, 128, 256]
    assert parse_gpu_counts("64-16384") == [64 << step for step in range(9)]
    assert parse_gpu_counts("") == [64 << step for step in range(9)]
    for text in ("64-x", "a, b", "0-64", "128-64"):
        with pytest.raises(SpecError) as error:
            parse_gpu_counts(text)
        assert error.value.field == "gpu_counts"


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_worker_sweeps_the_counts_and_the_api_and_page_show_days_and_gpu_hours(celery_worker, client, people,
                                                                                   llama, wait_for):
    api = api_as(people.member)
    response = api.post(reverse("api:jobs"), {"spec": llama.pk, **CAPACITY_JOB, "gpu_counts": [256, 64, 128, 64]},
                        format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert (created["mode"], created["gpu_counts"], created["num_devices"]) == ("capacity", [64, 128, 256], 256)
    url = reverse("api:job", args=[created["id"]])
    body = wait_for(lambda: (lambda job: job if job["status"] in ("succeeded", "failed") else None)(
        api.get(url).json()), timeout_s=120, message="the capacity job to finish")
    assert body["status"] == JobStatus.SUCCEEDED, (body["error"], celery_worker.log_tail())
    assert body["progress"] == 1.0 and body["progress_message"].startswith("Capacity plan ready: 3 of 3 GPU counts")
    result = body["result"]
    assert [point["gpus"] for point in result["points"]] == [64, 128, 256] and result["token_budget"] == TOKENS
    for point in result["points"]:   # the hybrid search alone at that count, and the budget over its throughput
        best = search(LLAMA, cluster_of(load_cluster_preset("h100-sxm-1x8"), point["gpus"]), point["gpus"], 4096, 1024,
                      refine=False).best
        days = TOKENS / (1024 * 4096 / (best.iteration_ms / 1e3)) / 86400
        assert point["short"] == best.config.short() and point["days"] == pytest.approx(days, rel=1e-9)
        assert point["gpu_hours"] == pytest.approx(point["gpus"] * days * 24, rel=1e-9)
    assert result["fastest_gpus"] == min(result["points"], key=lambda point: point["days"])["gpus"]
    assert not PlanningJob.objects.get().plans.exists(), "a capacity job stores no plan"

    client.force_login(people.member)
    page = client.get(reverse("studio:job", args=[created["id"]])).content.decode()
    assert "Days to train against GPU-hours, by GPU count" in page and 'id="capacity-chart"' in page
    assert "15 T tokens of sequence 4096" in page
    shown = {int(gpus): float(days) for gpus, days in
             re.findall(r'data-capacity-gpus="(\d+)">.*?data-days="([0-9.]+)"', page, re.S)}
    assert shown == pytest.approx({point["gpus"]: point["days"] for point in result["points"]}, abs=1e-6)
    assert "studio/capacity.js" in page
    dashboard = client.get(reverse("studio:dashboard")).content.decode()
    assert f'href="{reverse("studio:job", args=[created["id"]])}"' in dashboard
    # where each count's step goes: its parts add up to its step
    for point in result["points"]:
        bar = re.search(rf'data-step-gpus="{point["gpus"]}">(.*?)</div>\s*<div class="amount">', page, re.S).group(1)
        seconds = [float(value) for value in re.findall(r'data-seconds="([0-9.]+)"', bar)]
        assert sum(seconds) == pytest.approx(point["predicted"]["iteration_ms"] / 1e3, abs=1e-5)

    # a count the sweep planned is planned in full as a hybrid job on the cluster grown to it; another is refused
    plan_count = reverse("studio:job-plan-count", args=[created["id"]])
    refused = client.post(plan_count, {"gpus": "96"})
    assert refused.status_code == 409 and "gpus: 96 is no GPU count this sweep planned (64, 128, 256)" in (
        refused.content.decode())
    assert PlanningJob.objects.count() == 1
    response = client.post(plan_count, {"gpus": "128"})
    hybrid = PlanningJob.objects.exclude(pk=created["id"]).get()
    assert response.status_code == 302 and response["Location"] == reverse("studio:job", args=[hybrid.pk])
    assert (hybrid.mode, hybrid.gpus, hybrid.seq_len, hybrid.global_batch) == ("hybrid", 128, 4096, 1024)
    assert (hybrid.cluster_doc["nodes"], hybrid.cluster_doc["device"]["name"]) == (16, "H100-SXM-80GB")
    body = wait_for(lambda: (lambda job: job if job["status"] in ("succeeded", "failed") else None)(
        api.get(reverse("api:job", args=[hybrid.pk])).json()), timeout_s=120, message="the count's hybrid job")
    assert body["status"] == JobStatus.SUCCEEDED, body["error"]
    assert body["result"]["best"]["parallel"]["tp"] * body["result"]["best"]["parallel"]["dp"] * (
        body["result"]["best"]["parallel"]["pp"] * body["result"]["best"]["parallel"]["cp"]) == 128
