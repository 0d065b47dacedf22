"""The warden (``manage.py watch_work``), a process apart from the workers: it fails the job of a worker killed
with SIGKILL although no worker ever comes back, and it re-sends queued work whose message the broker lost, which
a real worker then runs."""

import os
import signal
import subprocess
import time
import uuid
from datetime import timedelta

import pytest
from celery import current_app
from django.utils import timezone

from adaptis_web.processes import command
from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import JobStatus, PlanningJob
from adaptis_web.studio.work.broker import pending_task_ids
from adaptis_web.studio.work.liveness import requeue_lost_work
from planner.cluster import load_cluster_preset
from planner.spec.presets import load_model_preset
from tests.conftest import REPO_ROOT, service_env

pytestmark = pytest.mark.django_db(transaction=True)


def _job(people, planned, **fields) -> PlanningJob:
    values = dict(spec=planned.spec, created_by=people.owner, cluster_preset="cpu-host",
                  cluster_doc=planned.job.cluster_doc, num_devices=2, num_microbatches=4, schedule="1f1b",
                  celery_task_id=str(uuid.uuid4()))
    values.update(fields)
    return PlanningJob.objects.create(**values)


@pytest.fixture
def spawn_warden(tmp_path):
    started = []

    def spawn(queue: str, **env: str) -> subprocess.Popen:
        log = open(tmp_path / f"warden-{len(started)}.log", "wb")
        environment = service_env(queue, **env)
        process = subprocess.Popen(command("warden", environment).argv, cwd=REPO_ROOT, env=environment, stdout=log,
                                   stderr=subprocess.STDOUT)  # as make run starts it (adaptis_web/processes.py)
        started.append((process, log))
        return process

    yield spawn
    for process, log in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
        log.close()


def test_the_warden_fails_a_killed_worker_s_job_with_no_worker_left(people, planned, spawn_private_worker,
                                                                     spawn_warden, wait_for):
    queue = f"warden-{os.getpid()}"
    heartbeat_s, stale_after_s, interval_s = 1, 3, 1
    worker = spawn_private_worker(queue, WORK_HEARTBEAT_S=str(heartbeat_s))
    record = spec_create(team=people.team, owner=people.owner, spec=load_model_preset("nemotron-h-8b"),
                         source_filename="nemotron-h-8b.json")
    cluster = load_cluster_preset("h100-sxm-16x8")
    job = _job(people, planned, spec=record, cluster_preset="h100-sxm-16x8", cluster_doc=cluster.to_dict(),
               num_devices=32, num_microbatches=128, schedule="adaptis", partition="", time_budget_s=120)
    current_app.send_task("studio.plan_job_run", args=[job.pk], task_id=job.celery_task_id, queue=queue)
    warden = spawn_warden(queue, WORK_HEARTBEAT_S=str(heartbeat_s), WORK_STALE_AFTER_S=str(stale_after_s),
                          WORK_WATCH_INTERVAL_S=str(interval_s))
    wait_for(lambda: PlanningJob.objects.get(pk=job.pk).started_at, timeout_s=30,  # stays set, unlike a status
             message=f"the worker to start the search\n{worker.log_tail()}")
    time.sleep(stale_after_s + 2 * interval_s)
    assert PlanningJob.objects.get(pk=job.pk).status == JobStatus.RUNNING, "a live worker's job is left alone"

    os.killpg(worker.process.pid, signal.SIGKILL)
    worker.process.wait(timeout=10)
    wait_for(lambda: PlanningJob.objects.get(pk=job.pk).status == JobStatus.FAILED, timeout_s=60,
             message="the warden to fail the dead worker's job")
    job.refresh_from_db()
    assert "worker lost" in job.error and job.progress_message == "Worker lost"
    assert job.finished_at - job.heartbeat_at > timedelta(seconds=stale_after_s), "failed for its silence, not before"
    assert warden.poll() is None, "the warden keeps watching"


def test_pending_task_ids_sees_a_waiting_message_and_not_an_unsent_one():
    queue = f"pending-{os.getpid()}"
    sent = current_app.send_task("studio.plan_job_run", args=[0], queue=queue)
    try:
        pending = pending_task_ids([queue])
        assert sent.id in pending and str(uuid.uuid4()) not in pending
    finally:
        with current_app.connection_for_write() as connection:
            connection.default_channel.client.delete(queue)


def test_lost_queued_work_is_re_sent_and_run_by_a_real_worker(people, planned, celery_worker, wait_for):
    old = timezone.now() - timedelta(seconds=120)
    lost = _job(people, planned)  # queued, but its message never reached the broker (as after a Redis restart)
    PlanningJob.objects.filter(pk=lost.pk).update(created_at=old)
    recent = _job(people, planned)  # within the grace period: its message may still be on its way
    finished = _job(people, planned, status=JobStatus.SUCCEEDED)
    PlanningJob.objects.filter(pk=finished.pk).update(created_at=old)

    assert requeue_lost_work(grace_s=30) == {"PlanningJob": [lost.pk]}
    wait_for(lambda: PlanningJob.objects.get(pk=lost.pk).status == JobStatus.SUCCEEDED, timeout_s=60,
             message=f"the re-sent job to run\n{celery_worker.log_tail()}")
    assert PlanningJob.objects.get(pk=recent.pk).status == JobStatus.QUEUED
