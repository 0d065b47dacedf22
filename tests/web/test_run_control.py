"""Cancelling a run (the API's 200/409/403/404 and a real worker ending real ranks), and what the run page says
about a run: its phase before the first event, and the statistic behind "observed iteration"."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest
from django.urls import reverse

from adaptis_web.studio.models import JobStatus, Run, RunEvent
from adaptis_web.studio.runs.run_control import observed_statistic, run_phase
from adaptis_web.studio.tasks import run_execute
from planner.observed import summarize
from tests.conftest import parent_of, runs_queue
from tests.web.conftest import api_as


@pytest.fixture
def queued_run(crew) -> Run:
    """A run of the owner's, queued (no worker takes it here)."""
    return Run.objects.create(plan=crew.planned.plan, created_by=crew.people.owner, world_size=2)


def _cancel(user, run_id):
    return api_as(user).post(reverse("api:run-cancel", args=[run_id]))


@pytest.mark.django_db
def test_a_queued_run_is_cancelled_at_once_and_a_second_cancel_is_a_409_naming_status(crew, queued_run):
    response = _cancel(crew.people.owner, queued_run.pk)
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["cancel_requested"]) == ("cancelled", True)
    run = Run.objects.get(pk=queued_run.pk)
    assert run.finished_at is not None and run.started_at is None
    again = _cancel(crew.people.owner, run.pk)
    assert again.status_code == 409
    assert again.json()["errors"] == [{"field": "status", "reason": "the run has already cancelled; only a queued "
                                                                    "or running run can be cancelled"}]


@pytest.mark.django_db
def test_a_finished_run_cannot_be_cancelled(crew):
    response = _cancel(crew.people.owner, crew.finished_run.pk)
    assert response.status_code == 409 and response.json()["errors"][0]["field"] == "status"
    assert Run.objects.get(pk=crew.finished_run.pk).status == JobStatus.SUCCEEDED


@pytest.mark.django_db
def test_who_may_cancel_a_running_run(crew, queued_run):
    Run.objects.filter(pk=queued_run.pk).update(status=JobStatus.RUNNING)
    for who, status in ((crew.viewer, 403), (crew.people.member, 403), (crew.people.outsider, 404)):
        response = _cancel(who, queued_run.pk)
        assert response.status_code == status, (who, response.content)
        if status == 403:
            assert response.json()["errors"][0]["field"] == "role"
    assert not Run.objects.get(pk=queued_run.pk).cancel_requested
    assert _cancel(crew.people.owner, 999_999).status_code == 404
    response = _cancel(crew.admin, queued_run.pk)  # an admin cancels anyone's run
    assert response.status_code == 200
    # running: the worker has to stop the ranks, so it stays running until it has
    assert (response.json()["status"], response.json()["cancel_requested"]) == ("running", True)


@pytest.mark.django_db
def test_a_member_cancels_their_own_run(crew):
    run = Run.objects.create(plan=crew.planned.plan, created_by=crew.people.member, world_size=2)
    assert _cancel(crew.people.member, run.pk).status_code == 200
    assert Run.objects.get(pk=run.pk).status == JobStatus.CANCELLED


@pytest.mark.django_db
def test_the_run_phase_before_and_after_the_first_event(crew, queued_run):
    run = queued_run
    assert run_phase(run=run, event_count=0) == "queued"
    run.status = JobStatus.RUNNING
    assert run_phase(run=run, event_count=0) == "starting"
    assert run_phase(run=run, event_count=3) == "running"
    run.cancel_requested = True
    assert run_phase(run=run, event_count=3) == "cancelling"
    run.status = JobStatus.CANCELLED
    assert run_phase(run=run, event_count=3) == "cancelled"


