"""Closed loop in the Studio: a finished run's timings recalibrate its plan's profile and a new job plans with it.

The observed events here are an independent simulation: the plan's timeline on a profile whose layers were
slowed by hand (forward x3, backward x5 on stage 0, x2 elsewhere) and a cluster whose messages cost each end
``TRUE_OVERHEAD_US`` (the job's preset charges 250 us), so the calibrated profile and the measured overhead
must predict the run they came from, and the first prediction must have been far off.
"""

from dataclasses import replace

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.models import JobStatus, PlanningJob, Run, RunEvent
from adaptis_web.studio.planning.jobs import job_run
from adaptis_web.studio.runs.calibration import job_replan_from_run
from planner.calibrate import with_message_overhead
from planner.cluster import load_cluster
from planner.errors import SpecError
from planner.plan import load_plan
from planner.profile import load_profile
from planner.simulator import simulate

SLOWDOWN = {0: {"forward": 3.0, "backward_input": 5.0, "backward_weight": 5.0}}
DEFAULT_SLOWDOWN = {"forward": 2.0, "backward_input": 2.0, "backward_weight": 2.0}
TRUE_OVERHEAD_US = 900.0


def _slowed_profile(plan_row):
    """The plan's profile with every layer slowed by its stage's factors (the 'real' hardware)."""
    plan, profile = load_plan(plan_row.plan_doc), load_profile(plan_row.profile_doc)
    layers = list(profile.layers)
    for index, stage in enumerate(plan.stages):
        factors = SLOWDOWN.get(index, DEFAULT_SLOWDOWN)
        for layer in stage.layers:
            layers[layer] = replace(layers[layer], **{part: getattr(layers[layer], part) * factor
                                                      for part, factor in factors.items()})
    return replace(profile, layers=tuple(layers))


@pytest.fixture
def observed_run(people, planned) -> Run:
    """A succeeded run whose events are the simulated timeline of the plan on the slowed profile."""
    plan_row = planned.plan
    real_cluster = with_message_overhead(load_cluster(planned.job.cluster_doc), TRUE_OVERHEAD_US)
    truth = simulate(load_plan(plan_row.plan_doc), _slowed_profile(plan_row), real_cluster)
    run = Run.objects.create(plan=plan_row, created_by=people.owner, status=JobStatus.SUCCEEDED, world_size=2,
                             executed_spec=planned.spec.doc,
                             summary={"iteration_ms": truth.iteration_ms, "median_iteration_ms": truth.iteration_ms})
    timeline = truth.to_dict()["timeline"]
    RunEvent.objects.bulk_create([
        RunEvent(run=run, seq=seq, rank=entry["device"], device=entry["device"], action=entry["action"],
                 stage=entry["stage"], kind=entry["type"], microbatch=entry["microbatch"], step=0,
                 start_ms=entry["start_ms"], end_ms=entry["end_ms"])
        for seq, entry in enumerate(timeline, start=1)])
    return run


def test_replanning_from_a_run_predicts_that_run_and_plans_with_the_calibrated_profile(people, planned,
                                                                                         observed_run):
    observed = observed_run.summary["iteration_ms"]
    job = job_replan_from_run(run=observed_run, user=people.member)

    calibration = job.calibration
    assert job.status == JobStatus.QUEUED and job.calibrated_from_id == observed_run.pk
    assert calibration["observed_iteration_ms"] == pytest.approx(observed)
    assert calibration["predicted_before_ms"] == pytest.approx(planned.plan.iteration_ms)
    assert abs(calibration["predicted_before_ms"] - observed) > 0.3 * observed, "the analytic guess was far off"
    # the compute is recalibrated exactly, and the time between actions gives the overhead exactly
    slowed_preset = simulate(load_plan(planned.plan.plan_doc), _slowed_profile(planned.plan),
                             load_cluster(planned.job.cluster_doc)).iteration_ms
    assert calibration["predicted_compute_calibrated_ms"] == pytest.approx(slowed_preset, rel=1e-9)
    assert calibration["message_overhead_us"] == pytest.approx(TRUE_OVERHEAD_US, rel=1e-9)
    assert calibration["predicted_after_ms"] == pytest.approx(observed, rel=1e-9)
    assert (job.schedule, job.num_devices, job.num_microbatches) == (
        planned.job.schedule, planned.job.num_devices, planned.job.num_microbatches)
    job_cluster = load_cluster(job.cluster_doc)
    assert job.cluster_preset == "" and job_cluster.name == load_cluster(planned.job.cluster_doc).name
    assert job_cluster.intra_node.overhead_us == calibration["message_overhead_us"]

    new_plan = job_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    expected = _slowed_profile(planned.plan)
    stored = load_profile(new_plan.profile_doc)
    assert stored.source == "calibrated"
    for got, want in zip(stored.layers, expected.layers):
        for part in ("forward", "backward_input", "backward_weight"):
            assert getattr(got, part) == pytest.approx(getattr(want, part), rel=1e-9)
    assert new_plan.iteration_ms == pytest.approx(
        simulate(load_plan(new_plan.plan_doc), expected, job_cluster).iteration_ms, rel=1e-9)


