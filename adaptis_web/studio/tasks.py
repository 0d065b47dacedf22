"""Celery tasks: take an id and call the service that does the work; the service records progress and
failure on the row, so a task never ends with an exception nobody reads. Services enqueue these tasks on
commit (``services.queueing``)."""

from celery import shared_task

from adaptis_web.studio.services import jobs, profiling, runs


@shared_task(name="studio.plan_job_run")
def plan_job_run(job_id: int) -> None:
    jobs.job_run(job_id=job_id)


@shared_task(name="studio.run_execute")
def run_execute(run_id: int) -> None:
    runs.run_execute(run_id=run_id)


@shared_task(name="studio.profile_measure")
def profile_measure(profile_id: int) -> None:
    profiling.profile_measure(profile_id=profile_id)
