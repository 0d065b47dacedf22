"""The planner as the web (and any other front end) calls it: one call per use case, plain documents in and out.

A front end reaches planning only through this module and ``planner.errors``: the document loaders (``LOADERS``,
from ``planner.cluster``, ``planner.profile``, ``planner.plan``, ``planner.spec.*``, ``planner.documents``,
``planner.parallel.config``) come through here too; ``tests/web/test_boundaries.py`` holds the web to that. The use
cases:

- ``check_pipeline_job`` / ``plan_pipeline_job``: a pipeline job's shape checked, then planned (the AdaPtis search
  with the baselines it scored, or one baseline), each plan validated and simulated into a ``PlanRecord``, the
  fields a stored plan keeps;
- ``check_hybrid_job`` / ``plan_hybrid_job``: the same for a hybrid-parallel job (``planner.parallel.planning``);
- ``stored_plan_page`` / ``predict_stored_plan``: a stored plan (``StoredPlan``, its documents) predicted as its
  page draws it, the editor's prediction (``planner.editing``), with the difference from its parent, the
  Megatron layout's refusal and what the framework exports (Megatron-LM arguments, torchtitan config) lose;
- ``stored_plan_simulation``: the simulator's output for a stored plan on the profile stored with it (the timeline
  the API serves; ``simulate_on_profile`` on another, measured profile);
- ``repredict_edit`` and ``derive_plan``: an edited document re-predicted (the editor's answer), and the same
  prediction as the ``PlanRecord`` of a derived plan;
- ``export_stored_plan``: a stored plan in another tool's format, the file ``python -m planner export`` writes;
- ``calibrate_from_run``: a profile and cluster recalibrated from a run's observed actions (``planner.calibrate``);
- ``summarize_observed``: a run's observed iteration and bubble from its action events (``planner.observed``).

The vocabularies the web's forms and serializers offer (schedules, partitions, recompute modes, accelerators,
presets, input ranges) and the types they name come from their homes through here. Errors are
``SpecError``/``PlanError`` naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from planner.parallel import planning as planner_hybrid
from planner.baselines import BASELINE_SCHEDULES, PARTITIONS, build_baseline
from planner.actions import ACTION_KINDS, ActionKind
from planner.comparison import plan_gpus, throughput_difference
from planner.calibrate import (after_warmup, fit_collective_links, fit_run_kernel_overhead, measure_message_overhead,
                               recalibrate, with_fitted_links, with_kernel_overhead, with_message_overhead)
from planner.cluster import ClusterSpec, is_cluster_preset, load_cluster, load_cluster_preset, preset_names
from planner.cost import analytic_profile
from planner.cost.analytic import RECOMPUTE_MODULES, count_parameters
from planner.documents import parse_document
from planner.editing import (
    EDITED_STRATEGY,
    LIST_POLICIES,
    SCHEDULE_POLICIES,
    EditContext,
    StoredPlan,
    edit_context,
    pipeline_inputs,
    plan_difference,
    predict_edit,
    predict_stored,
    prediction_output,
    stored_summary,
)
from planner.errors import PlanError, SpecError
from planner.exports import EXPORT_FORMATS, EXPORTS, export_losses, export_plan
from planner.hardware import ACCELERATORS
from planner.layout import layer_codes_from_spec, plan_layout_string, schedule_description
from planner.limits import (
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_MICROBATCHES,
    MAX_PIPELINE_DEVICES,
    MAX_SEQ_LEN,
    RANGES,
    depth_reason,
    pipeline_slots_reason,
)
from planner.observed import summarize as summarize_observed
from planner.parallel.capacity import (DEFAULT_GPU_COUNTS, MAX_GPU_COUNTS, MAX_TOKEN_BUDGET, capacity_check,
                                       capacity_sweep, cluster_of, parse_gpu_counts)
from planner.parallel.config import PRECISIONS, RECOMPUTE_MODES, SHARDING_LABELS, SHARDING_MODES, load_parallel
from planner.parallel.cost import (DEFAULT_EP_DISPATCHER, DEFAULT_FRAMEWORK, DEFAULT_OVERLAP,
                                   DEFAULT_RECOMPUTE_MODULES, EP_DISPATCHERS, EP_DISPATCHERS_TEXT, EXECUTOR_OPTIONS,
                                   FRAMEWORKS, FRAMEWORKS_TEXT, OVERLAPS, RECOMPUTE_MODULES_TEXT, Software,
                                   executor_options, overlap_text, recompute_modules_text)
from planner.parallel.evaluate import STEP_PARTS, shard_profile
from planner.parallel.mapping import RankMapping
from planner.parallel.search import HybridResult, SearchCancelled
from planner.plan import Action, Plan, load_plan
from planner.plan_check import check_plan_structure, validate_plan
from planner.profile import Profile, load_profile
from planner.scheduling import chunks_per_device
from planner.search import DEFAULT_TIME_BUDGET_S, check_model_state_fits, search_plan
from planner.simulator import simulate, simulate_summary
from planner.spec.files import parse_model_document
from planner.spec.model import ModelSpec, load_model_spec
from planner.spec.presets import load_model_preset, model_preset_names
from planner.units import binary_bytes, decimal_count, signed_binary_bytes

ADAPTIS_STRATEGY = "adaptis"
JOB_SCHEDULES = (ADAPTIS_STRATEGY, *BASELINE_SCHEDULES)
BASELINE_CHUNKS = 2  # model chunks per device where the schedule lets us choose (interleaved 1F1B)
HYBRID_SCHEDULE = "hybrid"
CAPACITY_SCHEDULE = "capacity"
MAX_STORED_RANKS = 1024  # GPU coordinates kept in a hybrid job's summary; the rest follow from the configuration
Progress = Callable[[float, str], None]
Cancel = Callable[[], bool]


@dataclass(frozen=True)
class PlanRecord:
    """A plan as predicted, in the fields a stored plan keeps."""

    strategy: str
    plan_doc: dict
    profile_doc: dict
    simulation: dict          # the summary, without timeline and transfers (stored_plan_simulation rebuilds them)
    layout: str
    schedule_summary: str
    iteration_ms: float
    bubble_ratio: float


def predict_stored_plan(stored: StoredPlan) -> dict:
    """A stored plan as its page draws it: plan, metrics, per-device memory rows, timeline, layout, and the v2
    job-level block (``planner.editing.prediction_output``)."""
    context = edit_context(stored)
    return prediction_output(predict_stored(context, stored), context)


def stored_plan_page(stored: StoredPlan, parent: StoredPlan | None = None) -> dict:
    """What the plan page shows of a stored plan: ``output`` (``predict_stored_plan``), ``difference`` from
    ``parent`` (None without one), the cluster's ``max_devices`` and ``capacity_bytes``, ``megatron_reason``,
    why the Megatron layout cannot express the plan (empty when it can), ``exports``: for each framework format
    (``EXPORTS``' ``framework``), ``reason`` (why it cannot take the plan at all; empty when it can) and ``lost``
    (what of the plan it cannot express, the file's opening comment), and ``software``: what its prediction assumes
    (``Software``, from its ``meta``; the defaults for a v1 plan)."""
    context = edit_context(stored)
    output = prediction_output(predict_stored(context, stored), context)
    difference = None if parent is None else plan_difference(predict_stored_plan(parent), output)
    try:
        _export(context, load_plan(stored.plan_doc), "megatron-layout")
        megatron_reason = ""
    except (SpecError, PlanError) as error:
        megatron_reason = error.reason
    return {"output": output, "difference": difference, "max_devices": context.cluster.num_devices,
            "capacity_bytes": context.cluster.device.memory_bytes, "megatron_reason": megatron_reason,
            "exports": _framework_exports(context, load_plan(stored.plan_doc)),
            "software": Software.named(stored.plan_doc.get("meta") or {}, prefix="meta.")}


def _framework_exports(context: EditContext, plan: Plan) -> dict[str, dict]:
    exports = {}
    for fmt, spec in EXPORTS.items():
        if not spec.framework:
            continue
        try:
            exports[fmt] = {"reason": "", "lost": export_losses(fmt, plan, context.spec, context.seq_len)}
        except (SpecError, PlanError) as error:
            exports[fmt] = {"reason": error.reason, "lost": []}
    return exports


def stored_plan_simulation(stored: StoredPlan) -> dict:
    """The simulator's full output for a stored plan on the profile stored with it: metrics, ``timeline`` and
    ``transfers``. A v2 plan's devices are pipeline ranks, on the links between them."""
    plan, cluster = load_plan(stored.plan_doc), load_cluster(stored.cluster_doc)
    if plan.parallel is not None:
        cluster = RankMapping(plan.parallel, cluster).pipeline_cluster()
    return simulate(plan, load_profile(stored.profile_doc), cluster).to_dict()


def default_overlap(cluster: ClusterSpec) -> str:
    """The overlaps a job on ``cluster`` is planned with when it names none: Megatron's defaults (DP overlapped) on
    GPUs; on a CPU cluster, which only this project's executor runs, what that executor overlaps: nothing
    (``EXECUTOR_OPTIONS``)."""
    return overlap_text(EXECUTOR_OPTIONS) if cluster.is_cpu else DEFAULT_OVERLAP


def run_comparison_simulation(stored: StoredPlan) -> dict:
    """What a run of a stored plan is compared with. A pipeline plan: ``stored_plan_simulation``. A v2 plan: predicted
    as this project's executor runs it (``executor_options``: nothing overlapped, CP by all-gather, the plan's recompute
    modules), whatever overlaps and framework its job planned for (those are the frameworks' it is exported to): the
    simulation of its pipeline, with that prediction's ``predicted`` (the step's exposed DP communication and
    optimizer) beside it."""
    plan = load_plan(stored.plan_doc)
    if plan.parallel is None:
        return stored_plan_simulation(stored)
    spec, cluster = load_model_spec(stored.spec_doc), load_cluster(stored.cluster_doc)
    seq_len, options = stored.job_seq_len or spec.seq_len, executor_options(plan.meta)
    profile, ranks = planner_hybrid.pipeline(plan, spec, cluster, seq_len, options)
    simulation = simulate(plan, profile, ranks).to_dict()
    simulation["predicted"] = planner_hybrid.predict(plan, spec, cluster, seq_len, options)["predicted"]
    simulation["recompute_modules"] = recompute_modules_text(options)   # what its selective recomputation runs
    return simulation


def repredict_edit(stored: StoredPlan, doc: object) -> dict:
    """The editor's answer for ``doc``, an edited copy of ``stored``'s document: ``predict_stored_plan``'s fields
    plus ``difference`` from the stored plan (``planner.editing`` describes what ``doc.meta`` may ask)."""
    context = edit_context(stored)
    answer = prediction_output(predict_edit(context, stored, doc), context)
    answer["difference"] = plan_difference(stored_summary(context, stored), answer)
    return answer


def derive_plan(stored: StoredPlan, doc: object, *, derived_from: int, derived_by: str) -> PlanRecord:
    """``doc``, an edited copy of ``stored``'s document, predicted as ``repredict_edit`` does and made a plan
    derived from ``derived_from`` by ``derived_by`` (its lineage is in the document's meta)."""
    prediction = predict_edit(edit_context(stored), stored, doc)
    plan = prediction.plan
    plan.strategy = EDITED_STRATEGY
    plan.meta = {**plan.meta, "derived_from": derived_from, "derived_by": derived_by}
    simulation = {key: value for key, value in prediction.simulation.items() if key not in ("timeline", "transfers")}
    if prediction.hybrid is not None:
        simulation["hybrid"] = prediction.hybrid
    return PlanRecord(strategy=EDITED_STRATEGY, plan_doc=plan.to_dict(), profile_doc=prediction.profile.to_dict(),
                       simulation=simulation, layout=prediction.layout, schedule_summary=prediction.schedule_summary,
                       iteration_ms=prediction.iteration_ms, bubble_ratio=prediction.simulation["bubble_ratio"])


def export_stored_plan(stored: StoredPlan, fmt: str) -> str:
    """A stored plan's text in ``fmt`` (``EXPORT_FORMATS``), as ``python -m planner export`` writes it given the
    plan's model; a format that cannot express the plan is a SpecError on ``format`` saying why."""
    if fmt not in EXPORT_FORMATS:
        raise SpecError("format", f"must be one of {', '.join(EXPORT_FORMATS)}; got {fmt!r}")
    plan = load_plan(stored.plan_doc)
    if fmt in ("plan-json", "torch-csv"):
        return export_plan(fmt, plan, None)
    if EXPORTS[fmt].framework:   # the plan's model and sequence length, no pipeline profile
        context = edit_context(stored)
        return export_plan(fmt, plan, None, None, context.spec, context.seq_len)
    return _export(edit_context(stored), plan, fmt)


def _export(context: EditContext, plan: Plan, fmt: str) -> str:
    """Perfetto's trace or Megatron's layout of ``plan``: both need the profile its pipeline runs on."""
    profile, cluster, _ = pipeline_inputs(context, plan, job_level=False)
    if fmt == "perfetto":
        return export_plan(fmt, plan, profile, cluster)
    try:
        return export_plan(fmt, plan, profile, cluster, context.spec)
    except SpecError as error:
        if error.field == "format":  # Megatron's hybrid models refuse it: the reason says so already
            raise
        raise SpecError("format", f"Megatron's layout cannot express this plan: {error.reason}") from None


@dataclass(frozen=True)
class PipelineJobOutcome:
    """A pipeline job's plans in the order to store them (a search's own plan last) and its summary ({} for a
    baseline), with the job's closing message when it finished and when it was cancelled meanwhile."""

    plans: dict[str, PlanRecord]
    summary: dict
    done: str
    cancelled: str


@dataclass(frozen=True)
class HybridJobOutcome:
    """A hybrid job's best plan and its summary (``planner.parallel.planning``'s result; ``best.plan_id`` is the
    stored plan's to fill in), with the closing messages, and ``short``, the configuration in words."""

    plan: PlanRecord
    summary: dict
    done: str
    cancelled: str
    short: str


@dataclass(frozen=True)
class CapacityOutcome:
    """A capacity job's sweep (``planner.parallel.capacity.capacity_sweep``) with its closing messages."""

    summary: dict
    done: str
    cancelled: str


@dataclass(frozen=True)
class Calibration:
    """A profile recalibrated from a run's observed actions, the cluster with the per-message overhead measured
    between them (the cluster given when there was none to measure), and what to record about both. A hybrid
    run calibrates the cluster alone (its links and per-kernel overhead; ``profile`` None)."""

    profile: Profile | None
    cluster: ClusterSpec
    overhead_measured: bool
    record: dict


def parse_action(name: str) -> Action:
    """An action's name ("2F0") as its stage, kind and micro-batch; ``SpecError`` naming ``action`` otherwise."""
    return Action.parse(name)


def model_with_shape(spec: ModelSpec, *, seq_len: int | None = None, micro_batch_size: int | None = None) -> ModelSpec:
    """``spec`` trained on sequences of ``seq_len`` tokens in micro-batches of ``micro_batch_size`` (None: the spec's
    own), checked as an uploaded document is (``seq_len`` within the model's learned positions and the limits), the
    error naming the field."""
    doc = spec.to_dict()
    for key, value in (("seq_len", seq_len), ("micro_batch_size", micro_batch_size)):
        if value is not None:
            doc[key] = value
    return load_model_spec(doc)


def check_pipeline_job(*, spec: ModelSpec, cluster: ClusterSpec, num_devices: int, num_microbatches: int,
                       schedule: str, partition: str, memory_limit_bytes: int | None = None) -> None:
    """SpecError naming the field unless a pipeline job of this shape can be planned: for a search, that includes
    the model state fitting the devices' memory (``memory_limit_bytes``, else the cluster's), the search's own first
    check, on the spec's analytic profile, so a request that cannot fit is refused before it is queued."""
    if schedule not in JOB_SCHEDULES:
        raise SpecError("schedule", f"must be one of {', '.join(JOB_SCHEDULES)}; got {schedule!r}")
    searched = schedule == ADAPTIS_STRATEGY
    if not searched and partition not in PARTITIONS:
        raise SpecError("partition", f"must be one of {', '.join(PARTITIONS)}; got {partition!r}")
    if not 1 <= num_devices <= cluster.num_devices:
        raise SpecError("num_devices", f"must be between 1 and the cluster's {cluster.num_devices} devices "
                                       f"({cluster.name}); got {num_devices}")
    if num_devices > MAX_PIPELINE_DEVICES:
        raise SpecError("num_devices", f"a pipeline of more than {MAX_PIPELINE_DEVICES} devices is not planned; "
                                       f"got {num_devices} (plan the pipeline inside data and tensor parallelism)")
    if not 1 <= num_microbatches <= MAX_MICROBATCHES:
        raise SpecError("num_microbatches", f"must be between 1 and {MAX_MICROBATCHES}; got {num_microbatches}")
    too_big = pipeline_slots_reason(num_devices, num_microbatches)
    if too_big:
        raise SpecError("num_microbatches", too_big)
    stages = num_devices if searched else num_devices * chunks_per_device(schedule, BASELINE_CHUNKS)
    if stages > spec.num_layers:
        raise SpecError("num_devices", f"{schedule} on {num_devices} devices needs {stages} stages but "
                                       f"{spec.name!r} has only {spec.num_layers} layers")
    if searched:
        check_model_state_fits(analytic_profile(spec, cluster), num_devices, memory_limit_bytes=memory_limit_bytes,
                               cluster=cluster)


def plan_pipeline_job(*, spec: ModelSpec, cluster: ClusterSpec, profile: Profile, schedule: str, partition: str,
                      num_devices: int, num_microbatches: int, seed: int, time_budget_s: float,
                      memory_limit_bytes: int | None, progress: Progress | None = None,
                      cancel: Cancel | None = None) -> PipelineJobOutcome:
    """Plan a pipeline job on ``profile``: the AdaPtis search (``schedule`` "adaptis"; ``progress`` and ``cancel``
    are its callbacks) with every baseline it scored, or one baseline; each plan validated and simulated."""
    if schedule == ADAPTIS_STRATEGY:
        plans, summary = _searched_plans(profile, cluster, num_devices, num_microbatches, seed=seed,
                                         time_budget_s=time_budget_s, memory_limit_bytes=memory_limit_bytes,
                                         progress=progress, cancel=cancel)
        gap = f"{summary['gap']:.1%} above the lower bound"
        done, cancelled = f"AdaPtis plan ready: {gap}", f"Cancelled: kept the best plan found so far ({gap})"
    else:
        plan = build_baseline(schedule, profile, num_devices, num_microbatches, cluster=cluster, partition=partition,
                              chunks=BASELINE_CHUNKS)
        plans, summary = {plan.strategy: plan}, {}
        done, cancelled = "Plan ready", "Cancelled: kept the plan"
    records = {strategy: _plan_record(strategy, plan, spec, profile, cluster) for strategy, plan in plans.items()}
    return PipelineJobOutcome(plans=records, summary=summary, done=done, cancelled=cancelled)


def _plan_record(strategy: str, plan: Plan, spec: ModelSpec, profile: Profile, cluster: ClusterSpec) -> PlanRecord:
    validate_plan(plan, spec.num_layers)
    simulation = simulate(plan, profile, cluster).to_dict(include_timeline=False)  # stored_plan_simulation's
    return PlanRecord(strategy=strategy, plan_doc=plan.to_dict(), profile_doc=profile.to_dict(), simulation=simulation,
                      layout=plan_layout_string(plan, layer_codes_from_spec(spec)),
                      schedule_summary=schedule_description(plan), iteration_ms=simulation["iteration_ms"],
                      bubble_ratio=simulation["bubble_ratio"])


def _searched_plans(profile: Profile, cluster: ClusterSpec, num_devices: int, num_microbatches: int,
                    **options) -> tuple[dict[str, Plan], dict]:
    """The search's plans and summary. Every baseline the search scored is kept, so every row of the comparison
    is a plan that can be run: slowest first and the AdaPtis plan last, so that, stored in this order, a job's
    plans (newest first) read best first and the AdaPtis plan is the job's latest, the one its page opens on."""
    result = search_plan(profile, num_devices, num_microbatches, cluster=cluster, **options)
    plans = {name: result.baseline_plans[name]
             for name, _ in sorted(result.baselines.items(), key=lambda item: -item[1]["iteration_ms"])}
    plans[ADAPTIS_STRATEGY] = result.plan
    predicted = result.plan.predicted
    summary = {
        "iteration_ms": result.iteration_ms, "bubble_ratio": predicted["bubble_ratio"],
        "peak_memory_bytes": predicted["peak_memory_bytes"],
        "lower_bound_ms": result.lower_bound_ms, "lower_bound": result.lower_bound, "gap": result.gap,
        "binding": result.plan.meta["binding"], "memory_binding": result.plan.meta["memory_binding"],
        "memory_limit_bytes": result.plan.meta.get("memory_limit_bytes"), "origin": result.plan.meta.get("origin"),
        "layout": result.plan.meta.get("layout"), "schedule": result.plan.meta.get("schedule"),
        "stats": result.stats, "candidates": kept_plan_first(result.candidates, result.plan),
        "baselines": result.baselines, "cancelled": result.cancelled,
    }
    return plans, summary


def kept_plan_first(candidates: list[dict], plan: Plan) -> list[dict]:
    """The search's candidates with the plan the job keeps as the first row. A search stopped early (cancelled, or
    out of time) may keep a baseline that beat every candidate it had scored, which the candidates do not list."""
    layout, iteration_ms = plan.meta.get("layout"), plan.predicted["iteration_ms"]
    others = [row for row in candidates
              if not (row["layout"] == layout and math.isclose(row["iteration_ms"], iteration_ms, rel_tol=1e-9))]
    kept = next((row for row in candidates if row not in others), None) or {
        "iteration_ms": iteration_ms, "num_stages": len(plan.stages), "layout": layout,
        "schedule": plan.meta.get("schedule", ""), "origin": plan.meta.get("origin", "")}
    return [{**row, "rank": rank} for rank, row in enumerate([{**kept, "kept": True}, *others], start=1)]


def check_hybrid_job(*, spec: ModelSpec, cluster: ClusterSpec, gpus: int, seq_len: int, global_batch: int,
                     pins: dict, software: Software = Software()) -> None:
    """The SpecError the hybrid search would raise for this job (``planner.parallel.planning.check``), without
    searching: on the job's ``software``, whose framework and recompute modules change what fits."""
    planner_hybrid.check(spec, cluster, gpus, seq_len, global_batch, pins, options=software.options())


def plan_hybrid_job(*, spec: ModelSpec, cluster: ClusterSpec, gpus: int, seq_len: int, global_batch: int,
                    pins: dict, time_budget_s: float, software: Software = Software(),
                    progress: Progress | None = None, cancel: Cancel | None = None) -> HybridJobOutcome | None:
    """The hybrid search for a job on its ``software`` (the overlaps, framework, recompute modules and MoE
    dispatcher the cost model assumes, ``Software``), its best plan validated and simulated on its pipeline ranks;
    None when it was cancelled before any plan was simulated. SpecError (nothing fits, say) propagates."""
    try:
        result = planner_hybrid.search(spec, cluster, gpus, seq_len, global_batch, pins, time_budget_s=time_budget_s,
                                       progress=progress, cancel=cancel, options=software.options())
    except SearchCancelled:
        return None
    metrics = result.best.metrics()
    found = (f"{result.best.config.short()}, {metrics['tokens_per_s']:,.0f} tokens/s, MFU {metrics['mfu']:.1%}, "
             f"{metrics['iteration_ms'] / 1e3:.2f} s per step")
    record = _hybrid_record(result)
    return HybridJobOutcome(plan=record, summary=_hybrid_summary(result, record), done=f"Hybrid plan ready: {found}",
                            cancelled=f"Cancelled: kept the best plan simulated so far ({found})",
                            short=result.best.config.short())


def plan_capacity_job(*, spec: ModelSpec, cluster: ClusterSpec, gpu_counts: list[int], seq_len: int, global_batch: int,
                      token_budget: int, pins: dict, software: Software = Software(),
                      progress: Progress | None = None, cancel: Cancel | None = None) -> CapacityOutcome | None:
    """The best configuration at each GPU count of ``cluster``'s kind and what ``token_budget`` tokens cost there;
    None when cancelled before any count had a configuration. SpecError (no count has one) propagates."""
    try:
        summary = capacity_sweep(spec, cluster, tuple(gpu_counts), seq_len, global_batch, token_budget, pins,
                                 progress=progress, cancel=cancel, options=software.options())
    except SearchCancelled:
        return None
    planned = {point["gpus"]: point for point in summary["points"] if "error" not in point}
    fastest, cheapest = planned[summary["fastest_gpus"]], planned[summary["cheapest_gpus"]]
    found = (f"{len(planned)} of {len(summary['points'])} GPU counts planned; fastest {fastest['gpus']:,} GPUs "
             f"({fastest['days']:,.1f} days), cheapest {cheapest['gpus']:,} GPUs "
             f"({cheapest['gpu_hours']:,.0f} GPU-hours)")
    return CapacityOutcome(summary=summary, done=f"Capacity plan ready: {found}",
                           cancelled=f"Cancelled: kept the counts searched so far ({found})")


def _hybrid_record(result: HybridResult) -> PlanRecord:
    """The best plan: the v2 document, the profile of its pipeline ranks and their simulation."""
    best = result.best
    plan = best.plan
    validate_plan(plan, best.job.model.num_layers)
    profile, pipeline_cluster = shard_profile(best.job, best.config, best.chunks)
    simulation = simulate(plan, profile, pipeline_cluster).to_dict(include_timeline=False)
    # the row keeps the memory its pages show: every GPU's under the job's sharding and buffers
    simulation.update(peak_memory_bytes=round(best.peak_memory_bytes),
                      per_device=best.gpu_memory_rows(simulation["per_device"]))
    doc = result.plan_document()
    load_plan(doc)  # what a plan page will load: within the planner's bounds (planner.limits)
    return PlanRecord(strategy=doc["strategy"], plan_doc=doc, profile_doc=profile.to_dict(), simulation=simulation,
                      layout=doc["meta"].get("layout", ""), schedule_summary=schedule_description(plan),
                      iteration_ms=best.iteration_ms, bubble_ratio=simulation["bubble_ratio"])


def _hybrid_summary(result: HybridResult, record: PlanRecord) -> dict:
    """What a hybrid job keeps: ``best`` (parallel, short, predicted, memory, plan_id (None: the stored plan's to
    fill in), layout, rank_mapping with the first ``MAX_STORED_RANKS`` GPUs' coordinates), ``runners_up``,
    considered, pruned_by_memory, seconds, stats and cancelled. The plan document itself is the plan's."""
    best = result.best
    summary = result.to_dict(ranks=False)
    mapping = RankMapping(best.config, best.job.cluster)
    summary["best"].pop("plan")
    summary["best"].update(plan_id=None, layout=record.layout,
                           rank_mapping=mapping.to_dict(min(best.config.num_gpus, MAX_STORED_RANKS)))
    summary["cancelled"] = bool(result.stats.get("cancelled"))
    return summary


def calibrate_from_run(*, plan_doc: dict, profile_doc: dict, cluster_doc: dict, events: list[dict],
                       warmup_steps: int) -> Calibration:
    """The profile a run's observed actions calibrate (after its warm-up steps; all of them when it had no other
    step), and the cluster with the per-message overhead measured between them (``planner.calibrate``);
    ``record`` has the predictions with the calibrated compute and with the measured overhead."""
    plan = load_plan(plan_doc)
    events = after_warmup(plan, events, warmup_steps) or events
    cluster = load_cluster(cluster_doc)
    calibrated = recalibrate(load_profile(profile_doc), plan, events)
    compute_only = simulate_summary(plan, calibrated, cluster)
    try:
        overhead_us = measure_message_overhead(plan, events)
    except SpecError as error:
        measured, overhead = cluster, {"message_overhead_us": None,
                                       "message_overhead_note": f"the run's timings {error.reason}"}
    else:
        measured = with_message_overhead(cluster, overhead_us)
        overhead = {"message_overhead_us": overhead_us, "message_overhead_note": ""}
    after = compute_only if measured is cluster else simulate_summary(plan, calibrated, measured)
    return Calibration(profile=calibrated, cluster=measured, overhead_measured=measured is not cluster, record={
        "predicted_compute_calibrated_ms": compute_only["iteration_ms"], "predicted_after_ms": after["iteration_ms"],
        "observed_actions": len(events), **overhead})


def calibrate_hybrid_from_run(*, plan_doc: dict, model_doc: dict, cluster_doc: dict, events: list[dict],
                              warmup_steps: int) -> Calibration:
    """The cluster a hybrid run's events calibrate (after its warm-up steps; all of them when it had no other
    step): each link class's collective latency and bandwidth fitted to its collectives
    (``planner.calibrate.fit_collective_links``), then the device's per-kernel overhead fitted so that the plan's
    analytic shards take what its actions took (``fit_run_kernel_overhead``). ``model_doc`` is the model the run
    executed (a scaled-down copy, where it was one). The hybrid search plans on that cluster alone: ``profile`` is
    None. ``record`` has the plan's pipeline (what a run's iteration spans) predicted on the cluster given, with the
    fitted overhead alone and with both fits, and the fits. SpecError naming
    ``observed_events`` when the run has no collective or no action to fit to."""
    plan, model, cluster = load_plan(plan_doc), load_model_spec(model_doc), load_cluster(cluster_doc)
    if plan.parallel is None:
        raise SpecError("plan", "is a pipeline plan (adaptis.plan/v1): calibrate its profile (calibrate_from_run)")
    steady = [event for event in events if event.get("step", 0) >= warmup_steps] or events
    fits = fit_collective_links(plan.parallel, cluster, steady)
    linked = with_fitted_links(cluster, fits)
    options = executor_options(plan.meta)   # as the executor that ran it runs it
    overhead_us = fit_run_kernel_overhead(plan, model, linked, model.seq_len, steady, options)
    calibrated = with_kernel_overhead(linked, overhead_us)

    def pipeline_ms(on: ClusterSpec) -> float:
        return planner_hybrid.predict(plan, model, on, model.seq_len, options)["predicted"]["pipeline_ms"]

    return Calibration(profile=None, cluster=calibrated, overhead_measured=True, record={
        "predicted_compute_calibrated_ms": pipeline_ms(with_kernel_overhead(cluster, overhead_us)),
        "predicted_after_ms": pipeline_ms(calibrated), "predicted_before_ms": pipeline_ms(cluster),
        "observed_actions": sum(1 for event in steady if event.get("type", "action") == "action"),
        "observed_collectives": sum(fit.samples for fit in fits), "kernel_overhead_us": overhead_us,
        "links": [fit.to_dict() for fit in fits], "message_overhead_us": None, "message_overhead_note": ""})


def simulate_on_profile(stored: StoredPlan, profile_doc: dict) -> dict:
    """``stored_plan_simulation`` of the plan on another profile of its model (one measured on the runs' host)."""
    return stored_plan_simulation(replace(stored, profile_doc=profile_doc))


def plan_run_shape(plan_doc: dict, spec: ModelSpec) -> tuple[int, bool]:
    """A plan's ranks and whether they run I and W apart, after checking it can run ``spec``'s layers."""
    plan = load_plan(plan_doc)
    check_plan_structure(plan, spec.num_layers)
    return plan.num_devices, plan.uses_split_backward()


# The vocabularies and types a front end's forms and serializers offer, and the document loaders (untrusted text or
# JSON to a checked document), come from their homes through here.
LOADERS = ["load_cluster", "load_cluster_preset", "load_model_preset", "load_model_spec", "load_parallel", "load_plan",
           "load_profile", "parse_document", "parse_model_document"]
__all__ = [*LOADERS, "ACCELERATORS", "ACTION_KINDS", "ADAPTIS_STRATEGY", "ActionKind", "BASELINE_SCHEDULES", "EXPORTS",
           "DEFAULT_TIME_BUDGET_S", "EXPORT_FORMATS", "HYBRID_SCHEDULE", "CAPACITY_SCHEDULE", "DEFAULT_GPU_COUNTS",
           "MAX_GPU_COUNTS", "MAX_TOKEN_BUDGET", "STEP_PARTS", "CapacityOutcome", "capacity_check", "cluster_of",
           "parse_gpu_counts",
           "plan_capacity_job", "JOB_SCHEDULES", "LIST_POLICIES", "MAX_GLOBAL_BATCH", "MAX_GPUS", "MAX_MICROBATCHES",
           "MAX_PIPELINE_DEVICES", "MAX_SEQ_LEN", "PARTITIONS", "RANGES", "PRECISIONS", "RECOMPUTE_MODES",
           "SHARDING_LABELS", "SHARDING_MODES", "DEFAULT_OVERLAP", "default_overlap", "OVERLAPS",
           "DEFAULT_FRAMEWORK", "FRAMEWORKS", "FRAMEWORKS_TEXT", "Software",
           "DEFAULT_RECOMPUTE_MODULES", "RECOMPUTE_MODULES", "RECOMPUTE_MODULES_TEXT", "DEFAULT_EP_DISPATCHER",
           "EP_DISPATCHERS", "EP_DISPATCHERS_TEXT", "SCHEDULE_POLICIES",
           "Calibration", "ClusterSpec", "HybridJobOutcome", "ModelSpec", "PipelineJobOutcome", "PlanRecord",
           "Profile", "RankMapping", "StoredPlan", "analytic_profile", "calibrate_from_run", "check_hybrid_job",
           "check_pipeline_job", "count_parameters", "depth_reason", "derive_plan", "export_stored_plan",
           "is_cluster_preset", "kept_plan_first", "model_preset_names", "model_with_shape", "parse_action",
           "plan_gpus", "plan_hybrid_job", "plan_pipeline_job", "plan_run_shape", "predict_stored_plan",
           "preset_names", "repredict_edit", "run_comparison_simulation", "simulate_on_profile", "stored_plan_page",
           "stored_plan_simulation",
           "binary_bytes", "decimal_count", "calibrate_hybrid_from_run", "signed_binary_bytes",
           "summarize_observed",
           "throughput_difference"]
