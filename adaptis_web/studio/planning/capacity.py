"""Capacity jobs: how many GPUs to train a model on. The request's checks, the sweep
(``planner.service.plan_capacity_job``) with the job's progress and cancellation, and what the job page draws.

A capacity job searches the best configuration at each GPU count of ``gpu_counts`` (the cluster given is the kind of
GPU and its links, grown to each count) for the job's sequence length, global batch and pins, and says what training
on ``token_budget`` tokens costs at each: days and GPU-hours. ``job.result`` is the sweep (``points``); no plan is
stored: the count a user picks is then planned as a hybrid job (``planning.jobs.job_from_capacity_count``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from adaptis_web.studio.models import PlanningJob
from adaptis_web.studio.planning import progress
from adaptis_web.studio.planning.hybrid import job_shape_check, software_check
from adaptis_web.studio.planning.hybrid_pages import STEP_BAR_PARTS, legend, stacked
from planner import service as planner_service
from planner.errors import SpecError
from planner.service import ClusterSpec, Software, load_model_spec

CAPACITY_SCHEDULE = planner_service.CAPACITY_SCHEDULE
DEFAULT_GPU_COUNTS = planner_service.DEFAULT_GPU_COUNTS
CAPACITY_SPAN = (0.1, 0.9)


@dataclass(frozen=True)
class CapacitySettings:
    gpu_counts: list[int]
    token_budget: int
    seq_len: int
    global_batch: int
    pins: dict
    software: Software


def capacity_settings_check(*, gpu_counts: object, token_budget: object, seq_len: object, global_batch: object,
                            pins: dict | None, software: Mapping[str, object] | None = None,
                            cluster: ClusterSpec | None = None) -> CapacitySettings:
    """The sweep's counts and budget (``planner.service.capacity_check``), the job's shape, pins and software (its
    overlaps by default ``cluster``'s, as a hybrid job's: ``hybrid.software_check``); SpecError naming the field.
    Whether a count has a configuration (the batch splits over it, the model fits) is the sweep's answer for that
    count, not a refusal of the job."""
    if gpu_counts is None:
        gpu_counts = list(DEFAULT_GPU_COUNTS)
    if token_budget is None:
        raise SpecError("token_budget", "is required for a capacity job: the tokens to train on")
    counts, token_budget = planner_service.capacity_check(gpu_counts, token_budget)
    seq_len, global_batch, pins = job_shape_check(seq_len=seq_len, global_batch=global_batch, pins=pins,
                                                  gpus=max(counts), kind="a capacity job")
    return CapacitySettings(gpu_counts=list(counts), token_budget=token_budget, seq_len=seq_len,
                            global_batch=global_batch, pins=pins, software=software_check(software, cluster))


def capacity_plan(job: PlanningJob, cluster: ClusterSpec) -> planner_service.CapacityOutcome | None:
    """The sweep for a claimed job, its progress written to the row and its cancel read from it; None when it was
    cancelled before any count had a configuration. SpecError (no count has one) propagates."""
    return planner_service.plan_capacity_job(
        spec=load_model_spec(job.spec.doc), cluster=cluster, gpu_counts=job.gpu_counts, seq_len=job.seq_len,
        global_batch=job.global_batch, token_budget=job.token_budget, pins=job.pins, software=job.software,
        progress=progress.search_reporter(job.pk, *CAPACITY_SPAN), cancel=progress.cancel_reader(job.pk))


# ---- the job page ---------------------------------------------------------------------------------------------

def capacity_rows(result: dict) -> list[dict]:
    """One row per GPU count: its configuration, throughput, MFU, step, days, GPU-hours and peak memory, or the
    reason it has none; the fastest and the cheapest marked."""
    rows = []
    for point in result["points"]:
        row = {"gpus": point["gpus"], "nodes": point["nodes"], "error": point.get("error"),
               "fastest": point["gpus"] == result["fastest_gpus"],
               "cheapest": point["gpus"] == result["cheapest_gpus"]}
        if not row["error"]:
            predicted = point["predicted"]
            row.update(short=point["short"], days=point["days"], gpu_hours=point["gpu_hours"],
                       tokens_per_s=predicted["tokens_per_s"], mfu_percent=100 * predicted["mfu"],
                       iteration_s=predicted["iteration_ms"] / 1e3,
                       peak_memory_gib=predicted["peak_memory_bytes"] / 2**30)
        rows.append(row)
    return rows


def capacity_chart(result: dict) -> dict:
    """What the time-against-cost chart plots (``static/studio/capacity.js``): one point per planned count, days
    on x and GPU-hours on y, both on log axes (the counts double), labelled by GPU count."""
    return {"points": [{"gpus": point["gpus"], "days": point["days"], "gpu_hours": point["gpu_hours"],
                        "short": point["short"]} for point in result["points"] if "error" not in point],
            "token_budget": result["token_budget"], "device": result["device"]}


def capacity_step_bars(result: dict) -> dict:
    """Where each count's step goes (``predicted.breakdown_ms``): a stacked bar per planned count, in percent of its
    own step, so the shares of bubble and communication read across the counts."""
    bars = []
    for point in result["points"]:
        if "error" in point:
            continue
        predicted = point["predicted"]
        bars.append({"gpus": point["gpus"], "iteration_s": predicted["iteration_ms"] / 1e3,
                     "parts": stacked(predicted["breakdown_ms"], STEP_BAR_PARTS, predicted["iteration_ms"], 1e3)})
    return {"bars": bars, "parts": legend(STEP_BAR_PARTS)}


def capacity_page_context(job: PlanningJob) -> dict:
    """The capacity section of the job page; empty until the job has a result."""
    result = job.result or {}
    if "points" not in result:
        return {"capacity": None}
    return {"capacity": {"result": result, "rows": capacity_rows(result), "chart": capacity_chart(result),
                         "steps": capacity_step_bars(result),
                         "planned": sum(1 for point in result["points"] if "error" not in point)}}

