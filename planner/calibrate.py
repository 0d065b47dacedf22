"""Closed loop: fit a profile to observed per-action timings, so the next search plans on what really ran.

The executor reports one event per action (``{"type": "action", "action": "2F0", "start_ms", "end_ms",
...}``). For every stage of the plan and every kind of work (forward, input-gradient backward, weight
backward) the fit takes the mean observed duration, divides it by the duration the profile predicts, and
multiplies each of the stage's layers by that factor. The stage's observed time is thus spread over its
layers in proportion to their predicted shares. A full ``B`` scales both backward parts by one factor.
Kinds never observed on a stage take the median factor of the same kind on the other stages (a device-wide
speed difference carries over), or stay as they are.

The mean, not the median: an iteration adds its actions' times up, and on a shared host their distribution
has a long right tail (a median of tiny-llama's actions left a run's busy time 5-10 % short). So callers
leave warm-up steps out: the executor's summary counts the first of several steps as warm-up, and
``python -m planner calibrate --warmup`` does the same.

The cluster is calibrated too: ``measure_message_overhead`` reads the links' per-message overhead off the
time between actions (``fit_message_overhead`` fits it to a whole iteration instead), and
``fit_kernel_overhead`` the device's per-kernel overhead off a measured profile, so that analytic profiles
of models the device has not run start from its real fixed cost per op.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import fmean, median

import numpy as np

from planner.actions import ActionKind
from planner.cluster import ClusterSpec
from planner.cost import analytic_profile
from planner.errors import SpecError
from planner.observed import step_spans
from planner.parallel.config import ParallelConfig
from planner.parallel.cost import EXECUTOR_OPTIONS, CostOptions, collective_terms
from planner.parallel.mapping import RankMapping
from planner.parallel.planning import pipeline
from planner.plan import Action, Plan
from planner.profile import Profile
from planner.simulator import simulate
from planner.spec.model import ModelSpec

PARTS = ("forward", "backward_input", "backward_weight")


def observed_spans(plan: Plan, observed_events: list[dict]) -> list[tuple[int, Action, float, float]]:
    """``(step, action, start_ms, end_ms)`` of every action event (other event types are skipped); SpecError
    naming the event's field when one is malformed or names a stage the plan lacks."""
    spans = []
    for index, event in enumerate(observed_events):
        field = f"observed_events[{index}]"
        if not isinstance(event, dict):
            raise SpecError(field, f"must be an object, got {type(event).__name__}")
        if event.get("type", "action") != "action":
            continue
        action = Action.parse(event.get("action"), f"{field}.action")
        if not 0 <= action.stage < plan.num_stages:
            raise SpecError(f"{field}.action", f"stage {action.stage} is not in the plan ({plan.num_stages} stages)")
        start, end = _event_span(event, field)
        step = event.get("step", 0)
        if isinstance(step, bool) or not isinstance(step, int):
            raise SpecError(f"{field}.step", f"must be an integer, got {step!r}")
        spans.append((step, action, start, end))
    return spans


def _number(event: dict, key: str, field: str) -> float:
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{field}.{key}", f"must be a number, got {value!r}")
    return float(value)


def _event_span(event: dict, field: str) -> tuple[float, float]:
    """An event's ``(start_ms, end_ms)``; SpecError naming ``field``'s key when one is not a number or it ends
    before it starts."""
    start, end = _number(event, "start_ms", field), _number(event, "end_ms", field)
    if end < start:
        raise SpecError(f"{field}.end_ms", f"ends ({end}) before it starts ({start})")
    return start, end


def after_warmup(plan: Plan, observed_events: list[dict], warmup_steps: int) -> list[dict]:
    """The action events of every step after the first ``warmup_steps`` steps the events hold (validated as
    ``observed_spans`` does); empty when there is no such step."""
    spans = observed_spans(plan, observed_events)
    warmup = set(sorted({step for step, *_ in spans})[:max(0, warmup_steps)])
    return [event for event in observed_events
            if event.get("type", "action") == "action" and event.get("step", 0) not in warmup]