def test_replanning_keeps_the_cluster_and_says_why_when_the_run_shows_no_time_between_messages(people, planned,
                                                                                              observed_run):
    observed_run.events.exclude(seq=1).delete()   # one action: no pair of actions to measure the overhead on
    job = job_replan_from_run(run=observed_run, user=people.member)
    assert job.calibration["message_overhead_us"] is None
    assert job.calibration["message_overhead_note"].startswith("the run's timings hold no consecutive actions")
    assert job.cluster_doc == planned.job.cluster_doc and job.cluster_preset == planned.job.cluster_preset
    assert job.calibration["predicted_after_ms"] == job.calibration["predicted_compute_calibrated_ms"]


def test_the_runs_warm_up_steps_are_left_out(people, planned, observed_run):
    """A first step ten times slower, counted as warm-up by the run's summary, changes nothing."""
    warm = list(observed_run.events.order_by("seq"))
    RunEvent.objects.filter(run=observed_run).update(step=1)
    RunEvent.objects.bulk_create([
        RunEvent(run=observed_run, seq=len(warm) + seq, rank=event.rank, device=event.device, action=event.action,
                 stage=event.stage, kind=event.kind, microbatch=event.microbatch, step=0,
                 start_ms=event.start_ms * 10 - 1e6, end_ms=event.end_ms * 10 - 1e6)
        for seq, event in enumerate(warm, start=1)])
    Run.objects.filter(pk=observed_run.pk).update(summary={**observed_run.summary, "warmup_steps": 1})
    observed_run.refresh_from_db()
    job = job_replan_from_run(run=observed_run, user=people.member)
    assert job.calibration["observed_actions"] == len(warm)
    assert job.calibration["message_overhead_us"] == pytest.approx(TRUE_OVERHEAD_US, rel=1e-9)
    for got, want in zip(load_profile(job.profile_doc).layers, _slowed_profile(planned.plan).layers):
        assert got.forward == pytest.approx(want.forward, rel=1e-9)


def test_a_run_that_has_not_succeeded_cannot_calibrate_and_nothing_is_stored(people, planned, observed_run):
    Run.objects.filter(pk=observed_run.pk).update(status=JobStatus.FAILED)
    observed_run.refresh_from_db()
    jobs_before = PlanningJob.objects.count()
    with pytest.raises(SpecError) as raised:
        job_replan_from_run(run=observed_run, user=people.owner)
    assert raised.value.field == "run" and "failed" in raised.value.reason
    assert PlanningJob.objects.count() == jobs_before


def test_the_api_replans_from_a_run_and_names_the_field_when_it_cannot(people, planned, observed_run):
    client = APIClient()
    client.force_authenticate(people.member)
    response = client.post(reverse("api:run-replan", args=[observed_run.pk]))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["calibrated_from"] == observed_run.pk and body["status"] == "queued"
    assert body["calibration"]["predicted_after_ms"] == pytest.approx(observed_run.summary["iteration_ms"])
    assert body["calibration"]["message_overhead_us"] == pytest.approx(TRUE_OVERHEAD_US)

    queued = Run.objects.create(plan=planned.plan, created_by=people.owner, world_size=2)
    jobs_before = PlanningJob.objects.count()
    response = client.post(reverse("api:run-replan", args=[queued.pk]))
    assert response.status_code == 409  # the run's state refuses it, not the request
    [error] = response.json()["errors"]
    assert error["field"] == "run" and "queued" in error["reason"]
    assert PlanningJob.objects.count() == jobs_before

    outsider = APIClient()
    outsider.force_authenticate(people.outsider)
    assert outsider.post(reverse("api:run-replan", args=[observed_run.pk])).status_code == 404


def test_the_run_page_offers_replanning_and_the_new_job_page_explains_the_calibration(client, people, planned,
                                                                                      observed_run):
    client.force_login(people.owner)
    page = client.get(reverse("studio:run", args=[observed_run.pk])).content.decode()
    assert 'id="replan-button"' in page
    response = client.post(reverse("studio:run-replan", args=[observed_run.pk]))
    job = PlanningJob.objects.get(calibrated_from=observed_run)
    assert response.status_code == 302 and response["Location"] == reverse("studio:job", args=[job.pk])
    job_run(job_id=job.pk)
    page = client.get(reverse("studio:job", args=[job.pk])).content.decode()
    assert 'id="calibration-note"' in page and f"run #{observed_run.pk}" in page
    assert f"{job.calibration['predicted_after_ms']:.2f} ms</strong> after" in page
    assert f"<strong>{job.calibration['message_overhead_us']:.0f} µs</strong> on each end" in page
    run_page = client.get(reverse("studio:run", args=[observed_run.pk])).content.decode()
    assert f"job #{job.pk}" in run_page


def test_the_run_page_shows_why_a_replan_is_refused(client, people, planned):
    running = Run.objects.create(plan=planned.plan, created_by=people.owner, world_size=2,
                                 status=JobStatus.RUNNING)
    client.force_login(people.owner)
    response = client.post(reverse("studio:run-replan", args=[running.pk]))
    assert response.status_code == 409
    assert "Cannot re-plan from this run." in response.content.decode()
    assert "only a succeeded run" in response.content.decode()
    assert not PlanningJob.objects.filter(calibrated_from=running).exists()
