"""Plans and runs side by side: each one's timeline on a time axis that starts at its iteration's start, and its
metrics with the difference from the first one picked, judged by throughput (``planner.comparison``: it says when the
global batch or the GPU count differs, where iteration times do not compare).

A plan contributes its predicted iteration; a run its last observed step, every event shifted so the step's first
action starts at 0 (a run's clock counts from the ranks' start, which includes process start-up). The observed
iteration is that step's span (first start to last end) and its bubble the idle share of devices x span. A hybrid
run's pipeline ranks each ran on several ranks (its TP x CP x DP replicas): each action is folded to the median of
their starts and ends, as the run page draws it.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median

from django.contrib.auth.models import AbstractBaseUser

from adaptis_web.studio.models import RunEvent
from adaptis_web.studio.planning.predictions import stored_plan
from adaptis_web.studio.planning.selectors import plan_get_for_user
from adaptis_web.studio.runs.run_control import run_step_tokens
from adaptis_web.studio.runs.selectors import run_get_for_user
from planner import service as planner_service

MAX_ITEMS = 8
METRICS = ("iteration_ms", "bubble_ratio", "peak_memory_bytes", "tokens_per_s")


def compare_items(*, user: AbstractBaseUser, plan_ids: list[str], run_ids: list[str]) -> tuple[list[dict], list[str]]:
    """The items to compare, in the order given (plans first), and the ids that could not be read."""
    errors = [f"{kind} id {value!r} is not a number" for kind, values in (("plan", plan_ids), ("run", run_ids))
              for value in values if not value.isdigit()]
    items = [_plan_item(plan_get_for_user(user=user, plan_id=int(value)))
             for value in dict.fromkeys(plan_ids) if value.isdigit()]
    items += [_run_item(run_get_for_user(user=user, run_id=int(value)))
              for value in dict.fromkeys(run_ids) if value.isdigit()]
    if len(items) > MAX_ITEMS:
        errors.append(f"at most {MAX_ITEMS} plans and runs at once; showing the first {MAX_ITEMS}")
        items = items[:MAX_ITEMS]
    if items:
        _add_differences(items)
    return items, errors


def _plan_item(plan) -> dict:
    output = planner_service.predict_stored_plan(stored_plan(plan))
    timeline = output["timeline"]
    return {"key": f"plan-{plan.pk}", "kind": "plan", "id": plan.pk, "object": plan,
            "label": f"Plan #{plan.pk} · {plan.name or plan.strategy}", "source": "predicted",
            "layout": output["layout"], "num_devices": output["plan"]["num_devices"], "timeline": timeline,
            "gpus": planner_service.plan_gpus(output["plan"]),
            "span_ms": max((entry["end_ms"] for entry in timeline), default=0.0),
            "metrics": {key: output["metrics"].get(key) for key in METRICS}}


def _run_item(run) -> dict:
    last = RunEvent.objects.filter(run=run).order_by("-step").values_list("step", flat=True).first()
    events = list(RunEvent.objects.filter(run=run, step=last).order_by("start_ms")) if last is not None else []
    timeline = _folded_timeline([event for event in events if event.kind in planner_service.ACTION_KINDS])
    num_devices = run.plan.plan_doc["num_devices"]
    observed = planner_service.summarize_observed(
        [{"step": last, "device": entry["device"], "kind": entry["type"], "start_ms": entry["start_ms"],
          "end_ms": entry["end_ms"]} for entry in timeline], num_devices)
    span = observed["iteration_ms"]
    tokens = run_step_tokens(run)
    return {"key": f"run-{run.pk}", "kind": "run", "id": run.pk, "object": run,
            "label": f"Run #{run.pk} · observed step {last if last is not None else '—'}", "source": "observed",
            "layout": run.plan.layout, "num_devices": num_devices, "timeline": timeline, "span_ms": span,
            "gpus": planner_service.plan_gpus(run.plan.plan_doc),
            "metrics": {"iteration_ms": span or None,
                        "bubble_ratio": observed["bubble_ratio"] if span else None,
                        "peak_memory_bytes": None, "tokens_per_s": tokens / (span / 1e3) if span else None}}


def _folded_timeline(events: list[RunEvent]) -> list[dict]:
    """One entry per (device, action) of the step: the median start and end over the ranks that ran it (a pipeline
    rank's replicas; one rank in a pipeline-only run), from the step's first start."""
    replicas = defaultdict(list)
    for event in events:
        replicas[(event.device, event.action)].append(event)
    timeline = sorted(({"device": device, "action": action, "stage": ran[0].stage, "type": ran[0].kind,
                        "microbatch": ran[0].microbatch, "start_ms": median(event.start_ms for event in ran),
                        "end_ms": median(event.end_ms for event in ran)}
                       for (device, action), ran in replicas.items()), key=lambda entry: entry["start_ms"])
    origin = timeline[0]["start_ms"] if timeline else 0.0
    for entry in timeline:
        entry["start_ms"] -= origin
        entry["end_ms"] -= origin
    return timeline


def _add_differences(items: list[dict]) -> None:
    """Each item's metrics against the first item's: the difference and the ratio, where both are known."""
    reference = items[0]["metrics"]
    for item in items:
        item["differences"] = {}
        for key in METRICS:
            value, base = item["metrics"].get(key), reference.get(key)
            known = value is not None and base is not None
            item["differences"][key] = {"value": value, "delta": value - base if known else None,
                                        "ratio": value / base if known and base else None}
        item["throughput"] = planner_service.throughput_difference({**reference, "gpus": items[0]["gpus"]},
                                                                   {**item["metrics"], "gpus": item["gpus"]})
