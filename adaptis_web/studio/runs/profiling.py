"""Profiles measured where the runs happen: a task on the runs queue times a spec's layers on the worker's host.

``measured_profile_create`` queues one (a member of the spec's team); ``profile_measure`` is the task's body: one
profiler process per rank at once, each with the ranks' share of the cores and their weight-gradient setting
(``executor.measuring.profiler.measure_profile_alongside``), and, given a plan, its stages timed as its ranks run
them with the layers scaled to those times (``executor.measuring.stage_timing``, as ``executor profile --plan``).

Planning on the local CPU cluster (``cpu-host``) uses such a profile by default (``profile_for_cpu_job``): the
newest one of the spec for that many ranks and that backward split, measured once and reused; a job that needs
one not measured yet waits for it (it stays queued and the profile's task sends it on when done). The analytic
CPU profile predicted tiny-hybrid at 60.8 ms where an idle 2-core host ran it at 547 ms. Once the job has its
plan, the plan's stages are timed on the runs' host too (``plan_stage_timing``): layers timed one by one miss
what an action pays to start after other work, and the plan's local-run prediction (``plan_local_prediction``,
what its run page shows) is made on that stage-timed profile.
"""

from __future__ import annotations

import logging
import socket
import uuid

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from adaptis_web.studio.catalog.specs import spec_check_team
from adaptis_web.studio.models import JobStatus, MeasuredProfile, ModelSpecRecord, Plan, PlanningJob
from adaptis_web.studio.planning.predictions import stored_plan
from adaptis_web.studio.runs.local_runs import cpu_run_refusal
from adaptis_web.studio.work.liveness import heartbeat
from adaptis_web.studio.work.queueing import enqueue_on_commit, internal_error, send
from executor import service as executor_service
from executor.service import ExecutorError
from planner.errors import PlanError, SpecError
from planner import service as planner_service
from planner.service import ModelSpec, Profile, load_cluster_preset, load_model_spec, load_plan, load_profile

logger = logging.getLogger(__name__)

LOCAL_CLUSTER_PRESET = "cpu-host"
MAX_PROFILE_RANKS = 16
REPEATS, WARMUP = 15, 5           # per layer and kind, as benchmarks/prediction_fidelity.py measures
SPLIT_BACKWARD_SCHEDULES = ("zb-h1", "zb-v", "adaptis")   # their ranks run I and W apart (the search's own
# plans interleave I and W to fill bubbles); GPipe, 1F1B and interleaved 1F1B run one full B


@transaction.atomic
def measured_profile_create(*, spec_record: ModelSpecRecord, user: AbstractBaseUser, num_ranks: int,
                            split_backward: bool, plan: Plan | None = None) -> MeasuredProfile:
    """Queue a profile of ``spec_record`` measured on the runs' host; SpecError naming the field when it cannot
    be measured there (too many ranks, a model a CPU run would not take as it is, a plan of another spec)."""
    spec_check_team(team=spec_record.team, user=user, doing="measuring a profile")
    spec = load_model_spec(spec_record.doc)
    if plan is not None:
        if plan.job.spec_id != spec_record.pk:
            raise SpecError("plan", f"plan {plan.pk} is a plan of another spec")
        # as its ranks will run: I and W apart where the plan has them (executor.running.worker)
        num_ranks, split_backward = planner_service.plan_run_shape(plan.plan_doc, spec)
    if not 1 <= num_ranks <= MAX_PROFILE_RANKS:
        raise SpecError("num_ranks", f"must be between 1 and {MAX_PROFILE_RANKS}; got {num_ranks}")
    refusal = cpu_run_refusal(spec)
    if refusal:
        raise SpecError("spec", f"is not measured on the runs' host as it is: {refusal}")
    profile = MeasuredProfile.objects.create(spec=spec_record, created_by=user, num_ranks=num_ranks,
                                             split_backward=split_backward, plan=plan,
                                             celery_task_id=str(uuid.uuid4()))
    enqueue_on_commit(profile)
    return profile


def profile_for_cpu_job(*, spec_record: ModelSpecRecord, user: AbstractBaseUser, num_devices: int,
                        schedule: str) -> tuple[MeasuredProfile | None, str]:
    """The measured profile a job planning ``spec_record`` on ``cpu-host`` uses: the newest one measured (or being
    measured) for ``num_devices`` ranks and the schedule's backward split, else a new one queued now; and "". For a
    model a CPU run would not take as it is: (None, why), and the job plans on the analytic profile."""
    refusal = cpu_run_refusal(load_model_spec(spec_record.doc))
    if refusal:
        return None, f"the runs' host does not measure this model as it is: {refusal}"
    split_backward = schedule in SPLIT_BACKWARD_SCHEDULES
    reusable = MeasuredProfile.objects.filter(
        spec=spec_record, num_ranks=num_devices, split_backward=split_backward, plan__isnull=True,
        status__in=(JobStatus.SUCCEEDED, JobStatus.RUNNING, JobStatus.QUEUED), deleted_at__isnull=True).first()
    return reusable or measured_profile_create(spec_record=spec_record, user=user, num_ranks=num_devices,
                                               split_backward=split_backward), ""