def observed_iteration_ms(plan: Plan, observed_events: list[dict]) -> float:
    """The median over steps of a step's span, from its first action's start to its last action's end (what
    the simulator's ``iteration_ms`` models: the optimizer step between steps is not part of it)."""
    steps = step_spans((step, start, end) for step, _, start, end in observed_spans(plan, observed_events))
    if not steps:
        raise SpecError("observed_events", "holds no action events")
    return median(last - first for first, last in steps.values())


def observed_durations(plan: Plan, observed_events: list[dict]) -> dict[tuple[int, str], list[float]]:
    """Durations per (stage, action type) from the action events; other event types are skipped."""
    durations: dict[tuple[int, str], list[float]] = {}
    for _, action, start, end in observed_spans(plan, observed_events):
        durations.setdefault((action.stage, action.type), []).append(end - start)
    return durations


def recalibrate(profile: Profile, plan: Plan, observed_events: list[dict]) -> Profile:
    """``profile`` with each stage's layer times scaled to the observed durations (see module doc)."""
    durations = observed_durations(plan, observed_events)
    if not durations:
        raise SpecError("observed_events", "holds no action events to calibrate from")
    return recalibrate_durations(profile, plan, durations)


def stage_durations(plan: Plan, timings: dict[tuple[int, str], tuple[float, float]]
                    ) -> dict[tuple[int, str], list[float]]:
    """Per (stage, action type), the duration of each of the plan's actions from a stage's (cold, warm) times
    (``executor.measuring.stage_timing``): warm where the action follows one of its own type on its device with no
    message between them (the previous one sends nothing to another device, this one receives nothing from
    one), cold otherwise: after another type of work, at the device's first action, and where a rank's
    communication ran in between. SpecError naming ``timings`` when a (stage, type) the plan runs has no
    timing."""
    def crosses(stage: int | None, device: int) -> bool:
        return stage is not None and plan.stage_device(stage) != device

    durations: dict[tuple[int, str], list[float]] = {}
    for device, device_actions in enumerate(plan.actions):
        previous = None
        for action in device_actions:
            key = (action.stage, action.type)
            if key not in timings:
                raise SpecError("timings", f"have no time for stage {action.stage}'s {action.type} actions")
            cold, warm = timings[key]
            warm_start = (previous is not None and previous.type == action.type
                          and not crosses(plan.output_stage(previous), device)
                          and not crosses(plan.input_stage(action), device))
            durations.setdefault(key, []).append(warm if warm_start else cold)
            previous = action
    return durations


def recalibrate_durations(profile: Profile, plan: Plan, durations: dict[tuple[int, str], list[float]]) -> Profile:
    """``profile`` with each stage's layer times scaled so that its actions take the mean of ``durations``
    per (stage, action type) (see the module doc; ``recalibrate`` gives it a run's observed durations)."""
    if sum(len(stage.layers) for stage in plan.stages) != profile.num_layers:
        raise SpecError("plan", f"its stages cover {sum(len(stage.layers) for stage in plan.stages)} layers, "
                                f"the profile has {profile.num_layers}")
    factors = {(stage, part): factor for (stage, kind), values in durations.items()
               for part, factor in _factors(profile, plan, stage, kind, fmean(values)).items()}
    fallback = {part: median(values) for part in PARTS
                if (values := [factor for (_, other), factor in factors.items() if other == part])}
    layers = list(profile.layers)
    for stage_index, stage in enumerate(plan.stages):
        scale = {part: factors.get((stage_index, part), fallback.get(part, 1.0)) for part in PARTS}
        for layer_index in stage.layers:
            layer = layers[layer_index]
            layers[layer_index] = replace(layer, **{part: getattr(layer, part) * scale[part] for part in PARTS})
    return replace(profile, layers=tuple(layers), source="calibrated")


