"""Hybrid-parallel planning jobs: the request's checks, and ``planner.service.plan_hybrid_job`` with the job's
progress and cancellation.

A hybrid job chooses TP, CP, PP, DP, EP, expert TP, micro-batch size, recomputation and sharding for a whole
training job (GPUs,
sequence length, global batch; any of those degrees can be pinned) together with the pipeline plan inside it.
Its best plan (``adaptis.plan/v2``, whose devices are the pipeline ranks) is stored as a Plan row with the
profile of one GPU of each TP x CP group and the pipeline simulated on the links between pipeline ranks, so a
plan page can open it like any other. ``job.result`` keeps the rest: the best configuration with its
predicted metrics, memory per pipeline rank and rank mapping, and the runners-up (the outcome's ``summary``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from adaptis_web.studio.models import PlanningJob
from adaptis_web.studio.planning import progress
from planner import service as planner_service
from planner.errors import SpecError
from planner.service import (  # limits: planner.limits
    MAX_GLOBAL_BATCH, MAX_GPUS, MAX_SEQ_LEN, ClusterSpec, ModelSpec, Software, load_model_spec)

HYBRID_SCHEDULE = planner_service.HYBRID_SCHEDULE
DEGREE_PINS = ("tp", "cp", "pp", "dp", "ep", "etp", "microbatch_size", "vpp")
# distributed_optimizer: the older name of sharding optimizer (true) or none (false), still taken
PIN_FIELDS = DEGREE_PINS + ("recompute", "sharding", "precision", "distributed_optimizer")


@dataclass(frozen=True)
class HybridSettings:
    gpus: int
    seq_len: int
    global_batch: int
    pins: dict
    software: Software


def _positive(field: str, value: object, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise SpecError(field, f"must be an integer between 1 and {limit:,}; got {value!r}")
    return value


def job_shape_check(*, seq_len: object, global_batch: object, pins: dict | None, gpus: int,
                    kind: str) -> tuple[int, int, dict]:
    """The sequence length, global batch and pins of a job on up to ``gpus`` GPUs (a hybrid job's, a capacity
    job's): present, in range, pins of known keys within ``gpus``; SpecError naming the field otherwise."""
    for field, value in (("seq_len", seq_len), ("global_batch", global_batch)):
        if value is None:
            raise SpecError(field, f"is required for {kind}")
    seq_len = _positive("seq_len", seq_len, MAX_SEQ_LEN)
    global_batch = _positive("global_batch", global_batch, MAX_GLOBAL_BATCH)
    pins = {key: value for key, value in (pins or {}).items() if value not in (None, "")}
    for key, value in pins.items():
        if key not in PIN_FIELDS:
            raise SpecError(key, f"cannot be pinned (pins: {', '.join(PIN_FIELDS)})")
        if key in DEGREE_PINS:
            _positive(key, value, gpus if key != "microbatch_size" else global_batch)
    if "recompute" in pins and pins["recompute"] not in planner_service.RECOMPUTE_MODES:
        raise SpecError("recompute", f"must be one of {', '.join(planner_service.RECOMPUTE_MODES)}; "
                                     f"got {pins['recompute']!r}")
    return seq_len, global_batch, pins


def software_check(software: Mapping[str, object] | None, cluster: ClusterSpec | None = None) -> Software:
    """The job's software from the request's settings (``planner.service.Software.named``: the overlaps, framework,
    recompute modules and MoE dispatcher), written as the planner writes them; each one not given takes its default,
    the overlaps ``cluster``'s (``planner.service.default_overlap``: ``dp`` on GPUs, ``none`` on a CPU cluster).
    SpecError naming the field."""
    default = planner_service.DEFAULT_OVERLAP if cluster is None else planner_service.default_overlap(cluster)
    return Software.named(software or {}, default_overlap=default)


def hybrid_settings_check(*, spec: ModelSpec, cluster: ClusterSpec, gpus: object, seq_len: object,
                          global_batch: object, pins: dict | None,
                          software: Mapping[str, object] | None = None) -> HybridSettings:
    """The job's shape and pins, checked as the search would check them (``planner.parallel.planning.check``): a pin
    that cannot split the GPUs or the batch, or a model that fits nowhere, is a SpecError naming the field."""
    if gpus is None:
        raise SpecError("gpus", "is required for a hybrid-parallel job")
    gpus = _positive("gpus", gpus, MAX_GPUS)
    seq_len, global_batch, pins = job_shape_check(seq_len=seq_len, global_batch=global_batch, pins=pins, gpus=gpus,
                                                  kind="a hybrid-parallel job")
    if gpus > cluster.num_devices:
        raise SpecError("gpus", f"the cluster {cluster.name!r} has {cluster.num_devices:,} GPUs; asked for {gpus:,}")
    software = software_check(software, cluster)
    planner_service.check_hybrid_job(spec=spec, cluster=cluster, gpus=gpus, seq_len=seq_len,
                                     global_batch=global_batch, pins=pins, software=software)
    return HybridSettings(gpus=gpus, seq_len=seq_len, global_batch=global_batch, pins=pins, software=software)


def hybrid_plan(job: PlanningJob, cluster: ClusterSpec) -> planner_service.HybridJobOutcome | None:
    """The search for a claimed job (``planner.service.plan_hybrid_job``), its progress written to the row and its
    cancel read from it; None when it was cancelled before any plan was simulated. SpecError propagates."""
    return planner_service.plan_hybrid_job(
        spec=load_model_spec(job.spec.doc), cluster=cluster, gpus=job.gpus, seq_len=job.seq_len,
        global_batch=job.global_batch, pins=job.pins, time_budget_s=job.time_budget_s, software=job.software,
        progress=progress.search_reporter(job.pk, *progress.HYBRID_SEARCH_SPAN),
        cancel=progress.cancel_reader(job.pk))
