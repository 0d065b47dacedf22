"""What a run observed, from its action events: each step's iteration time, per-device busy and bubble time.

The one home of these figures: the executor's run summary (the run page), the calibration (``planner.calibrate``)
and the compare page all read them here. A step's iteration time is the span from its first action's start to its last action's end, over all
devices; a device's bubble in that step is the iteration time minus its compute time. With more than one
step the first is reported separately and left out of the averages: it pays one-off costs (allocator
growth, first-touch of communication buffers) that a steady-state prediction does not model.
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


def summarize(events: list[dict], num_devices: int) -> dict:
    """Iteration (mean and median over the steps after the first), bubble ratio, per-step iterations and per-device
    busy, bubble and compute by kind, from the action events of one run (other event types are skipped)."""
    actions = [event for event in events if event.get("type", "action") == "action"]
    by_step: dict[int, list[dict]] = defaultdict(list)
    for event in actions:
        by_step[event["step"]].append(event)
    spans = step_spans((event["step"], event["start_ms"], event["end_ms"]) for event in actions)
    step_rows = []
    for step in sorted(by_step):
        step_events = by_step[step]
        start, end = spans[step]
        busy = [0.0] * num_devices
        by_kind = [defaultdict(float) for _ in range(num_devices)]
        for event in step_events:
            duration = event["end_ms"] - event["start_ms"]
            busy[event["device"]] += duration
            by_kind[event["device"]][event["kind"]] += duration
        step_rows.append({"step": step, "start_ms": start, "iteration_ms": end - start, "busy_ms": busy,
                          "by_kind": by_kind})
    warmup = 1 if len(step_rows) > 1 else 0
    measured = step_rows[warmup:]
    if not measured:
        return {"iteration_ms": 0.0, "bubble_ratio": 0.0, "warmup_steps": 0, "steps": [], "per_device": []}
    iteration = sum(row["iteration_ms"] for row in measured) / len(measured)
    per_device = []
    for device in range(num_devices):
        busy = sum(row["busy_ms"][device] for row in measured) / len(measured)
        kinds = {kind: sum(row["by_kind"][device].get(kind, 0.0) for row in measured) / len(measured)
                 for kind in ActionKind}
        per_device.append({"device": device, "busy_ms": busy, "bubble_ms": max(0.0, iteration - busy),
                           "bubble_ratio": max(0.0, 1.0 - busy / iteration) if iteration else 0.0,
                           "compute_ms": {kind: value for kind, value in kinds.items() if value}})
    total_busy = sum(device["busy_ms"] for device in per_device)
    return {
        "iteration_ms": iteration,
        "median_iteration_ms": median(row["iteration_ms"] for row in measured),
        "bubble_ratio": max(0.0, 1.0 - total_busy / (num_devices * iteration)) if iteration else 0.0,
        "warmup_steps": warmup,
        "steps": [{"step": row["step"], "iteration_ms": row["iteration_ms"]} for row in step_rows],
        "per_device": per_device,
    }
