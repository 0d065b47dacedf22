"""Planning jobs: check a request, create the job (and its spec) atomically, and do the planning work.

``job_run`` is what the Celery task ``plan_job_run`` calls: analytic profile of the spec on the job's
cluster → baseline plan → validation → simulation (with the timeline) → a stored Plan. Progress and the
final error are written to the job row as it goes; the web pages only read them.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from adaptis_web.studio.models import JobStatus, ModelSpecRecord, Plan, PlanningJob, Team
from adaptis_web.studio.services.queueing import enqueue_on_commit
from adaptis_web.studio.services.specs import prefixed_error, spec_check_team, spec_create
from planner.baselines import BASELINE_SCHEDULES, PARTITIONS, build_baseline
from planner.cluster import ClusterSpec, load_cluster, load_cluster_preset, preset_names
from planner.cost import analytic_profile
from planner.errors import PlanError, SpecError
from planner.layout import layer_codes_from_spec, plan_layout_string, schedule_description
from planner.scheduling import chunks_per_device
from planner.simulator import simulate
from planner.spec.model import ModelSpec, load_model_spec
from planner.validate import validate_plan

logger = logging.getLogger(__name__)

DEFAULT_SCHEDULE = "1f1b"
DEFAULT_PARTITION = "uniform"
MAX_MICROBATCHES = 1024
CHUNKS = 2  # model chunks per device where the schedule lets us choose (interleaved 1F1B)


@dataclass(frozen=True)
class JobRequest:
    """Checked planning parameters; ``cluster_preset`` is empty for a custom cluster."""

    cluster_preset: str
    cluster: ClusterSpec
    num_devices: int
    num_microbatches: int
    schedule: str
    partition: str = DEFAULT_PARTITION


def _resolve_cluster(cluster_preset: str, cluster_doc: dict | None, cluster_field: str) -> ClusterSpec:
    if cluster_preset and cluster_doc is not None:
        raise SpecError(cluster_field, "give either a cluster preset or a custom cluster, not both")
    if cluster_doc is not None:
        try:
            return load_cluster(cluster_doc)
        except SpecError as error:
            raise prefixed_error(error, cluster_field) from None
    if not cluster_preset:
        raise SpecError("cluster_preset", f"is required (one of {', '.join(preset_names())}) "
                                          "unless a custom cluster is given")
    if cluster_preset not in preset_names():
        raise SpecError("cluster_preset", f"unknown preset {cluster_preset!r}; known: {', '.join(preset_names())}")
    return load_cluster_preset(cluster_preset)


def job_request_check(*, spec: ModelSpec, num_devices: int, num_microbatches: int, cluster_preset: str = "",
                      cluster_doc: dict | None = None, schedule: str = DEFAULT_SCHEDULE,
                      partition: str = DEFAULT_PARTITION, cluster_field: str = "cluster") -> JobRequest:
    """Everything about a planning request that can be checked before queueing it; SpecError otherwise."""
    if schedule not in BASELINE_SCHEDULES:
        raise SpecError("schedule", f"must be one of {', '.join(BASELINE_SCHEDULES)}; got {schedule!r}")
    if partition not in PARTITIONS:
        raise SpecError("partition", f"must be one of {', '.join(PARTITIONS)}; got {partition!r}")
    cluster = _resolve_cluster(cluster_preset, cluster_doc, cluster_field)
    if not 1 <= num_devices <= cluster.num_devices:
        raise SpecError("num_devices", f"must be between 1 and the cluster's {cluster.num_devices} devices "
                                       f"({cluster.name}); got {num_devices}")
    stages = num_devices * chunks_per_device(schedule, CHUNKS)
    if stages > spec.num_layers:
        raise SpecError("num_devices", f"{schedule} on {num_devices} devices needs {stages} stages but "
                                       f"{spec.name!r} has only {spec.num_layers} layers")
    if not 1 <= num_microbatches <= MAX_MICROBATCHES:
        raise SpecError("num_microbatches", f"must be between 1 and {MAX_MICROBATCHES}; got {num_microbatches}")
    return JobRequest(cluster_preset=cluster_preset if cluster_doc is None else "", cluster=cluster,
                      num_devices=num_devices, num_microbatches=num_microbatches, schedule=schedule,
                      partition=partition)


def job_create(*, spec_record: ModelSpecRecord, user: AbstractBaseUser, request: JobRequest) -> PlanningJob:
    """Create a queued job for a stored spec; the planning task is enqueued when the transaction commits."""
    from adaptis_web.studio.tasks import plan_job_run  # tasks import services: resolve the cycle at call time

    spec_check_team(team=spec_record.team, user=user)
    job = PlanningJob.objects.create(
        spec=spec_record, created_by=user, cluster_preset=request.cluster_preset,
        cluster_doc=request.cluster.to_dict(), num_devices=request.num_devices,
        num_microbatches=request.num_microbatches, schedule=request.schedule, partition=request.partition,
        progress_message="Waiting for a worker", celery_task_id=str(uuid.uuid4()))
    enqueue_on_commit(plan_job_run, row=job)
    return job


@transaction.atomic
def spec_create_with_job(*, team: Team, user: AbstractBaseUser, spec: ModelSpec, source_filename: str,
                         request: JobRequest) -> PlanningJob:
    """The upload flow: the spec record and its first job are stored together or not at all."""
    spec_record = spec_create(team=team, owner=user, spec=spec, source_filename=source_filename)
    return job_create(spec_record=spec_record, user=user, request=request)


def _job_progress(job_id: int, fraction: float, message: str) -> None:
    PlanningJob.objects.filter(pk=job_id).update(progress=fraction, progress_message=message)


def job_fail(*, job_id: int, error: str) -> None:
    PlanningJob.objects.filter(pk=job_id).update(status=JobStatus.FAILED, error=error, finished_at=timezone.now(),
                                                 progress_message="Failed")


def _plan_job(job: PlanningJob) -> Plan:
    spec = load_model_spec(job.spec.doc)
    cluster = load_cluster(job.cluster_doc)
    _job_progress(job.pk, 0.15, f"Profiling {spec.num_layers} layers analytically on {cluster.device.name}")
    profile = analytic_profile(spec, cluster)
    _job_progress(job.pk, 0.4, f"Building the {job.schedule} plan ({job.partition} partition) for "
                               f"{job.num_devices} devices and {job.num_microbatches} micro-batches")
    plan = build_baseline(job.schedule, profile, job.num_devices, job.num_microbatches, cluster=cluster,
                          partition=job.partition, chunks=CHUNKS)
    _job_progress(job.pk, 0.6, "Validating partition, placement and schedule")
    validate_plan(plan, spec.num_layers)
    _job_progress(job.pk, 0.75, f"Simulating {plan.num_actions()} actions")
    simulation = simulate(plan, profile, cluster).to_dict()
    _job_progress(job.pk, 0.9, "Storing the plan")
    with transaction.atomic():
        stored = Plan.objects.create(
            job=job, strategy=plan.strategy, layout=plan_layout_string(plan, layer_codes_from_spec(spec)),
            schedule_summary=schedule_description(plan), plan_doc=plan.to_dict(), simulation=simulation,
            profile_doc=profile.to_dict(), iteration_ms=simulation["iteration_ms"],
            bubble_ratio=simulation["bubble_ratio"])
        PlanningJob.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, progress=1.0,
                                                     progress_message="Plan ready", finished_at=timezone.now())
    return stored


def job_run(*, job_id: int) -> Plan | None:
    """Plan a queued job (the Celery task's body). Failures end on the job row, never as a lost exception."""
    claimed = PlanningJob.objects.filter(pk=job_id, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING, started_at=timezone.now(), progress=0.05,
        progress_message="Loading the model spec and cluster")
    if not claimed:  # deleted, or already taken by a redelivered message
        logger.warning("planning job %s is not queued; skipping", job_id)
        return None
    job = PlanningJob.objects.select_related("spec").get(pk=job_id)
    try:
        return _plan_job(job)
    except (SpecError, PlanError) as error:
        job_fail(job_id=job_id, error=str(error))
    except Exception as error:
        logger.exception("planning job %s failed", job_id)
        job_fail(job_id=job_id, error=f"internal error: {type(error).__name__}: {error}")
    return None
