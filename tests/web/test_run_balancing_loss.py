"""A run of an MoE model that trains with a balancing loss keeps its last step's value beside the loss: on the
run row, in the API and on the run page. The run is executed by the real Celery worker (the session's, which
consumes the runs queue: running it in this process as well would race it for the row), with the real executor
ranks and the real Redis event stream."""

from dataclasses import replace

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import JobStatus, PlanningJob, Run
from adaptis_web.studio.planning.jobs import job_request_check, job_run
from adaptis_web.studio.runs.local_runs import run_create
from planner.spec.model import MoEMLP
from planner.spec.presets import load_model_preset

pytestmark = pytest.mark.django_db(transaction=True)  # the worker reads the committed rows
ENDED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


@pytest.fixture
def planned_run(people, celery_worker, wait_for):
    """``planned_run(spec)``: the spec planned with 1F1B on 2 ranks, run for 2 steps by the worker; the ended run."""
    def run_spec(spec) -> Run:
        return _planned_run(people, spec, wait_for)
    return run_spec


def _planned_run(people, spec, wait_for) -> Run:
    record = spec_create(team=people.team, owner=people.owner, spec=spec, source_filename=f"{spec.name}.json")
    request = job_request_check(spec=spec, num_devices=2, num_microbatches=2, cluster_preset="cpu-host")
    job = PlanningJob.objects.create(spec=record, created_by=people.owner, cluster_preset="cpu-host",
                                     cluster_doc=request.cluster.to_dict(), num_devices=2, num_microbatches=2,
                                     schedule="1f1b")
    run = run_create(plan=job_run(job_id=job.pk), user=people.owner, steps=2)  # queued for the worker
    run = wait_for(lambda: Run.objects.filter(pk=run.pk, status__in=ENDED).first(), timeout_s=120,
                   message=f"run {run.pk} to end")
    assert run.status == JobStatus.SUCCEEDED, run.error
    return run


def test_an_moe_run_stores_shows_and_serves_its_balancing_loss(people, client, planned_run):
    tiny = load_model_preset("tiny-llama")
    moe = MoEMLP(num_experts=4, top_k=2, expert_intermediate_size=32, aux_loss_coeff=0.01)
    layers = tuple(replace(layer, mlp=moe) if layer.kind == "decoder" else layer for layer in tiny.layers)
    run = planned_run(replace(tiny, name="tiny-moe", layers=layers))
    # balanced routing gives 1 per layer, times the coefficient: 4 layers near 0.04, never 0
    assert run.loss is not None and 0.02 < run.balancing_loss < 0.2
    api = APIClient()
    api.force_authenticate(people.owner)
    assert api.get(reverse("api:run", args=[run.pk])).json()["balancing_loss"] == run.balancing_loss
    client.force_login(people.owner)
    page = client.get(reverse("studio:run", args=[run.pk])).content.decode()
    assert 'id="balancing-loss"' in page and f"{run.balancing_loss:.5f}" in page


def test_a_run_without_a_balancing_loss_shows_none(people, client, planned_run):
    run = planned_run(load_model_preset("tiny-llama"))
    assert run.loss is not None and run.balancing_loss is None
    client.force_login(people.owner)
    assert 'id="balancing-loss"' not in client.get(reverse("studio:run", args=[run.pk])).content.decode()