def action_ms(profile: Profile, plan: Plan, stage: int, kind: str) -> float:
    """What ``profile`` predicts one ``kind`` action of ``stage`` takes (its layers' parts that kind covers)."""
    parts = ActionKind.parse(kind, "durations").profile_parts
    return sum(getattr(profile.layers[index], part) for index in plan.stages[stage].layers for part in parts)


def _factors(profile: Profile, plan: Plan, stage: int, kind: str, observed_ms: float) -> dict[str, float]:
    """Observed / predicted for the parts an action of ``kind`` covers; none when nothing was predicted."""
    predicted = action_ms(profile, plan, stage, kind)
    if predicted <= 0:
        return {}
    return {part: observed_ms / predicted for part in ActionKind.parse(kind, "durations").profile_parts}


def fit_kernel_overhead(spec: ModelSpec, cluster: ClusterSpec, measured: Profile) -> float:
    """The per-kernel overhead (us) at which ``analytic_profile(spec, cluster)`` takes as long in all as the
    ``measured`` profile of the same model (F, I and W over every layer).

    The analytic time is linear in the overhead, ``total(o) = total(0) + kernels * o``, so this is closed form.
    On a device whose kernels are eager framework ops (a CPU) the fixed cost per op, not the FLOPs, sets a
    small layer's time; fitting it on a measured profile carries that over to models the device has not run.
    0 when the analytic model is already slower than the measurement.
    """
    if measured.num_layers != len(spec.layers):
        raise SpecError("measured", f"has {measured.num_layers} layers, the model {len(spec.layers)}")

    def total_ms(overhead_us: float) -> float:
        profile = analytic_profile(spec, with_kernel_overhead(cluster, overhead_us))
        return sum(layer.forward + layer.backward_input + layer.backward_weight for layer in profile.layers)

    observed = sum(layer.forward + layer.backward_input + layer.backward_weight for layer in measured.layers)
    return _linear_overhead(total_ms, observed)


def fit_run_kernel_overhead(plan: Plan, model: ModelSpec, cluster: ClusterSpec, seq_len: int,
                            observed_events: list[dict], options: CostOptions = EXECUTOR_OPTIONS) -> float:
    """The per-kernel overhead (us) at which the analytic pipeline profile of the v2 ``plan`` on ``cluster``
    (``planner.parallel.planning.pipeline``: one TP x CP GPU's share of every layer, its collectives on the
    cluster's links) takes, over all the plan's actions, as long as the run's actions took (each (stage, kind) at
    its mean observed duration): ``fit_kernel_overhead`` for a run whose layers were never profiled alone, such as
    a hybrid run's shards. Fit the links first (``fit_collective_links``): what the collectives inside the actions
    take is not the overhead's to explain. ``options``: the software that ran (this project's executor by default).
    SpecError when the events hold no action of the plan."""
    durations = observed_durations(plan, observed_events)
    if not durations:
        raise SpecError("observed_events", "hold no action events to calibrate from")
    counts: dict[tuple[int, str], int] = {}
    for actions in plan.actions:
        for action in actions:
            counts[(action.stage, action.type)] = counts.get((action.stage, action.type), 0) + 1
    observed = sum(fmean(durations[key]) * count for key, count in counts.items() if key in durations)

    def total_ms(overhead_us: float) -> float:
        profile = pipeline(plan, model, with_kernel_overhead(cluster, overhead_us), seq_len, options)[0]
        return sum(action_ms(profile, plan, stage, kind) * count
                   for (stage, kind), count in counts.items() if (stage, kind) in durations)

    return _linear_overhead(total_ms, observed)


