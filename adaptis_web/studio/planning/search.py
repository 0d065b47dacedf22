"""Planning a pipeline job: its search settings' checks, and ``planner.service.plan_pipeline_job`` with the
search's progress written to the job row and its cancellation read from it (``planning.progress``; ``planning.jobs``
stores the plans and ends the job).
"""

from __future__ import annotations

import math

from adaptis_web.studio.models import PlanningJob
from adaptis_web.studio.planning import progress
from planner import service as planner_service
from planner.errors import SpecError

MAX_SEED = 2**31 - 1
DEFAULT_TIME_BUDGET_S = planner_service.DEFAULT_TIME_BUDGET_S  # the planner's, for the CLI and the web alike
MIN_TIME_BUDGET_S, MAX_TIME_BUDGET_S = 1.0, 600.0


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def search_settings_check(*, seed: int, time_budget_s: float, memory_limit_bytes: int | None,
                          cluster: planner_service.ClusterSpec) -> None:
    """SpecError naming the field unless the search settings are in range (checked for every job request)."""
    if not _is_integer(seed) or not 0 <= seed <= MAX_SEED:
        raise SpecError("seed", f"must be an integer between 0 and {MAX_SEED}; got {seed!r}")
    if isinstance(time_budget_s, bool) or not isinstance(time_budget_s, (int, float)) \
            or not math.isfinite(time_budget_s) or not MIN_TIME_BUDGET_S <= time_budget_s <= MAX_TIME_BUDGET_S:
        raise SpecError("time_budget_s", f"must be between {MIN_TIME_BUDGET_S:g} and {MAX_TIME_BUDGET_S:g} "
                                         f"seconds; got {time_budget_s!r}")
    device_bytes = cluster.device.memory_bytes
    if memory_limit_bytes is not None and (not _is_integer(memory_limit_bytes)
                                           or not 1 <= memory_limit_bytes <= device_bytes):
        raise SpecError("memory_limit_bytes", f"must be a number of bytes between 1 and the {cluster.device.name}'s "
                                              f"{device_bytes:,} ({device_bytes / 2**30:g} GiB), or empty for all "
                                              f"of it; got {memory_limit_bytes!r}")


def job_plan(*, job: PlanningJob, spec: planner_service.ModelSpec, profile: planner_service.Profile,
             cluster: planner_service.ClusterSpec,
             progress_span: tuple[float, float]) -> planner_service.PipelineJobOutcome:
    """Plan the job (``planner.service.plan_pipeline_job``), a search reporting into ``progress_span`` of the job's
    progress. SpecError (e.g. ``memory_limit_bytes`` when nothing fits) propagates."""
    return planner_service.plan_pipeline_job(
        spec=spec, cluster=cluster, profile=profile, schedule=job.schedule, partition=job.partition,
        num_devices=job.num_devices, num_microbatches=job.num_microbatches, seed=job.seed,
        time_budget_s=job.time_budget_s, memory_limit_bytes=job.memory_limit_bytes,
        progress=progress.search_reporter(job.pk, *progress_span), cancel=progress.cancel_reader(job.pk))