def _step_events(spans_ms: list[float]) -> list[dict]:
    """Two devices' actions in each step, steps one second apart; step s spans ``spans_ms[s]``."""
    events = []
    for step, span in enumerate(spans_ms):
        start = 1000.0 * step + 7.0
        events += [{"rank": 0, "device": 0, "action": "0F0", "stage": 0, "kind": "F", "microbatch": 0, "step": step,
                    "start_ms": start, "end_ms": start + span / 2},
                   {"rank": 1, "device": 1, "action": "1F0", "stage": 1, "kind": "F", "microbatch": 0, "step": step,
                    "start_ms": start + span / 2, "end_ms": start + span}]
    return events


def test_the_observed_statistic_is_the_median_of_the_steps_after_the_warmup_step():
    spans = [90.0, 10.0, 30.0, 20.0, 1000.0]
    summary = summarize(_step_events(spans), num_devices=2)
    assert summary["median_iteration_ms"] == pytest.approx(statistics.median(spans[1:]))
    text = observed_statistic(summary)
    assert text.startswith("median over steps 1–4 (4 steps; warm-up step 0 left out)"), text
    assert "first action's start to its last action's end" in text


def test_a_one_step_run_names_its_only_step():
    summary = summarize(_step_events([42.0]), num_devices=2)
    assert summary["median_iteration_ms"] == pytest.approx(42.0)
    assert observed_statistic(summary).startswith("step 0 alone")


@pytest.mark.django_db
def test_the_run_page_names_the_statistic_next_to_the_observed_iteration(client, crew):
    spans = [50.0, 12.0, 16.0]
    Run.objects.filter(pk=crew.finished_run.pk).update(summary=summarize(_step_events(spans), 2))
    client.force_login(crew.people.owner)
    page = client.get(reverse("studio:run", args=[crew.finished_run.pk])).content.decode()
    assert "14.00 ms" in page  # the median of steps 1 and 2
    assert "median over steps 1–2 (2 steps; warm-up step 0 left out)" in page


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (its children, theirs, ...), read from /proc."""
    parents = {int(entry.name): parent_of(int(entry.name)) for entry in Path("/proc").iterdir() if entry.name.isdigit()}
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_running_run_cancelled_mid_step_ends_its_ranks_and_keeps_its_events(
        spawn_private_worker, people, planned, wait_for):
    queue = f"cancel-{os.getpid()}"
    worker = spawn_private_worker(queue, "runner")  # its own: every process below its pool process is a rank
    run = Run.objects.create(plan=planned.plan, created_by=people.member, world_size=2, steps=50,
                             celery_task_id=f"cancel-test-{time.monotonic_ns()}")
    run_execute.apply_async(args=[run.pk], task_id=run.celery_task_id, queue=runs_queue(queue))

    def second_step_begun():  # lasting: events stay, where a look at a "running" status may come too late
        return RunEvent.objects.filter(run_id=run.pk, step__gte=1).exists()

    wait_for(second_step_begun, timeout_s=120, interval_s=0.05, message=f"the run's second step\n{worker.log_tail()}")
    ranks = [pid for pid in _descendants(worker.process.pid)  # below its prefork pool process
             if b"executor.running.worker" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(ranks) == 2, f"the worker runs the plan's 2 ranks: {ranks}"
    response = _cancel(people.member, run.pk)
    assert response.status_code == 200 and response.json()["cancel_requested"] is True
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in ranks), timeout_s=60, interval_s=0.05,
             message=f"ranks {ranks} to end after the cancel\n{worker.log_tail()}")
    run = wait_for(lambda: (row := Run.objects.get(pk=run.pk)).is_finished and row, timeout_s=30,
                   message=f"the run to be recorded\n{worker.log_tail()}")
    assert run.status == JobStatus.CANCELLED, run.error
    assert run.error == "cancelled while running: its ranks were stopped"
    kept = RunEvent.objects.filter(run=run)
    steps_seen = set(kept.values_list("step", flat=True))
    assert {0, 1} <= steps_seen and max(steps_seen) < 49, "the events so far are kept, the rest never ran"
    assert list(kept.order_by("seq").values_list("seq", flat=True)) == list(range(1, kept.count() + 1))