def fit_run_iteration_overhead(plan: Plan, model: ModelSpec, cluster: ClusterSpec, seq_len: int,
                               observed_events: list[dict], options: CostOptions = EXECUTOR_OPTIONS) -> float:
    """The per-kernel overhead (us) at which the v2 ``plan``'s pipeline, simulated on its analytic profile on
    ``cluster``, takes the run's observed iteration (``observed_iteration_ms``): ``fit_run_kernel_overhead`` fitted
    to the span of a step instead of the actions' time, so that it also carries the waits between actions the
    simulator does not model (ranks that time-share their cores, a collective waiting for its group's last rank),
    as ``fit_message_overhead`` does for a pipeline's messages. The iteration grows with the overhead, so this is
    a bisection (to 0.1 %); 0 when the analytic pipeline is already slower."""
    observed = observed_iteration_ms(plan, observed_events)

    def iteration_ms(overhead_us: float) -> float:
        profile, ranks = pipeline(plan, model, with_kernel_overhead(cluster, overhead_us), seq_len, options)
        return simulate(plan, profile, ranks).iteration_ms

    low, high = 0.0, max(1.0, cluster.device.kernel_overhead_us)
    if iteration_ms(low) >= observed:
        return 0.0
    while iteration_ms(high) < observed:
        low, high = high, 2 * high
    while high - low > 1e-3 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if iteration_ms(middle) < observed else (low, middle)
    return (low + high) / 2


def with_kernel_overhead(cluster: ClusterSpec, overhead_us: float) -> ClusterSpec:
    """``cluster`` whose device pays ``overhead_us`` per kernel."""
    return replace(cluster, device=replace(cluster.device, kernel_overhead_us=overhead_us))


def _linear_overhead(total_ms, observed_ms: float) -> float:
    """The overhead at which ``total_ms(overhead)``, linear in it, equals ``observed_ms``; 0 when it is already
    longer without any."""
    without = total_ms(0.0)
    return max(0.0, (observed_ms - without) / (total_ms(1.0) - without))


def with_message_overhead(cluster: ClusterSpec, overhead_us: float) -> ClusterSpec:
    """``cluster`` with every link's per-message overhead set to ``overhead_us``."""
    return replace(cluster, intra_node=replace(cluster.intra_node, overhead_us=overhead_us),
                   inter_node=replace(cluster.inter_node, overhead_us=overhead_us))


# The executor's group names (a collective event's ``group``) as the planner's group spans: its data-parallel group
# holds dp x cp ranks when CP is on (gradients of a context-parallel rank are summed over both).
EXECUTED_GROUPS = {"tp": "tp", "cp": "cp", "dp": "dpcp", "ep": "ep", "edp": "edp"}
LINK_CLASSES = ("intra_node", "inter_node")
# The axes of a (tp, cp, dp, pp) coordinate each executed group spans; EP's groups are the expert mesh's, not paired.
GROUP_AXES = {"tp": ("tp",), "cp": ("cp",), "dp": ("dp", "cp")}
# A link's bandwidth is fitted only to collectives whose bytes span this factor and whose largest would take, at the
# link's bandwidth so far, this share of the median collective's time (else the latency alone: collectives too small
# for their bytes to show under the time their ranks take to meet cannot tell the bandwidth).
BANDWIDTH_SPAN, TRANSFER_SHARE = 4.0, 0.25


@dataclass(frozen=True)
class LinkFit:
    """A link class's latency and bandwidth fitted to a run's collectives, and how well they explain them."""

    link: str                  # "intra_node" (inside an NVLink domain) or "inter_node"
    latency_us: float
    bandwidth_gb_s: float | None   # None: the collectives' bytes did not tell it (the cluster's is kept)
    samples: int
    median_error: float        # median |fitted - observed| / observed over the samples

    def to_dict(self) -> dict:
        return {"link": self.link, "latency_us": self.latency_us, "bandwidth_gb_s": self.bandwidth_gb_s,
                "samples": self.samples, "median_error": self.median_error}


