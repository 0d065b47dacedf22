"""The plan editor's re-prediction: an edited plan document, predicted as the plan page draws it.

The browser edits a copy of a stored plan's ``adaptis.plan/v1`` or ``/v2`` document (stage boundaries, stage
devices, split and merged stages, micro-batches, the parallel degrees) and posts the whole document; what it asks
of the scheduler travels in the document's ``meta``:

- ``meta.schedule_policy``: ``auto`` (the default) keeps the document's per-device orders where they still fit
  its stages and micro-batches (moving a boundary keeps them) and otherwise lets the list scheduler order the
  actions, with split I/W backwards when the orders had them; ``keep`` insists on the document's orders (their
  errors are the answer); one of ``LIST_POLICIES`` always reschedules with that policy;
- ``meta.baseline``: a baseline family (``gpipe``, ``1f1b``, ...) replaces partition, placement and orders with
  that baseline's for the document's devices and micro-batches (``meta.partition``: uniform or time-balanced);
- ``meta.edits``: the edits made, in words, kept with a saved plan as its lineage.

The answer (``prediction_output``) is what the page draws: the plan as predicted (with its orders), metrics,
per-device rows with memory against the device's capacity, the timeline, and the difference from the plan being
edited. Bad edits are a ``SpecError`` naming the field ("stage 3 would be empty", "device 2 needs 91.0 GiB of
80.0 GiB"). A stored plan is predicted the same way (``predict_stored``), from its documents (``StoredPlan``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from planner.baselines import BASELINE_SCHEDULES, PARTITIONS, build_baseline
from planner.cluster import ClusterSpec, load_cluster
from planner.actions import ACTION_KINDS
from planner.comparison import plan_gpus, throughput_difference
from planner.errors import PlanError, SpecError
from planner.layout import Layout, layer_codes_from_spec, plan_layout_string, schedule_description
from planner.limits import MAX_MICROBATCHES
from planner.parallel import planning as hybrid
from planner.partition import partition_layers
from planner.plan import PLAN_FORMAT_V2, Action, Plan, Stage, load_plan
from planner.profile import Profile, load_profile
from planner.search.evaluate import CandidateScorer
from planner.search.list_scheduler import UNBOUNDED_INFLIGHT, SchedulePolicy, list_schedule
from planner.simulator import simulate
from planner.plan_check import check_plan_structure
from planner.spec.model import ModelSpec, load_model_spec

GIB = 1024 ** 3
EDITED_STRATEGY = "edited"
LIST_POLICIES = {
    "one-f-one-b": ("1F1B-like: full backward first, one micro-batch pushed through at a time",
                    SchedulePolicy(split_backward=False)),
    "zero-bubble": ("zero-bubble: backward split into I and W, W deferred into the bubbles",
                    SchedulePolicy(split_backward=True)),
    "zero-bubble-deep": ("zero-bubble with 1.5x the in-flight micro-batches",
                         SchedulePolicy(split_backward=True, inflight_scale=1.5)),
    "fill-drain": ("GPipe-like: every forward first, then the backwards",
                   SchedulePolicy(split_backward=False, backward_first=False, forward_order="old",
                                  inflight_scale=UNBOUNDED_INFLIGHT)),
}
SCHEDULE_POLICIES = ("auto", "keep", *LIST_POLICIES)


@dataclass(frozen=True)
class StoredPlan:
    """A stored plan's documents: the plan, the profile it was predicted on, its job's model and cluster, the
    job's sequence length (a hybrid job's) and the stored simulation summary."""

    plan_doc: dict
    profile_doc: dict | None
    spec_doc: dict
    cluster_doc: dict
    job_seq_len: int | None = None
    simulation: dict | None = None


@dataclass(frozen=True)
class EditContext:
    """What a stored plan is predicted with: its model, its job's cluster, and its profile (v1), or the sequence
    length its v2 pipeline profile is derived from."""

    spec: ModelSpec
    cluster: ClusterSpec
    profile: Profile | None
    seq_len: int | None


@dataclass(frozen=True)
class Prediction:
    plan: Plan
    profile: Profile
    simulation: dict          # the simulator's output, with the timeline
    hybrid: dict | None       # planner.parallel.planning.predict's block for a v2 plan
    rescheduled: str          # the list policy that ordered the actions; empty when the orders were kept
    layout: str
    schedule_summary: str

    @property
    def iteration_ms(self) -> float:
        """The plan's step: the whole job's for a v2 plan, its pipeline's otherwise."""
        if self.hybrid is not None:
            return self.hybrid["predicted"]["iteration_ms"]
        return self.simulation["iteration_ms"]