def plan_stage_timing(*, job: PlanningJob, plan: Plan) -> MeasuredProfile | None:
    """For a job that planned on a measured profile: queue the timing of its own plan's stages on the runs' host
    (None, and a log line, where that cannot be done; the job's outcome does not depend on it)."""
    if job.measured_profile is None:
        return None
    try:
        return measured_profile_create(spec_record=job.spec, user=job.created_by, num_ranks=job.num_devices,
                                       split_backward=job.measured_profile.split_backward, plan=plan)
    except (SpecError, PermissionDenied) as error:  # e.g. its creator has left the team meanwhile
        logger.warning("not timing the stages of plan %s: %s", plan.pk, error)
        return None


def plan_local_prediction(plan: Plan) -> dict | None:
    """The simulator's output for ``plan`` on its newest profile scaled to its stages timed on the runs' host, with
    ``profile_id`` and ``host``; None until one is measured."""
    measured = plan.measured_profiles.filter(status=JobStatus.SUCCEEDED, deleted_at__isnull=True).first()
    if measured is None:
        return None
    simulation = planner_service.simulate_on_profile(stored_plan(plan), measured.profile_doc)
    return {**simulation, "profile_id": measured.pk, "host": measured.host}


def job_profile(job: PlanningJob) -> tuple[Profile | None, str]:
    """The measured profile ``job`` plans with and the sentence saying so; (None, why) when it plans on the
    analytic profile although it asked for a measured one (``planning.jobs`` records why on the job)."""
    measured = job.measured_profile
    if measured is None:
        return None, ""
    if measured.status != JobStatus.SUCCEEDED:
        return None, (f"measuring profile {measured.pk} on the runs' host {measured.status}"
                      + (f": {measured.error}" if measured.error else ""))
    return load_profile(measured.profile_doc), (f"Planning on profile {measured.pk}, measured on {measured.host} "
                                                f"({measured.num_ranks} ranks at once)")


def profile_waiting(job: PlanningJob) -> bool:
    """Whether ``job`` waits for its measured profile (its task then leaves it queued)."""
    return job.measured_profile is not None and not job.measured_profile.is_finished


def _measure(record: MeasuredProfile) -> Profile:
    # torch: imported on first use, in the runs worker only
    return executor_service.measure_for_local_runs(
        load_model_spec(record.spec.doc), ranks=record.num_ranks, split_backward=record.split_backward,
        plan=None if record.plan is None else load_plan(record.plan.plan_doc), repeats=REPEATS, warmup=WARMUP)


def _host() -> str:
    return f"{socket.gethostname()} ({executor_service.usable_cores()} cores)"


def _release_waiting_jobs(profile_id: int) -> None:
    """Send the planning task of every job that waited for this profile (its outcome decides what they use)."""
    for job_id, task_id in PlanningJob.objects.filter(measured_profile_id=profile_id, status=JobStatus.QUEUED) \
            .values_list("pk", "celery_task_id"):
        send(PlanningJob, job_id, task_id)


def profile_measure(*, profile_id: int) -> None:
    """Measure a queued MeasuredProfile (the Celery task's body); failures end on its row. Then the jobs waiting
    for it plan."""
    claimed = MeasuredProfile.objects.filter(pk=profile_id, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING, started_at=timezone.now(), host=_host())
    if not claimed:
        logger.warning("measured profile %s is not queued; skipping", profile_id)
        return
    record = MeasuredProfile.objects.select_related("spec", "plan").get(pk=profile_id)
    outcome = {"status": JobStatus.FAILED}
    try:
        with heartbeat(MeasuredProfile, profile_id):
            profile = _measure(record)
        outcome = {"status": JobStatus.SUCCEEDED, "profile_doc": profile.to_dict()}
    except (SpecError, PlanError, ExecutorError) as error:   # the profilers' own failures say what happened
        outcome["error"] = str(error)
    except Exception:
        logger.exception("%s %s failed", "measured profile", profile_id)
        outcome["error"] = internal_error("measured profile", profile_id, "runner")
    finally:
        MeasuredProfile.objects.filter(pk=profile_id).update(finished_at=timezone.now(), **outcome)
        _release_waiting_jobs(profile_id)


def _layer_series(profile: Profile) -> dict:
    mib = 2**20
    return {"time_ms": [layer.forward + layer.backward_input + layer.backward_weight for layer in profile.layers],
            "forward_ms": [layer.forward for layer in profile.layers],
            "activation_mib": [layer.activation_bytes / mib for layer in profile.layers],
            "param_mib": [layer.param_bytes / mib for layer in profile.layers]}


def layer_cost_chart(*, spec: ModelSpec, cluster_preset: str, measured: MeasuredProfile | None) -> dict:
    """What the spec page charts per layer: compute (F + B + W per micro-batch) and memory (activations held per
    micro-batch in flight, parameters), on the analytic profile of ``cluster_preset``'s device and, beside it, the
    spec's newest profile measured on the runs' host."""
    cluster = load_cluster_preset(cluster_preset)
    analytic = planner_service.analytic_profile(spec, cluster)
    chart = {"layers": [f"{index} {layer.kind}" for index, layer in enumerate(spec.layers)],
             "analytic": {"label": f"analytic, {cluster.device.name}", **_layer_series(analytic)},
             "measured": None}
    if measured is not None:
        chart["measured"] = {"label": f"measured on {measured.host} ({measured.num_ranks} ranks at once)",
                             **_layer_series(load_profile(measured.profile_doc))}
    return chart
