"""AdaPtis search for a planning job: its settings' checks, and ``planner.search.search_plan`` with its
progress written to the job row and its cancellation read from it, the outcome turned into the plans and
the summary the job stores (``services.jobs`` stores them and ends the job).

Both callbacks run inside the search loop (once per scored candidate), so each touches the database at most
every ``ROW_IO_INTERVAL_S``: progress is written, and ``cancel_requested`` read, with that throttle.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from adaptis_web.studio.models import PlanningJob
from planner.cluster import ClusterSpec
from planner.errors import SpecError
from planner.plan import Plan as PlannerPlan
from planner.profile import Profile
from planner.search import search_plan

ROW_IO_INTERVAL_S = 0.5
ADAPTIS_STRATEGY = "adaptis"
MAX_SEED = 2**31 - 1
DEFAULT_TIME_BUDGET_S = 60.0
MIN_TIME_BUDGET_S, MAX_TIME_BUDGET_S = 1.0, 600.0


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def search_settings_check(*, seed: int, time_budget_s: float, memory_limit_bytes: int | None,
                          cluster: ClusterSpec) -> None:
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


@dataclass
class SearchOutcome:
    """``plans`` maps a strategy name to its plan: every baseline the search scored, then ``"adaptis"``."""

    plans: dict[str, PlannerPlan]
    summary: dict


class _Throttle:
    def __init__(self, interval_s: float = ROW_IO_INTERVAL_S):
        self.interval_s = interval_s
        self.last = float("-inf")

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.interval_s:
            return False
        self.last = now
        return True


def job_progress_writer(job_id: int, start: float, end: float) -> Callable[[float, str], None]:
    """A search progress callback mapping the search's 0..1 onto ``start..end`` of the job's progress."""
    throttle = _Throttle()

    def write(fraction: float, message: str) -> None:
        if throttle.due():
            PlanningJob.objects.filter(pk=job_id).update(progress=start + (end - start) * fraction,
                                                         progress_message=f"Searching: {message}"[:200])

    return write


def job_cancel_reader(job_id: int) -> Callable[[], bool]:
    """A search cancel callback: whether the job's ``cancel_requested`` is set (once set, it stays set)."""
    throttle = _Throttle()
    requested = False

    def read() -> bool:
        nonlocal requested
        if not requested and throttle.due():
            requested = PlanningJob.objects.filter(pk=job_id, cancel_requested=True).exists()
        return requested

    return read


def job_search(*, job: PlanningJob, profile: Profile, cluster: ClusterSpec,
               progress_span: tuple[float, float]) -> SearchOutcome:
    """Search the job's plan. SpecError (e.g. ``memory_limit_bytes`` when nothing fits) propagates."""
    result = search_plan(profile, job.num_devices, job.num_microbatches, cluster=cluster,
                         memory_limit_bytes=job.memory_limit_bytes, seed=job.seed, time_budget_s=job.time_budget_s,
                         progress=job_progress_writer(job.pk, *progress_span), cancel=job_cancel_reader(job.pk))
    # Every baseline the search scored is stored, so every row of the comparison is a plan that can be run.
    # Slowest first and the AdaPtis plan last: stored in this order, the job's plans (newest first) read
    # best first, and the AdaPtis plan is the job's latest plan, the one its page opens on.
    plans = {name: result.baseline_plans[name]
             for name, _ in sorted(result.baselines.items(), key=lambda item: -item[1]["iteration_ms"])}
    plans[ADAPTIS_STRATEGY] = result.plan
    predicted = result.plan.predicted
    summary = {
        "iteration_ms": result.iteration_ms, "bubble_ratio": predicted["bubble_ratio"],
        "peak_memory_bytes": predicted["peak_memory_bytes"],
        "lower_bound_ms": result.lower_bound_ms, "lower_bound": result.lower_bound, "gap": result.gap,
        "memory_limit_bytes": result.plan.meta.get("memory_limit_bytes"), "origin": result.plan.meta.get("origin"),
        "layout": result.plan.meta.get("layout"), "schedule": result.plan.meta.get("schedule"),
        "stats": result.stats, "candidates": kept_plan_first(result.candidates, result.plan),
        "baselines": result.baselines, "cancelled": result.cancelled,
    }
    return SearchOutcome(plans=plans, summary=summary)


def kept_plan_first(candidates: list[dict], plan: PlannerPlan) -> list[dict]:
    """The search's candidates with the plan the job keeps as the first row. A search stopped early (cancelled, or
    out of time) may keep a baseline that beat every candidate it had scored, which the candidates do not list."""
    layout, iteration_ms = plan.meta.get("layout"), plan.predicted["iteration_ms"]
    others = [row for row in candidates
              if not (row["layout"] == layout and math.isclose(row["iteration_ms"], iteration_ms, rel_tol=1e-9))]
    kept = next((row for row in candidates if row not in others), None) or {
        "iteration_ms": iteration_ms, "num_stages": len(plan.stages), "layout": layout,
        "schedule": plan.meta.get("schedule", ""), "origin": plan.meta.get("origin", "")}
    return [{**row, "rank": rank} for rank, row in enumerate([{**kept, "kept": True}, *others], start=1)]