def edit_context(stored: StoredPlan) -> EditContext:
    seq_len = None
    if stored.plan_doc.get("format") == PLAN_FORMAT_V2:
        seq_len = (stored.plan_doc.get("meta") or {}).get("seq_len") or stored.job_seq_len or (
            (stored.profile_doc or {}).get("microbatch") or {}).get("seq_len")
    return EditContext(spec=load_model_spec(stored.spec_doc), cluster=load_cluster(stored.cluster_doc),
                       profile=None if seq_len else load_profile(stored.profile_doc), seq_len=seq_len)


def pipeline_inputs(context: EditContext, plan: Plan, *, job_level: bool = True) -> tuple[Profile, ClusterSpec,
                                                                                          dict | None]:
    """The profile and cluster ``plan``'s pipeline runs on, and (``job_level``) the job-level block of a v2 plan."""
    if plan.parallel is None:
        return context.profile, context.cluster, None
    if not context.seq_len:
        raise SpecError("parallel", "this v2 plan does not say its sequence length (meta.seq_len)")
    profile, cluster = hybrid.pipeline(plan, context.spec, context.cluster, context.seq_len)
    block = hybrid.predict(plan, context.spec, context.cluster, context.seq_len) if job_level else None
    return profile, cluster, block


def predict_stored(context: EditContext, stored: StoredPlan) -> Prediction:
    """A stored plan as the plan page shows it (the same prediction the editor answers with)."""
    return _predicted(context, load_plan(stored.plan_doc), rescheduled="")


def stored_summary(context: EditContext, stored: StoredPlan) -> dict:
    """The stored plan's metrics and memory per device, as ``plan_difference`` reads them: from its stored
    simulation summary where it has one (a v1 plan), else predicted again."""
    summary = stored.simulation or {}
    if stored.plan_doc.get("format") == PLAN_FORMAT_V2 or "per_device" not in summary:
        return prediction_output(predict_stored(context, stored), context)
    capacity = context.cluster.device.memory_bytes
    return {"metrics": summary, "plan": stored.plan_doc,
            "per_device": [{**row, "memory_bytes": row["peak_memory_bytes"], "capacity_bytes": capacity}
                           for row in summary["per_device"]]}


def predict_edit(context: EditContext, stored: StoredPlan, doc: object) -> Prediction:
    """``doc``, an edited copy of ``stored``'s document, predicted as its ``meta`` asks (the module docstring)."""
    if not isinstance(doc, dict):
        raise SpecError("plan", f"must be a plan document (a JSON object), got {type(doc).__name__}")
    doc = copy.deepcopy(doc)
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    policy = meta.get("schedule_policy", "auto")
    if policy not in SCHEDULE_POLICIES:
        raise SpecError("meta.schedule_policy", f"must be one of {', '.join(SCHEDULE_POLICIES)}; got {policy!r}")
    _check_stages_not_empty(doc)
    _check_sizes(doc, context)
    if isinstance(doc.get("parallel"), dict):
        doc["parallel"]["num_microbatches"] = doc.get("num_microbatches")
        doc["parallel"]["pp"] = doc.get("num_devices")
        # the stages per rank follow the edited stages (``Plan.to_dict`` writes them again where every rank holds
        # as many); the stored plan's count would refuse a re-placed plan
        doc["parallel"].pop("vpp", None)
    baseline = meta.get("baseline")
    if baseline:
        plan = _baseline_plan(context, doc, baseline, meta.get("partition") or "uniform")
        return _predicted(context, plan, rescheduled=f"the {baseline} baseline")
    doc.setdefault("actions", [[] for _ in range(doc["num_devices"])])
    if len(doc["actions"]) != doc["num_devices"]:
        doc["actions"] = [[] for _ in range(doc["num_devices"])]
    plan = load_plan(doc)
    devices_used = {stage.device for stage in plan.stages}
    if max(devices_used) >= plan.num_devices or (plan.num_devices != stored.plan_doc["num_devices"]
                                                 and devices_used != set(range(plan.num_devices))):
        plan.stages = _relaid_stages(context, plan)
    if policy == "keep":
        return _predicted(context, plan, rescheduled="")
    if policy == "auto":
        try:
            check_plan_structure(plan, context.spec.num_layers)
            return _predicted(context, plan, rescheduled="")
        except PlanError:
            policy = "zero-bubble" if plan.uses_split_backward() else "one-f-one-b"
    return _predicted(context, _rescheduled(context, plan, LIST_POLICIES[policy][1]), rescheduled=policy)