def executed_collective(op: str) -> tuple[str, str] | None:
    """An executed collective's ``op`` (``tp_all_gather``, ``tp_grad_all_reduce``, ...) as (its group, a key of
    ``EXECUTED_GROUPS``; the collective ``planner.parallel.cost.collective_terms`` charges for it); None for what the
    cost model charges elsewhere or not at all: optimizer steps, the tied embedding's all-reduce."""
    group, _, kind = op.partition("_")
    if group not in EXECUTED_GROUPS or kind.endswith("optimizer_step"):
        return None
    # tp_grad_all_reduce: a TP group's partial gradients of its whole norms, an all-reduce like any
    return group, "all_reduce" if kind.endswith("all_reduce") else kind


def collective_samples(config: ParallelConfig, cluster: ClusterSpec, observed_events: list[dict]
                       ) -> dict[str, list[tuple[float, float, float]]]:
    """Per link class, ``(latencies, bytes, observed ms)`` of every collective the cost model charges
    (``planner.parallel.cost.collective_terms``); optimizer steps, the tied embedding's all-reduce and groups of one
    rank are left out. SpecError naming the event's field when one is malformed.

    A collective's time is its last rank's: the ranks of one TP, CP or DP group that report the same collective
    (their ``step``, ``index`` and ``op``; the group from each event's ``rank``, Megatron's order) count once, at
    the shortest of their times, as NCCL's tests time one after a barrier: the others' longer times are their wait
    for that rank, which is the compute before it (what the per-kernel overhead fit is given), not the link."""
    mapping = RankMapping(config, cluster)
    instances: dict[tuple, tuple[str, float, float, float]] = {}
    for index, event in enumerate(observed_events):
        if not isinstance(event, dict) or event.get("type") != "collective":
            continue
        field = f"observed_events[{index}]"
        op = event.get("op")
        if not isinstance(op, str) or "_" not in op:
            raise SpecError(f"{field}.op", f"must name a group and a collective ('tp_all_gather'), got {op!r}")
        charged = executed_collective(op)
        if charged is None:
            continue
        group, kind = charged
        nbytes = _number(event, "bytes", field)
        start, end = _event_span(event, field)
        span = mapping.span(EXECUTED_GROUPS[group])
        if span.size == 1:
            continue
        latencies, moved = collective_terms(kind, nbytes, span)
        took = end - start
        key = (index,)   # a rank's own collective, where the event says no rank or step to pair it by
        rank, step, number = (event.get(name) for name in ("rank", "step", "index"))
        if all(isinstance(value, int) and not isinstance(value, bool) for value in (rank, step, number)) \
                and 0 <= rank < config.num_gpus and group in GROUP_AXES:
            coordinate = config.coordinate(rank)
            key = (op, step, number, *(coordinate[axis] for axis in ("tp", "cp", "dp", "pp")
                                       if axis not in GROUP_AXES[group]))
        previous = instances.get(key)
        if previous is None or took < previous[3]:
            instances[key] = (LINK_CLASSES[span.crosses_domains], latencies, moved, took)
    samples: dict[str, list[tuple[float, float, float]]] = {}
    for link, latencies, moved, took in instances.values():
        samples.setdefault(link, []).append((latencies, moved, took))
    return samples


