"""Work whose worker died does not stay 'running' forever: heartbeats while it runs, a reaper for the silent.

The last test kills a real worker mid-search with SIGKILL (nothing in it can record the death) and checks
that the reaper fails the job, and that the same reaper left it alone while the worker was alive.
"""

import os
import signal
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from adaptis_web.studio.models import JobStatus, PlanningJob, Run
from adaptis_web.studio.tasks import plan_job_run
from adaptis_web.studio.work.liveness import heartbeat, reap_stale_work
from planner.cluster import load_cluster_preset


def _job(people, planned, **fields) -> PlanningJob:
    values = dict(spec=planned.spec, created_by=people.owner, cluster_preset="cpu-host",
                  cluster_doc=planned.job.cluster_doc, num_devices=2, num_microbatches=4, schedule="1f1b")
    values.update(fields)
    return PlanningJob.objects.create(**values)


@pytest.mark.django_db(transaction=True)
def test_heartbeat_stamps_the_running_row_from_its_own_thread_until_the_block_ends(people, planned):
    job = _job(people, planned, status=JobStatus.RUNNING, started_at=timezone.now())
    stamps = []
    with heartbeat(PlanningJob, job.pk, interval_s=0.05):
        for _ in range(4):
            time.sleep(0.12)
            stamps.append(PlanningJob.objects.get(pk=job.pk).heartbeat_at)
    assert None not in stamps and stamps == sorted(stamps) and len(set(stamps)) >= 3, stamps
    last = PlanningJob.objects.get(pk=job.pk).heartbeat_at
    time.sleep(0.2)
    assert PlanningJob.objects.get(pk=job.pk).heartbeat_at == last, "no beats after the block"


def test_the_reaper_fails_only_running_work_that_has_gone_silent(people, planned):
    old, fresh = timezone.now() - timedelta(seconds=600), timezone.now()
    silent = _job(people, planned, status=JobStatus.RUNNING, started_at=old, heartbeat_at=old)
    never_beat = _job(people, planned, status=JobStatus.RUNNING, started_at=old)
    alive = _job(people, planned, status=JobStatus.RUNNING, started_at=old, heartbeat_at=fresh)
    just_started = _job(people, planned, status=JobStatus.RUNNING, started_at=fresh)
    queued = _job(people, planned, status=JobStatus.QUEUED)
    done = _job(people, planned, status=JobStatus.SUCCEEDED, started_at=old, heartbeat_at=old)
    silent_run = Run.objects.create(plan=planned.plan, created_by=people.owner, world_size=2,
                                    status=JobStatus.RUNNING, started_at=old, heartbeat_at=old)
    live_run = Run.objects.create(plan=planned.plan, created_by=people.owner, world_size=2,
                                  status=JobStatus.RUNNING, started_at=old, heartbeat_at=fresh)

    reaped = reap_stale_work(stale_after_s=120)

    assert sorted(reaped["PlanningJob"]) == sorted([silent.pk, never_beat.pk])
    assert reaped["Run"] == [silent_run.pk]
    for row in (silent, never_beat, silent_run):
        row.refresh_from_db()
        assert row.status == JobStatus.FAILED and row.error.startswith("worker lost") and row.finished_at
    for row, status in ((alive, JobStatus.RUNNING), (just_started, JobStatus.RUNNING), (queued, JobStatus.QUEUED),
                        (done, JobStatus.SUCCEEDED), (live_run, JobStatus.RUNNING)):
        row.refresh_from_db()
        assert row.status == status and not row.error
    assert reap_stale_work(stale_after_s=120) == {}, "nothing left to reap"


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_s_search_is_reaped_and_a_live_one_is_not(people, planned, spawn_private_worker, wait_for):
    queue = f"liveness-{os.getpid()}"
    worker = spawn_private_worker(queue, WORK_HEARTBEAT_S="1")
    cluster = load_cluster_preset("h100-sxm-16x8")
    job = _job(people, planned, cluster_preset="h100-sxm-16x8", cluster_doc=cluster.to_dict(), num_devices=32,
               num_microbatches=128, schedule="adaptis", partition="", time_budget_s=120)
    # a realistic spec so the search runs for tens of seconds
    from adaptis_web.studio.catalog.specs import spec_create
    from planner.spec.presets import load_model_preset

    record = spec_create(team=people.team, owner=people.owner, spec=load_model_preset("nemotron-h-8b"),
                         source_filename="nemotron-h-8b.json")
    PlanningJob.objects.filter(pk=job.pk).update(spec=record)
    plan_job_run.apply_async(args=[job.pk], queue=queue)

    wait_for(lambda: PlanningJob.objects.get(pk=job.pk).status != JobStatus.QUEUED, timeout_s=30,
             message=f"the worker to start the search\n{worker.log_tail()}")
    time.sleep(4)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING, job.error
    assert reap_stale_work(stale_after_s=3) == {}, "a live worker's beats keep its job out of the reaper"
    assert PlanningJob.objects.get(pk=job.pk).status == JobStatus.RUNNING

    os.killpg(worker.process.pid, signal.SIGKILL)
    worker.process.wait(timeout=10)
    time.sleep(4)
    reaped = reap_stale_work(stale_after_s=3)
    assert reaped == {"PlanningJob": [job.pk]}
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "worker lost" in job.error and job.progress_message == "Worker lost"