def _check_stages_not_empty(doc: dict) -> None:
    stages = doc.get("stages")
    if not isinstance(stages, list) or not stages:
        raise SpecError("stages", "the plan needs at least one stage")
    for index, stage in enumerate(stages):
        if isinstance(stage, dict) and stage.get("layers") == []:
            raise SpecError(f"stages[{index}].layers", f"stage {index} would be empty")


def _check_sizes(doc: dict, context: EditContext) -> None:
    devices, microbatches = doc.get("num_devices"), doc.get("num_microbatches")
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise SpecError("num_devices", f"must be an integer >= 1, got {devices!r}")
    if doc.get("format") != PLAN_FORMAT_V2 and devices > context.cluster.num_devices:
        raise SpecError("num_devices", f"the cluster ({context.cluster.name}) has {context.cluster.num_devices} "
                                       f"devices, the plan asks for {devices}")
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or not 1 <= microbatches <= MAX_MICROBATCHES:
        raise SpecError("num_microbatches",
                        f"must be an integer between 1 and {MAX_MICROBATCHES}, got {microbatches!r}")
    if len(doc["stages"]) > context.spec.num_layers:
        raise SpecError("stages", f"{len(doc['stages'])} stages need as many layers; the model has "
                                  f"{context.spec.num_layers}")


def _relaid_stages(context: EditContext, plan: Plan) -> list[Stage]:
    """After the device count changed: the same number of stages per device as before where the layers allow,
    partitioned evenly and placed in a loop."""
    old_devices = max(stage.device for stage in plan.stages) + 1
    chunks = max(1, round(len(plan.stages) / old_devices))
    count = min(plan.num_devices * chunks, context.spec.num_layers)
    profile = pipeline_inputs(context, plan, job_level=False)[0]
    groups = partition_layers("uniform", profile, count)
    return [Stage(tuple(layers), index % plan.num_devices) for index, layers in enumerate(groups)]


def _baseline_plan(context: EditContext, doc: dict, family: str, partition: str) -> Plan:
    if family not in BASELINE_SCHEDULES:
        raise SpecError("meta.baseline", f"must be one of {', '.join(BASELINE_SCHEDULES)}; got {family!r}")
    if partition not in PARTITIONS:
        raise SpecError("meta.partition", f"must be one of {', '.join(PARTITIONS)}; got {partition!r}")
    doc["actions"] = [[] for _ in range(doc["num_devices"])]
    shape = load_plan(doc)
    profile, cluster, _ = pipeline_inputs(context, shape, job_level=False)
    try:
        plan = build_baseline(family, profile, shape.num_devices, shape.num_microbatches, cluster=cluster,
                              partition=partition)
    except (PlanError, SpecError) as error:
        raise SpecError("meta.baseline", f"{family} on {shape.num_devices} devices: {error.reason}") from None
    plan.parallel = shape.parallel
    if plan.parallel is not None and not isinstance(plan.parallel.recompute, str):
        raise SpecError("parallel.recompute", "a baseline changes the stages: give one recompute mode for all")
    plan.meta = {**plan.meta, **(doc.get("meta") or {})}
    return plan


def _rescheduled(context: EditContext, plan: Plan, policy: SchedulePolicy) -> Plan:
    """``plan``'s stages ordered by the list scheduler (the search's), without memory caps: memory is checked on
    the result, where the answer can say which device is over."""
    profile, cluster, _ = pipeline_inputs(context, plan, job_level=False)
    scorer = CandidateScorer(profile, plan.num_devices, plan.num_microbatches, cluster=cluster)
    times = scorer.stage_times(Layout.of_stages(plan.stages, context.spec.num_layers))
    schedule = list_schedule(times, plan.num_microbatches, policy)
    plan.actions = [[Action(stage, ACTION_KINDS[kind], microbatch) for stage, kind, microbatch in order]
                    for order in schedule.orders]
    return plan