def fit_collective_links(config: ParallelConfig, cluster: ClusterSpec, observed_events: list[dict]) -> list[LinkFit]:
    """Each link class's latency and bandwidth fitted to a hybrid run's collective events: the least-squares
    ``observed ms = latencies x latency + bytes / bandwidth`` over its collectives, with the latencies and bytes the
    cost model charges each (non-negative: where the unconstrained fit makes one term negative, the other alone; a
    bandwidth the fit finds infinite keeps the cluster's). Each collective counts once, at its group's last rank's
    time (``collective_samples``). The bandwidth only where the collectives' bytes span at least ``BANDWIDTH_SPAN``
    times and the largest would take at least ``TRANSFER_SHARE`` of their median time at the cluster's bandwidth (a
    run whose collectives all move about the same bytes, or too few for them to show, cannot tell a slow link from
    a long latency): else the latency alone, with the cluster's bandwidth kept (``bandwidth_gb_s`` None).
    SpecError when the events hold no such collective."""
    links = {"intra_node": cluster.intra_node, "inter_node": cluster.inter_node}
    fits = []
    for link, rows in sorted(collective_samples(config, cluster, observed_events).items()):
        # every collective counts once: a step pays for each, so the fit is to what the collectives took in all
        terms = np.array([(latencies, moved) for latencies, moved, _ in rows], dtype=float)
        observed = np.array([ms for *_, ms in rows], dtype=float)
        link_ms_per_byte = 1 / (links[link].bandwidth_gb_s * 1e6)
        moved = terms[:, 1][terms[:, 1] > 0]
        if moved.size and moved.max() >= BANDWIDTH_SPAN * moved.min() \
                and moved.max() * link_ms_per_byte >= TRANSFER_SHARE * float(np.median(observed)):
            latency_ms, ms_per_byte = _nonnegative_least_squares(terms, observed)
        else:
            ms_per_byte = 0.0
            latency_ms = _nonnegative_least_squares(terms[:, :1], observed - terms[:, 1] * link_ms_per_byte)[0]
        fitted = terms @ np.array([latency_ms, ms_per_byte or link_ms_per_byte])
        errors = np.abs(fitted - observed) / np.maximum(observed, 1e-9)
        fits.append(LinkFit(link=link, latency_us=float(latency_ms) * 1e3,
                            bandwidth_gb_s=1.0 / (float(ms_per_byte) * 1e6) if ms_per_byte > 0 else None,
                            samples=len(rows), median_error=float(np.median(errors))))
    if not fits:
        raise SpecError("observed_events", "hold no collective of a group of more than one rank to fit links to")
    return fits


