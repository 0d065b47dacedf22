"""Celery tasks: take an id and call the service that does the work; the service records progress and
failure on the row, so a task never ends with an exception nobody reads. Services enqueue these tasks on
commit, by name (``work.queueing``), and never import this module.

It stays at the app's top (``adaptis_web.studio.tasks``), where the Celery app's ``autodiscover_tasks()`` looks for
an installed app's tasks, and above the domains whose services it calls."""

from celery import shared_task

from adaptis_web.studio.planning import jobs
from adaptis_web.studio.runs import local_runs, profiling
from adaptis_web.studio.work.queueing import PLAN_JOB_TASK, PROFILE_TASK, RUN_TASK


@shared_task(name=PLAN_JOB_TASK)
def plan_job_run(job_id: int) -> None:
    jobs.job_run(job_id=job_id)


@shared_task(name=RUN_TASK)
def run_execute(run_id: int) -> None:
    local_runs.run_execute(run_id=run_id)


@shared_task(name=PROFILE_TASK)
def profile_measure(profile_id: int) -> None:
    profiling.profile_measure(profile_id=profile_id)