def _predicted(context: EditContext, plan: Plan, *, rescheduled: str) -> Prediction:
    profile, cluster, job_block = pipeline_inputs(context, plan)
    simulation = simulate(plan, profile, cluster).to_dict()
    plan.predicted = {key: simulation[key] for key in ("iteration_ms", "bubble_ratio", "peak_memory_bytes")}
    prediction = Prediction(plan=plan, profile=profile, simulation=simulation, hybrid=job_block,
                            rescheduled=rescheduled,
                            layout=plan_layout_string(plan, layer_codes_from_spec(context.spec)),
                            schedule_summary=schedule_description(plan))
    _check_memory(prediction, context)
    return prediction


def device_memory_rows(prediction: Prediction, context: EditContext) -> list[dict]:
    """Per pipeline device: the bytes the memory bars show (a v2 plan's whole GPU: model state after sharding plus
    activations) against the device's capacity."""
    capacity = context.cluster.device.memory_bytes
    rows = []
    for row in prediction.simulation["per_device"]:
        used = row["peak_memory_bytes"]
        if prediction.hybrid is not None:
            used = prediction.hybrid["memory"][row["device"]]["total_bytes"]
        rows.append({**row, "memory_bytes": used, "capacity_bytes": capacity, "fits": used <= capacity})
    return rows


def _check_memory(prediction: Prediction, context: EditContext) -> None:
    for row in device_memory_rows(prediction, context):
        if not row["fits"]:
            raise SpecError("memory", f"device {row['device']} needs {row['memory_bytes'] / GIB:.1f} GiB of "
                                      f"{row['capacity_bytes'] / GIB:.1f} GiB")


def prediction_output(prediction: Prediction, context: EditContext) -> dict:
    simulation = prediction.simulation
    metrics = {key: simulation[key] for key in ("iteration_ms", "bubble_ratio", "tokens_per_s", "mfu",
                                                 "peak_memory_bytes")}
    if prediction.hybrid is not None:
        metrics.update(pipeline_ms=simulation["iteration_ms"], **{
            key: prediction.hybrid["predicted"][key] for key in ("iteration_ms", "tokens_per_s", "mfu",
                                                                 "peak_memory_bytes")})
    plan = prediction.plan
    return {"plan": plan.to_dict(), "metrics": metrics, "per_device": device_memory_rows(prediction, context),
            "timeline": simulation["timeline"], "layout": prediction.layout,
            "schedule_summary": prediction.schedule_summary, "rescheduled": prediction.rescheduled,
            "num_layers": context.spec.num_layers, "layer_codes": layer_codes_from_spec(context.spec),
            "hybrid": prediction.hybrid}


def plan_difference(before: dict, after: dict) -> dict:
    """``after`` minus ``before``: iteration time, bubble, and each device's memory (None on a device one lacks),
    and the throughput (``planner.comparison``: faster per token, and whether the batch or the GPUs changed)."""
    memory_before = {row["device"]: row["memory_bytes"] for row in before["per_device"]}
    memory_after = {row["device"]: row["memory_bytes"] for row in after["per_device"]}
    devices = sorted(set(memory_before) | set(memory_after))
    throughput = throughput_difference(*({**output["metrics"], "gpus": plan_gpus(output["plan"])}
                                         for output in (before, after)))
    return {
        **throughput,
        "iteration_ms": after["metrics"]["iteration_ms"] - before["metrics"]["iteration_ms"],
        "iteration_ratio": after["metrics"]["iteration_ms"] / before["metrics"]["iteration_ms"],
        "bubble_ratio": after["metrics"]["bubble_ratio"] - before["metrics"]["bubble_ratio"],
        "per_device": [{"device": device, "memory_bytes_before": memory_before.get(device),
                        "memory_bytes_after": memory_after.get(device),
                        "memory_bytes": (memory_after[device] - memory_before[device]
                                         if device in memory_before and device in memory_after else None)}
                       for device in devices]}
