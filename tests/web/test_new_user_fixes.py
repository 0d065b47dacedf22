"""What a new user hit on the job page: a Run button for a plan that cannot run here, "GB" for GiB, bubble columns
without units, and a cancelled search whose kept plan was missing from its candidates."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import PlanningJob
from adaptis_web.studio.planning.jobs import job_request_check, job_run
from adaptis_web.studio.templatetags.units import binary_bytes
from planner.cluster import load_cluster_preset
from planner.cost import analytic_profile
from planner.search import search_plan
from planner.service import kept_plan_first
from planner.spec.presets import load_model_preset


def _planned_job(people, preset: str, cluster: str, devices: int, **fields) -> PlanningJob:
    spec = load_model_preset(preset)
    record = spec_create(team=people.team, owner=people.owner, spec=spec)
    request = job_request_check(spec=spec, num_devices=devices, num_microbatches=8, cluster_preset=cluster,
                                schedule=fields.get("schedule", "1f1b"))
    job = PlanningJob.objects.create(spec=record, created_by=people.owner, cluster_preset=cluster,
                                     cluster_doc=request.cluster.to_dict(), num_devices=devices, num_microbatches=8,
                                     schedule=request.schedule, **{k: v for k, v in fields.items() if k != "schedule"})
    job_run(job_id=job.pk)
    job.refresh_from_db()
    return job


@pytest.mark.django_db
def test_an_8_device_plan_shows_why_it_cannot_run_here_instead_of_the_button(client, people, settings):
    settings.CPU_RUN_MAX_RANKS = 4
    job = _planned_job(people, "llama-3-8b", "h100-sxm-1x8", 8)
    client.force_login(people.member)
    page = client.get(reverse("studio:job", args=[job.pk])).content.decode()
    assert 'id="run-on-cpu"' not in page
    reason = "uses 8 devices; a CPU run starts at most 4 ranks (CPU_RUN_MAX_RANKS)"
    assert f"<strong>Cannot run here.</strong> This plan {reason}." in page
    # the same check the run service makes when a run is asked for anyway
    response = APIClient()
    response.force_authenticate(people.member)
    refused = response.post(reverse("api:runs"), {"plan": job.plans.get().pk}, format="json")
    assert refused.status_code == 400 and refused.json()["errors"] == [{"field": "plan", "reason": reason}]


@pytest.mark.django_db
def test_a_plan_that_can_run_here_offers_the_button(client, people):
    job = _planned_job(people, "tiny-llama", "cpu-host", 2)
    client.force_login(people.member)
    page = client.get(reverse("studio:job", args=[job.pk])).content.decode()
    assert 'id="run-on-cpu"' in page and 'id="run-refusal"' not in page


def test_memory_is_named_in_binary_units():
    assert binary_bytes(48 * 2**30) == "48.0 GiB"
    assert binary_bytes(512 * 2**20) == "512.0 MiB"
    assert binary_bytes(1536) == "1.5 KiB"
    assert binary_bytes(900) == "900 B"
    assert binary_bytes(None) == "—"


@pytest.mark.django_db
def test_the_job_page_says_gib_and_puts_units_on_the_bubble_columns(client, people):
    job = _planned_job(people, "tiny-llama", "cpu-host", 2)
    PlanningJob.objects.filter(pk=job.pk).update(schedule="adaptis", memory_limit_bytes=48 * 2**30)
    client.force_login(people.member)
    page = client.get(reverse("studio:job", args=[job.pk])).content.decode()
    assert "memory limit 48.0 GiB per device" in page and " GB" not in page
    for phase, column in (("before", "Warm-up ms"), ("in", "Steady ms"), ("after", "Cool-down ms")):
        assert f'<th class="num" title="bubble {phase} the steady phase">{column}</th>' in page


def test_a_kept_plan_missing_from_the_candidates_is_listed_first():
    candidates = [{"rank": 1, "iteration_ms": 12.0, "num_stages": 4, "layout": "A", "schedule": "s", "origin": "o"},
                  {"rank": 2, "iteration_ms": 13.0, "num_stages": 4, "layout": "B", "schedule": "s", "origin": "o"}]

    class Kept:
        stages = [object()] * 2
        predicted = {"iteration_ms": 11.0}
        meta = {"layout": "K", "schedule": "baseline zb-h1", "origin": "baseline zb-h1"}

    rows = kept_plan_first(candidates, Kept())
    assert [(row["rank"], row["layout"], row.get("kept", False)) for row in rows] == [
        (1, "K", True), (2, "A", False), (3, "B", False)]
    Kept.meta = {**Kept.meta, "layout": "B"}
    Kept.predicted = {"iteration_ms": 13.0}
    assert [(row["layout"], row.get("kept", False)) for row in kept_plan_first(candidates, Kept())] == [
        ("B", True), ("A", False)]


def test_a_cancelled_search_lists_the_plan_it_kept_first():
    cluster = load_cluster_preset("h100-sxm-1x8")
    profile = analytic_profile(load_model_preset("gemma-2-9b"), cluster)
    calls = {"count": 0}

    def cancel_soon() -> bool:
        calls["count"] += 1
        return calls["count"] > 3

    result = search_plan(profile, 8, 32, cluster=cluster, cancel=cancel_soon, time_budget_s=60)
    assert result.cancelled
    rows = kept_plan_first(result.candidates, result.plan)
    assert rows[0]["kept"] and rows[0]["layout"] == result.plan.meta["layout"]
    assert rows[0]["iteration_ms"] == pytest.approx(result.plan.predicted["iteration_ms"])
    assert [row["rank"] for row in rows] == list(range(1, len(rows) + 1))
    assert not any(row.get("kept") for row in rows[1:])
