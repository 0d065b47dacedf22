"""Planning jobs: check a request, create the job (and its spec) atomically, do the planning work, cancel.

``job_run`` is what the Celery task ``plan_job_run`` calls: analytic profile of the spec on the job's
cluster, then ``planner.service.plan_pipeline_job``: either one baseline plan (``schedule`` is a baseline) or the
AdaPtis search (``schedule="adaptis"``), which yields its best plan and every baseline it was compared with; each
plan is validated and simulated, and stored. A hybrid job
(``mode="hybrid"``, ``planning.hybrid``) searches the whole training job's parallel configuration instead.
Progress, the final error and the outcome are written to the job row as it goes; the web pages only read them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from adaptis_web.studio.accounts.roles import role_require_own_or_admin
from adaptis_web.studio.catalog.clusters import cluster_resolve
from adaptis_web.studio.catalog.specs import spec_check_team, spec_create, spec_for_shape
from adaptis_web.studio.common.refusals import Conflict
from adaptis_web.studio.models import ClusterRecord, JobMode, JobStatus, ModelSpecRecord, Plan, PlanningJob, Run, Team
from adaptis_web.studio.planning import capacity, hybrid, progress
from adaptis_web.studio.planning.search import DEFAULT_TIME_BUDGET_S, job_plan, search_settings_check
from adaptis_web.studio.runs.profiling import (
    LOCAL_CLUSTER_PRESET,
    job_profile,
    plan_stage_timing,
    profile_for_cpu_job,
    profile_waiting,
)
from adaptis_web.studio.work.cancelling import request_cancel
from adaptis_web.studio.work.liveness import heartbeat
from adaptis_web.studio.work.queueing import enqueue_on_commit, internal_error
from planner import service as planner_service
from planner.service import ClusterSpec, ModelSpec, PlanRecord, Profile, load_cluster, load_model_spec, load_profile
from planner.errors import PlanError, SpecError

logger = logging.getLogger(__name__)

ADAPTIS_SCHEDULE = planner_service.ADAPTIS_STRATEGY
JOB_SCHEDULES = planner_service.JOB_SCHEDULES
DEFAULT_SCHEDULE = "1f1b"  # of the API, for compatibility; the pages offer the search first
DEFAULT_PARTITION = "uniform"
MAX_MICROBATCHES = planner_service.MAX_MICROBATCHES


@dataclass(frozen=True)
class JobRequest:
    """Checked planning parameters; ``cluster_preset`` is empty for a custom or saved cluster. ``partition`` is
    empty for the search (it chooses its own); ``memory_limit_bytes`` None means the cluster's device memory.
    A hybrid job (``mode`` "hybrid") has ``hybrid`` settings, ``num_devices`` = its GPUs and no micro-batches."""

    cluster_preset: str
    cluster: ClusterSpec
    num_devices: int
    num_microbatches: int
    schedule: str
    partition: str = DEFAULT_PARTITION
    seed: int = 0
    time_budget_s: float = DEFAULT_TIME_BUDGET_S
    memory_limit_bytes: int | None = None
    mode: str = JobMode.PIPELINE
    hybrid: hybrid.HybridSettings | None = None
    cluster_record: ClusterRecord | None = None
    capacity: capacity.CapacitySettings | None = None


def job_request_check(*, spec: ModelSpec, num_devices: int | None = None, num_microbatches: int | None = None,
                      cluster_preset: str = "", cluster_doc: dict | None = None, schedule: str = DEFAULT_SCHEDULE,
                      partition: str = DEFAULT_PARTITION, cluster_field: str = "cluster", seed: int = 0,
                      time_budget_s: float = DEFAULT_TIME_BUDGET_S, memory_limit_bytes: int | None = None,
                      mode: str = JobMode.PIPELINE, saved_cluster: ClusterRecord | None = None,
                      team: Team | None = None, gpus: int | None = None, seq_len: int | None = None,
                      global_batch: int | None = None, pins: dict | None = None, gpu_counts: list | None = None,
                      token_budget: int | None = None, software: Mapping[str, object] | None = None) -> JobRequest:
    """Everything about a planning request that can be checked before queueing it; SpecError otherwise.

    The cluster is a preset (a file or a name like ``h100-sxm-1024x8``), ``cluster_doc``, or ``saved_cluster``
    of ``team`` (the spec's). ``mode="hybrid"`` takes ``gpus``, ``seq_len``, ``global_batch`` and ``pins``
    instead of the pipeline's devices, micro-batches, schedule and partition; ``mode="capacity"`` takes
    ``gpu_counts`` (default 64 to 16,384, doubling) and ``token_budget`` instead of ``gpus``; both take ``software``,
    the request's ``overlap``, ``framework``, ``recompute_modules`` and ``ep_dispatcher`` by name, each not given its
    default (``hybrid.software_check``)."""
    if mode not in JobMode.values:
        raise SpecError("mode", f"must be one of {', '.join(JobMode.values)}; got {mode!r}")
    cluster = cluster_resolve(cluster_preset=cluster_preset, cluster_doc=cluster_doc, saved=saved_cluster,
                              team=team, cluster_field=cluster_field)
    preset = cluster_preset if cluster_doc is None and saved_cluster is None else ""
    if mode == JobMode.CAPACITY:
        settings = capacity.capacity_settings_check(gpu_counts=gpu_counts, token_budget=token_budget, seq_len=seq_len,
                                                    global_batch=global_batch, pins=pins, software=software,
                                                    cluster=cluster)
        return JobRequest(cluster_preset=preset, cluster=cluster, num_devices=max(settings.gpu_counts),
                          num_microbatches=0, schedule=capacity.CAPACITY_SCHEDULE, partition="",
                          mode=JobMode.CAPACITY, capacity=settings, cluster_record=saved_cluster)
    if mode == JobMode.HYBRID:
        search_settings_check(seed=0, time_budget_s=time_budget_s, memory_limit_bytes=None, cluster=cluster)
        settings = hybrid.hybrid_settings_check(spec=spec, cluster=cluster, gpus=gpus, seq_len=seq_len,
                                                global_batch=global_batch, pins=pins, software=software)
        return JobRequest(cluster_preset=preset, cluster=cluster, num_devices=settings.gpus, num_microbatches=0,
                          schedule=hybrid.HYBRID_SCHEDULE, partition="", time_budget_s=float(time_budget_s),
                          mode=JobMode.HYBRID, hybrid=settings, cluster_record=saved_cluster)
    for field, value in (("num_devices", num_devices), ("num_microbatches", num_microbatches)):
        if value is None:
            raise SpecError(field, "is required for a pipeline-only job")
    search_settings_check(seed=seed, time_budget_s=time_budget_s, memory_limit_bytes=memory_limit_bytes,
                          cluster=cluster)
    planner_service.check_pipeline_job(spec=spec, cluster=cluster, num_devices=num_devices,
                                       num_microbatches=num_microbatches, schedule=schedule, partition=partition,
                                       memory_limit_bytes=memory_limit_bytes)
    searched = schedule == ADAPTIS_SCHEDULE
    return JobRequest(cluster_preset=preset, cluster=cluster,
                      num_devices=num_devices, num_microbatches=num_microbatches, schedule=schedule,
                      partition="" if searched else partition, seed=seed, time_budget_s=float(time_budget_s),
                      memory_limit_bytes=memory_limit_bytes, cluster_record=saved_cluster)


@transaction.atomic
def job_create(*, spec_record: ModelSpecRecord, user: AbstractBaseUser, request: JobRequest,
               profile: Profile | None = None, calibrated_from: Run | None = None,
               calibration: dict | None = None) -> PlanningJob:
    """Create a queued job for a stored spec; the planning task is enqueued when the transaction commits.

    ``profile`` replaces the analytic profile (a calibrated one: ``runs.calibration``). Without one, a job on
    the local CPU cluster plans on the spec's profile measured on the runs' host (``runs.profiling``)."""
    spec_check_team(team=spec_record.team, user=user, doing="planning a spec")
    measured, unmeasured_reason = None, ""
    if profile is None and request.cluster_preset == LOCAL_CLUSTER_PRESET and request.mode == JobMode.PIPELINE:
        measured, unmeasured_reason = profile_for_cpu_job(spec_record=spec_record, user=user,
                                                          num_devices=request.num_devices, schedule=request.schedule)
    job = PlanningJob.objects.create(
        spec=spec_record, created_by=user, cluster_preset=request.cluster_preset,
        cluster_doc=request.cluster.to_dict(), num_devices=request.num_devices,
        num_microbatches=request.num_microbatches, schedule=request.schedule, partition=request.partition,
        seed=request.seed, time_budget_s=request.time_budget_s, memory_limit_bytes=request.memory_limit_bytes,
        profile_doc=None if profile is None else profile.to_dict(), calibrated_from=calibrated_from,
        calibration=calibration or {}, measured_profile=measured, analytic_profile_reason=unmeasured_reason,
        celery_task_id=str(uuid.uuid4()),
        progress_message=progress.waiting_message(measured),
        mode=request.mode, cluster_record=request.cluster_record,
        **(vars(request.hybrid) if request.hybrid else {}), **(vars(request.capacity) if request.capacity else {}))
    enqueue_on_commit(job)
    return job


@transaction.atomic
def spec_create_with_job(*, team: Team, user: AbstractBaseUser, spec: ModelSpec, source_filename: str,
                         request: JobRequest, warnings: list[dict] = (),
                         planned: ModelSpec | None = None) -> PlanningJob:
    """The upload flow: the spec record and its first job are stored together or not at all. ``planned``: the
    spec at the sequence length and micro-batch size the job asked for, when they differ from the upload's
    (``catalog.specs.spec_for_shape``)."""
    spec_record = spec_create(team=team, owner=user, spec=spec, source_filename=source_filename, warnings=warnings)
    if planned is not None:
        spec_record = spec_for_shape(record=spec_record, spec=planned, user=user)
    return job_create(spec_record=spec_record, user=user, request=request)


@transaction.atomic
def job_create_for_shape(*, spec_record: ModelSpecRecord, spec: ModelSpec, user: AbstractBaseUser,
                         request: JobRequest) -> PlanningJob:
    """A job of a stored spec planned at ``spec``'s sequence length and micro-batch size: the spec's copy of that
    shape (``catalog.specs.spec_for_shape``, stored the first time) and the job are stored together or not at all."""
    return job_create(spec_record=spec_for_shape(record=spec_record, spec=spec, user=user), user=user,
                      request=request)


def job_from_capacity_count(*, job: PlanningJob, user: AbstractBaseUser, gpus: int) -> PlanningJob:
    """A hybrid job planning ``gpus`` GPUs of capacity job ``job``'s sweep in full (the AdaPtis search inside its best
    configurations): its cluster grown to that count, its sequence length, global batch and pins. Conflict (409) on
    ``gpus`` for a count the sweep did not plan, on ``job`` for a job that is no succeeded capacity job."""
    if not job.is_capacity or job.status != JobStatus.SUCCEEDED:
        raise Conflict("job", "only a succeeded capacity job's GPU counts can be planned from it")
    planned = [point["gpus"] for point in job.result["points"] if "error" not in point]
    if gpus not in planned:
        raise Conflict("gpus", f"{gpus!r} is no GPU count this sweep planned ({', '.join(map(str, planned))})")
    cluster = planner_service.cluster_of(load_cluster(job.cluster_doc), gpus)
    request = job_request_check(spec=load_model_spec(job.spec.doc), mode=JobMode.HYBRID, cluster_doc=cluster.to_dict(),
                                team=job.spec.team, gpus=gpus, seq_len=job.seq_len, global_batch=job.global_batch,
                                pins=job.pins, software=job.software.to_dict())
    return job_create(spec_record=job.spec, user=user, request=request)


def job_cancel(*, job: PlanningJob, user: AbstractBaseUser) -> PlanningJob:
    """Cancel a job: a queued one ends CANCELLED at once (the worker then skips it, as it only claims queued
    jobs); a running one is asked to stop and ends CANCELLED when its worker notices. A 409 (``Conflict``) on
    ``status`` for a job that has already finished (``work.cancelling``)."""
    role_require_own_or_admin(user=user, team=job.spec.team, creator_id=job.created_by_id, doing="cancelling a job")
    request_cancel(job, noun="job", queued_note=progress.cancelled_while_queued())
    job.refresh_from_db()
    return job


def _plan_store(job: PlanningJob, record: PlanRecord) -> Plan:
    return Plan.objects.create(
        job=job, strategy=record.strategy, layout=record.layout, schedule_summary=record.schedule_summary,
        plan_doc=record.plan_doc, simulation=record.simulation, profile_doc=record.profile_doc,
        iteration_ms=record.iteration_ms, bubble_ratio=record.bubble_ratio)


def _hybrid_job(job: PlanningJob) -> Plan | None:
    cluster = load_cluster(job.cluster_doc)
    progress.report(job.pk, 0.1, f"Searching TP, CP, PP, DP, EP, micro-batch size and recomputation for "
                               f"{job.gpus:,} {cluster.device.name} GPUs (AdaPtis inside the best configurations "
                               f"for up to {job.time_budget_s:g} s)")
    outcome = hybrid.hybrid_plan(job, cluster)
    if outcome is None:
        progress.finish(job.pk, done="", cancelled="Cancelled before any configuration was simulated", result={})
        return None
    progress.report(job.pk, progress.STORING, f"Storing the plan of {outcome.short}")
    with transaction.atomic():
        plan = _plan_store(job, outcome.plan)
        outcome.summary["best"]["plan_id"] = plan.pk
        progress.finish(job.pk, done=outcome.done, cancelled=outcome.cancelled, result=outcome.summary)
    return plan


def _capacity_job(job: PlanningJob) -> None:
    cluster = load_cluster(job.cluster_doc)
    progress.report(job.pk, 0.1, f"Searching the best configuration at {len(job.gpu_counts)} GPU counts of "
                               f"{cluster.device.name}, {job.gpu_counts[0]:,} to {job.gpu_counts[-1]:,}")
    outcome = capacity.capacity_plan(job, cluster)
    if outcome is None:
        progress.finish(job.pk, done="", cancelled="Cancelled before any GPU count had a configuration", result={})
    else:
        progress.finish(job.pk, done=outcome.done, cancelled=outcome.cancelled, result=outcome.summary)


def _plan_job(job: PlanningJob) -> Plan | None:
    if job.is_capacity:
        return _capacity_job(job)
    if job.is_hybrid:
        return _hybrid_job(job)
    spec = load_model_spec(job.spec.doc)
    cluster = load_cluster(job.cluster_doc)
    if job.profile_doc:
        progress.report(job.pk, 0.15, f"Loading the profile calibrated from run {job.calibrated_from_id}")
        profile = load_profile(job.profile_doc)
    else:
        profile, note = job_profile(job)
        if profile is not None:
            progress.report(job.pk, 0.15, note)
        else:
            if note:  # no silent fallback: the job's page and API say why it planned on the analytic profile
                PlanningJob.objects.filter(pk=job.pk).update(analytic_profile_reason=note)
            progress.report(job.pk, 0.15, f"Profiling {spec.num_layers} layers analytically on {cluster.device.name}")
            profile = planner_service.analytic_profile(spec, cluster)
    if job.schedule == ADAPTIS_SCHEDULE:
        progress.report(job.pk, progress.SEARCH_SPAN[0], f"Searching partition, placement and schedule for "
                                                       f"{job.num_devices} devices and {job.num_microbatches} "
                                                       f"micro-batches (up to {job.time_budget_s:g} s)")
    else:
        progress.report(job.pk, 0.4, f"Building the {job.schedule} plan ({job.partition} partition) for "
                                   f"{job.num_devices} devices and {job.num_microbatches} micro-batches")
    outcome = job_plan(job=job, spec=spec, profile=profile, cluster=cluster, progress_span=progress.SEARCH_SPAN)
    result = outcome.summary
    progress.report(job.pk, progress.STORING, f"Storing {len(outcome.plans)} validated, simulated plan(s)")
    with transaction.atomic():
        stored = {strategy: _plan_store(job, record) for strategy, record in outcome.plans.items()}
        if result:  # each compared plan points at its row and shows that row's layout (the spec's layer codes)
            result.update(plan_id=stored[ADAPTIS_SCHEDULE].pk, layout=stored[ADAPTIS_SCHEDULE].layout)
            for name, metrics in result["baselines"].items():
                metrics.update(plan_id=stored[name].pk, layout=stored[name].layout)
        progress.finish(job.pk, done=outcome.done, cancelled=outcome.cancelled, result=result)
        if profile.source == "measured":  # its own plan's stages timed on the runs' host too, for its run page
            plan_stage_timing(job=job, plan=stored[job.schedule])
    return stored[job.schedule]


def job_run(*, job_id: int) -> Plan | None:
    """Plan a queued job (the Celery task's body). Failures end on the job row, never as a lost exception.

    Returns the job's own plan (the AdaPtis plan of a search), or None when the job was not run or failed. A job
    waiting for its measured profile stays queued: the profile's task sends it again when it is done.
    """
    waiting = PlanningJob.objects.select_related("measured_profile").filter(pk=job_id).first()
    if waiting is not None and waiting.status == JobStatus.QUEUED and profile_waiting(waiting):  # (a cancelled
        # job is skipped below at once, whatever its profile does)
        logger.info("planning job %s waits for measured profile %s", job_id, waiting.measured_profile_id)
        return None
    if not progress.claim(job_id):  # cancelled, deleted, or already taken by a redelivered message
        logger.warning("planning job %s is not queued; skipping", job_id)
        return None
    job = PlanningJob.objects.select_related("spec", "spec__team", "created_by", "measured_profile").get(pk=job_id)
    try:
        with heartbeat(PlanningJob, job_id):
            return _plan_job(job)
    except (SpecError, PlanError) as error:
        progress.fail(job_id, str(error))
    except Exception:
        logger.exception("%s %s failed", "planning job", job_id)
        progress.fail(job_id, internal_error("planning job", job_id, "planner"))
    return None
