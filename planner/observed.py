"""What a run observed, from its action events: each step's iteration time, per-device busy and bubble time.

The one home of these figures: the executor's run summary (the run page), the calibration (``planner.calibrate``)
and the compare page all read them here. A step's iteration time is the span from its first action's start to its last action's end, over all
devices; a device's bubble in that step is the iteration time minus its compute time. With more than one
step the first is reported separately and left out of the averages: it pays one-off costs (allocator
growth, first-touch of communication buffers) that a steady-state prediction does not model.

In a hybrid run every (tp, cp, dp) replica of the pipeline runs the plan's device programs (the events' ``rank``
tells them apart, ``device`` is the pipeline rank): a device's figures are the median over its replicas, with
their spread (slowest minus fastest), and its collectives (``collective`` events) are folded the same way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from statistics import median

from planner.actions import ActionKind


def step_spans(spans: Iterable[tuple[int, float, float]]) -> dict[int, tuple[float, float]]:
    """Each step's (first action's start, last action's end), from (step, start_ms, end_ms) of its actions."""
    steps: dict[int, tuple[float, float]] = {}
    for step, start, end in spans:
        first, last = steps.get(step, (start, end))
        steps[step] = (min(first, start), max(last, end))
    return steps


def _replica_sums(events: list[dict], measured_steps: set[int], key: str) -> dict[int, dict[int, dict]]:
    """device -> replica rank -> {event[key]: ms per measured step}."""
    sums: dict[int, dict[int, dict]] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for event in events:
        if event["step"] in measured_steps:
            sums[event["device"]][event.get("rank", event["device"])][event[key]] += (
                (event["end_ms"] - event["start_ms"]) / len(measured_steps))
    return sums


def _folded(replicas: dict[int, dict]) -> tuple[dict, float, float]:
    """Per key the median over the replicas, and the median and spread of their totals."""
    if not replicas:
        return {}, 0.0, 0.0
    keys = {key for values in replicas.values() for key in values}
    totals = [sum(values.values()) for values in replicas.values()]
    return ({key: median(values.get(key, 0.0) for values in replicas.values()) for key in keys},
            median(totals), max(totals) - min(totals))


def summarize(events: list[dict], num_devices: int) -> dict:
    """Iteration (mean and median over the steps after the first), bubble ratio, per-step iterations and per-device
    busy, bubble and compute by kind (and collectives by op, in a hybrid run), from the events of one run (other
    event types are skipped)."""
    actions = [event for event in events if event.get("type", "action") == "action"]
    collectives = [event for event in events if event.get("type") == "collective"]
    spans = step_spans((event["step"], event["start_ms"], event["end_ms"]) for event in actions)
    step_rows = [{"step": step, "start_ms": start, "iteration_ms": end - start}
                 for step, (start, end) in sorted(spans.items())]
    warmup = 1 if len(step_rows) > 1 else 0
    measured = step_rows[warmup:]
    if not measured:
        return {"iteration_ms": 0.0, "bubble_ratio": 0.0, "warmup_steps": 0, "steps": [], "per_device": []}
    iteration = sum(row["iteration_ms"] for row in measured) / len(measured)
    measured_steps = {row["step"] for row in measured}
    compute = _replica_sums(actions, measured_steps, "kind")
    communication = _replica_sums(collectives, measured_steps, "op")
    per_device = []
    for device in range(num_devices):
        kinds, busy, spread = _folded(compute.get(device, {}))
        row = {"device": device, "busy_ms": busy, "bubble_ms": max(0.0, iteration - busy),
               "bubble_ratio": max(0.0, 1.0 - busy / iteration) if iteration else 0.0,
               "compute_ms": {kind: kinds[kind] for kind in ActionKind if kinds.get(kind)}}
        if len(compute.get(device, {})) > 1:
            row["replicas"], row["busy_spread_ms"] = len(compute[device]), spread
        if device in communication:
            row["collective_ms"], _, _ = _folded(communication[device])
        per_device.append(row)
    total_busy = sum(device["busy_ms"] for device in per_device)
    return {
        "iteration_ms": iteration,
        "median_iteration_ms": median(row["iteration_ms"] for row in measured),
        "bubble_ratio": max(0.0, 1.0 - total_busy / (num_devices * iteration)) if iteration else 0.0,
        "warmup_steps": warmup,
        "steps": [{"step": row["step"], "iteration_ms": row["iteration_ms"]} for row in step_rows],
        "per_device": per_device,
    }
