"""Hybrid-parallel planning jobs: the request's checks, ``planner.hybrid.search`` with the job's progress and
cancellation, and what is stored of its result.

A hybrid job chooses TP, CP, PP, DP, EP, micro-batch size and recomputation for a whole training job (GPUs,
sequence length, global batch; any of those degrees can be pinned) together with the pipeline plan inside it.
Its best plan (``adaptis.plan/v2``, whose devices are the pipeline ranks) is stored as a Plan row with the
profile of one GPU of each TP x CP group and the pipeline simulated on the links between pipeline ranks, so a
plan page can open it like any other. ``job.result`` keeps the rest: the best configuration with its
predicted metrics, memory per pipeline rank and rank mapping, and the runners-up (``hybrid_summary``).
"""

from __future__ import annotations

from dataclasses import dataclass

from adaptis_web.studio.models import Plan, PlanningJob
from adaptis_web.studio.services.search import job_cancel_reader, job_progress_writer
from planner import hybrid as planner_hybrid
from planner.cluster import ClusterSpec, load_cluster
from planner.errors import SpecError
from planner.layout import schedule_description
from planner.parallel.config import RECOMPUTE_MODES
from planner.parallel.evaluate import shard_profile
from planner.parallel.mapping import RankMapping
from planner.parallel.search import HybridResult, SearchCancelled
from planner.plan import load_plan
from planner.simulator import simulate
from planner.spec.model import ModelSpec, load_model_spec
from planner.validate import validate_plan

HYBRID_SCHEDULE = "hybrid"
MAX_GPUS = 65_536
MAX_SEQ_LEN = 1 << 20
MAX_GLOBAL_BATCH = 1 << 20
DEGREE_PINS = ("tp", "cp", "pp", "dp", "ep", "microbatch_size")
PIN_FIELDS = DEGREE_PINS + ("recompute", "distributed_optimizer")
MAX_STORED_RANKS = 1024     # GPU coordinates kept in job.result; the rest follow from the configuration
SEARCH_PROGRESS_SPAN = (0.1, 0.85)


@dataclass(frozen=True)
class HybridSettings:
    gpus: int
    seq_len: int
    global_batch: int
    pins: dict


def _positive(field: str, value: object, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise SpecError(field, f"must be an integer between 1 and {limit:,}; got {value!r}")
    return value


def hybrid_settings_check(*, spec: ModelSpec, cluster: ClusterSpec, gpus: object, seq_len: object,
                          global_batch: object, pins: dict | None) -> HybridSettings:
    """The job's shape and pins, checked as the search would check them (``planner.hybrid.check``): a pin that
    cannot split the GPUs or the batch, or a model that fits nowhere, is a SpecError naming the field."""
    for field, value in (("gpus", gpus), ("seq_len", seq_len), ("global_batch", global_batch)):
        if value is None:
            raise SpecError(field, "is required for a hybrid-parallel job")
    gpus = _positive("gpus", gpus, MAX_GPUS)
    seq_len = _positive("seq_len", seq_len, MAX_SEQ_LEN)
    global_batch = _positive("global_batch", global_batch, MAX_GLOBAL_BATCH)
    pins = {key: value for key, value in (pins or {}).items() if value not in (None, "")}
    for key, value in pins.items():
        if key not in PIN_FIELDS:
            raise SpecError(key, f"cannot be pinned (pins: {', '.join(PIN_FIELDS)})")
        if key in DEGREE_PINS:
            _positive(key, value, gpus if key != "microbatch_size" else global_batch)
    if "recompute" in pins and pins["recompute"] not in RECOMPUTE_MODES:
        raise SpecError("recompute", f"must be one of {', '.join(RECOMPUTE_MODES)}; got {pins['recompute']!r}")
    if gpus > cluster.num_devices:
        raise SpecError("gpus", f"the cluster {cluster.name!r} has {cluster.num_devices:,} GPUs; asked for {gpus:,}")
    planner_hybrid.check(spec, cluster, gpus, seq_len, global_batch, pins)
    return HybridSettings(gpus=gpus, seq_len=seq_len, global_batch=global_batch, pins=pins)


def hybrid_search(job: PlanningJob) -> HybridResult | None:
    """The search for a claimed job, its progress written to the row and its cancel read from it; None when it
    was cancelled before any plan was simulated. SpecError (nothing fits, say) propagates."""
    spec = load_model_spec(job.spec.doc)
    cluster = load_cluster(job.cluster_doc)
    try:
        return planner_hybrid.search(spec, cluster, job.gpus, job.seq_len, job.global_batch, job.pins,
                                     time_budget_s=job.time_budget_s,
                                     progress=job_progress_writer(job.pk, *SEARCH_PROGRESS_SPAN),
                                     cancel=job_cancel_reader(job.pk))
    except SearchCancelled:
        return None


def hybrid_plan_store(job: PlanningJob, result: HybridResult) -> Plan:
    """The best plan as a Plan row: the v2 document, the profile of its pipeline ranks and their simulation."""
    best = result.best
    plan = best.plan
    validate_plan(plan, best.job.model.num_layers)
    profile, pipeline_cluster = shard_profile(best.job, best.config, best.chunks)
    simulation = simulate(plan, profile, pipeline_cluster).to_dict(include_timeline=False)
    doc = result.plan_document()
    load_plan(doc)  # what a plan page will load: within the planner's bounds (planner.limits)
    return Plan.objects.create(
        job=job, strategy=doc["strategy"], layout=doc["meta"].get("layout", ""),
        schedule_summary=schedule_description(plan), plan_doc=doc, simulation=simulation,
        profile_doc=profile.to_dict(), iteration_ms=best.iteration_ms, bubble_ratio=simulation["bubble_ratio"])


def hybrid_summary(result: HybridResult, plan: Plan) -> dict:
    """What ``job.result`` keeps: ``best`` (parallel, short, predicted, memory, rank_mapping with the first
    ``MAX_STORED_RANKS`` GPUs' coordinates, plan_id, layout), ``runners_up``, considered, pruned_by_memory,
    seconds, stats and cancelled. The plan document itself is the Plan row's."""
    best = result.best
    summary = result.to_dict(ranks=False)
    mapping = RankMapping(best.config, best.job.cluster)
    summary["best"].pop("plan")
    summary["best"].update(plan_id=plan.pk, layout=plan.layout,
                           rank_mapping=mapping.to_dict(min(best.config.num_gpus, MAX_STORED_RANKS)))
    summary["cancelled"] = bool(result.stats.get("cancelled"))
    return summary


def hybrid_messages(result: HybridResult) -> tuple[str, str]:
    """The progress message of a finished job, and of one cancelled while it searched."""
    metrics = result.best.metrics()
    found = (f"{result.best.config.short()}, {metrics['tokens_per_s']:,.0f} tokens/s, MFU {metrics['mfu']:.1%}, "
             f"{metrics['iteration_ms'] / 1e3:.2f} s per step")
    return f"Hybrid plan ready: {found}", f"Cancelled: kept the best plan simulated so far ({found})"