def _nonnegative_least_squares(terms: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """The least-squares coefficients of ``terms`` (one column each) for ``observed``, none negative: the
    unconstrained solution where it is so, else the best of each column alone (the others zero)."""
    candidates = []
    solution = np.linalg.lstsq(terms, observed, rcond=None)[0]
    if (solution >= 0).all():
        candidates.append(solution)
    for column in range(terms.shape[1]):
        alone = terms[:, column]
        if alone.any():
            coefficients = np.zeros(terms.shape[1])
            coefficients[column] = max(0.0, float(alone @ observed / (alone @ alone)))
            candidates.append(coefficients)
    if not candidates:
        return np.zeros(terms.shape[1])
    return min(candidates, key=lambda c: float(((terms @ c - observed) ** 2).sum()))


def with_fitted_links(cluster: ClusterSpec, fits: list[LinkFit]) -> ClusterSpec:
    """``cluster`` with each fitted link class's latency and bandwidth (a bandwidth the fit could not tell stays)."""
    links = {"intra_node": cluster.intra_node, "inter_node": cluster.inter_node}
    for fit in fits:
        link = links[fit.link]
        links[fit.link] = replace(link, latency_us=fit.latency_us,
                                  bandwidth_gb_s=fit.bandwidth_gb_s or link.bandwidth_gb_s)
    return replace(cluster, **links)


def _message_ends(plan: Plan, action: Action) -> tuple[int, int]:
    """(messages ``action`` receives from another device before it, messages it sends to one after it), as
    the simulator charges them: F receives from the stage before and sends to the stage after, B and I the
    other way round, W neither."""
    device = plan.stage_device(action.stage)

    def crosses(other: int | None) -> int:
        return int(other is not None and plan.stage_device(other) != device)

    return crosses(plan.input_stage(action)), crosses(plan.output_stage(action))


def device_timelines(plan: Plan, spans: list[tuple[int, Action, float, float]]
                     ) -> dict[tuple[int, int], list[tuple[float, float, Action]]]:
    """``observed_spans`` per (step, device): each device's ``(start_ms, end_ms, action)`` in time order."""
    timelines: dict[tuple[int, int], list[tuple[float, float, Action]]] = {}
    for step, action, start, end in spans:
        timelines.setdefault((step, plan.stage_device(action.stage)), []).append((start, end, action))
    for actions in timelines.values():
        actions.sort(key=lambda span: span[0])
    return timelines


def measure_message_overhead(plan: Plan, observed_events: list[dict]) -> float:
    """The per-message overhead (us per end) read off a run's action timings: the mean, over pairs of
    consecutive actions on a device where the second did not wait for its input, of the time between them
    divided by the message ends the simulator charges there (the first's sends and the second's receives).
    The mean, as for the compute (see the module docstring): an iteration adds these times up.

    A direct measurement, unlike ``fit_message_overhead``: it does not depend on how well the profile predicts
    the compute, so a compute speed that differs by a few percent from the profile's does not turn into
    hundreds of microseconds per message. "Did not wait": the producer of the second action's cross-device
    input ended before the first action started, so the message had long arrived. The time between actions
    also holds the executor's own per-action work (recording the timing, handing tensors on), which the
    simulator charges nowhere else. SpecError on ``observed_events`` when no such pair exists.
    """
    spans = observed_spans(plan, observed_events)
    # when each boundary tensor was produced: (step, stage, activation or gradient, micro-batch) -> end
    ended = {(step, action.stage, action.type.boundary, action.microbatch): end
             for step, action, _, end in spans if action.type.boundary}
    per_end = []
    for (step, _), actions in device_timelines(plan, spans).items():
        for (previous_start, previous_end, previous), (start, _, action) in zip(actions, actions[1:]):
            receives, _ = _message_ends(plan, action)
            ends = _message_ends(plan, previous)[1] + receives
            if not ends:
                continue
            if receives:
                produced = ended.get((step, plan.input_stage(action), action.type.boundary, action.microbatch))
                if produced is None or produced >= previous_start:
                    continue
            per_end.append((start - previous_end) / ends)
    if not per_end:
        raise SpecError("observed_events", "hold no consecutive actions of a device with a message between "
                                           "them whose input had arrived; nothing to measure the overhead on")
    return max(0.0, fmean(per_end)) * 1e3


def fit_message_overhead(plan: Plan, profile: Profile, cluster: ClusterSpec, observed_iteration_ms: float, *,
                         max_overhead_us: float = 10_000.0, tolerance_us: float = 1.0) -> float:
    """The per-message overhead (us, on every link) at which the simulated iteration of ``plan`` equals the
    observed one: what a message really costs the ranks of this executor on this host, schedule effects included.

    A micro-benchmark of the link sees the cost of a message in its own pattern only; fitted from a real run of
    one plan it carries over to other plans on the same host (``benchmarks/prediction_fidelity.py`` fits it on
    a model it then does not predict). The simulated iteration never decreases as the overhead grows, so this
    is a bisection. 0 when the run was no slower than the simulation without any overhead; ``max_overhead_us``
    when it was slower than the simulation with that much. SpecError on ``plan`` when it sends no message
    between devices (its time does not depend on the overhead).
    """
    if not observed_iteration_ms > 0:
        raise SpecError("observed_iteration_ms", f"must be > 0, got {observed_iteration_ms!r}")

    def iteration_ms(overhead_us: float) -> float:
        return simulate(plan, profile, with_message_overhead(cluster, overhead_us)).iteration_ms

    low, high = 0.0, max_overhead_us
    without, with_most = iteration_ms(low), iteration_ms(high)
    if with_most == without:
        raise SpecError("plan", "sends no message between devices, so no per-message overhead can explain its "
                                "iteration time")
    if without >= observed_iteration_ms:
        return low
    if with_most <= observed_iteration_ms:
        return high
    while high - low > tolerance_us:
        middle = (low + high) / 2
        if iteration_ms(middle) < observed_iteration_ms:
            low = middle
        else:
            high = middle
    return (low + high) / 2
