"""The plan page (timeline, per-device table, memory, configuration, lineage, downloads, the editor) and the
compare page (plans and runs on one shared time axis). The editor itself runs in the browser
(static/studio/plan_editor.js) over the simulate/derive API."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from adaptis_web.studio.accounts.roles import role_permissions
from adaptis_web.studio.models import Plan
from adaptis_web.studio.planning.comparison import compare_items
from adaptis_web.studio.planning.exports import FORMATS
from adaptis_web.studio.planning.predictions import stored_plan
from adaptis_web.studio.planning.selectors import plan_get_for_user
from adaptis_web.studio.runs.forms import RunForm
from adaptis_web.studio.runs.local_runs import cpu_run_refusal, plan_execution
from planner import service as planner_service
from planner.service import load_model_spec

RECENT_RUNS = 20   # the run card's table, as the job page's lists

EXPORT_LABELS = {fmt: spec.label for fmt, spec in planner_service.EXPORTS.items()}
POLICY_LABELS = {"auto": "keep the orders where they fit, else reschedule", "keep": "keep the plan's own orders",
                 **{name: label for name, (label, _) in planner_service.LIST_POLICIES.items()}}


def run_card_context(plan: Plan) -> dict:
    """What the Run on CPU card (templates/studio/_run_card.html) shows besides its form: the ranks a run starts,
    why the plan cannot run here, before anyone clicks (a hybrid plan the executor cannot run as planned, more
    ranks than this host starts), whether the executor runs it as planned anywhere, and the plan's recent runs."""
    execution = plan_execution(plan)   # (loads the whole plan document: once a page)
    run_refusal = execution.run_refusal
    return {"cpu_refusal": cpu_run_refusal(load_model_spec(plan.job.spec.doc)),
            "run_world_size": execution.world_size,
            "executes_as_planned": execution.execution_refusal is None,
            "execution_refusal": execution.execution_refusal and execution.execution_refusal.reason,
            "run_refusal": run_refusal and f"This plan {run_refusal.reason}.",
            "runs": plan.runs.filter(deleted_at__isnull=True)[:RECENT_RUNS]}


@login_required
def plan_detail(request: HttpRequest, plan_id: int) -> HttpResponse:
    return plan_page(request, plan_get_for_user(user=request.user, plan_id=plan_id), run_form=RunForm())


def plan_page(request: HttpRequest, plan, *, run_form: RunForm, status: int = 200) -> HttpResponse:
    """The plan's page: its prediction, downloads, timeline, editor, lineage, and its Run on CPU card with
    ``run_form`` (bound and refused when a run from this page was refused)."""
    team = plan.job.spec.team
    parent = plan.parent if plan.parent_id and plan.parent.deleted_at is None else None
    page = planner_service.stored_plan_page(stored_plan(plan), None if parent is None else stored_plan(parent))
    output = page["output"]
    permissions = role_permissions(user=request.user, team=team, creator_id=plan.job.created_by_id)
    editor = {
        "plan_id": plan.pk, "output": output, "max_devices": page["max_devices"],
        "simulate_url": reverse("api:plan-simulate", args=[plan.pk]),
        "derive_url": reverse("api:plan-derive", args=[plan.pk]), "can_save": permissions["can_create"],
        "policies": [{"name": name, "label": POLICY_LABELS[name]} for name in planner_service.SCHEDULE_POLICIES],
        "baselines": list(planner_service.BASELINE_SCHEDULES), "partitions": list(planner_service.PARTITIONS),
        "recompute_modes": list(planner_service.RECOMPUTE_MODES),
        "sharding_modes": list(planner_service.SHARDING_MODES), "precisions": list(planner_service.PRECISIONS),
        "max_microbatches": planner_service.MAX_MICROBATCHES,
        "plan_url_template": reverse("studio:plan", args=[0]).replace("/0/", "/{id}/"),
    }
    return render(request, "studio/plan_detail.html", {
        "plan": plan, "job": plan.job, "output": output, "editor": editor, "parent": parent,
        "difference": page["difference"], "parallel": output["plan"].get("parallel"),
        "edits": (plan.plan_doc.get("meta") or {}).get("edits") or [],
        "derived_by": (plan.plan_doc.get("meta") or {}).get("derived_by"),
        "children": plan.derived.filter(deleted_at__isnull=True).order_by("-created_at", "-id"),
        "downloads": _downloads(plan, page["megatron_reason"], page["exports"]), "export_formats": "|".join(FORMATS),
        "capacity_bytes": page["capacity_bytes"], "software": page["software"],
        "memory_rows": _memory_rows(output["per_device"]), "degrees": ("tp", "cp", "pp", "dp", "ep", "etp"),
        **permissions,
        "run_form": run_form, **run_card_context(plan),
    }, status=status)


def _downloads(plan, megatron_reason: str, exports: dict[str, dict]) -> list[dict]:
    """Each format's button, or the reason the format cannot express the plan (shown instead of a button); a
    framework format's ``lost``: what of the plan it cannot express (the page offers the executor for those)."""
    rows = []
    for fmt in FORMATS:
        framework = exports.get(fmt, {})
        reason = megatron_reason if fmt == "megatron-layout" else framework.get("reason", "")
        rows.append({"format": fmt, "label": EXPORT_LABELS[fmt], "reason": reason, "lost": framework.get("lost", []),
                     "url": reverse("api:plan-export", args=[plan.pk, fmt])})
    return rows


def _memory_rows(per_device: list[dict]) -> list[dict]:
    return [{**row, "percent": min(100.0, 100.0 * row["memory_bytes"] / row["capacity_bytes"])} for row in per_device]


@login_required
def plan_compare(request: HttpRequest) -> HttpResponse:
    """``/compare/?plan=1&plan=2&run=3``: the named plans and runs, stacked on one time axis."""
    items, errors = compare_items(user=request.user, plan_ids=request.GET.getlist("plan"),
                                  run_ids=request.GET.getlist("run"))
    counts = [(sum(item["kind"] == kind for item in items), kind) for kind in ("plan", "run")]
    heading = " and ".join(f"{count} {kind}{'s' if count != 1 else ''}" for count, kind in counts if count)
    return render(request, "studio/plan_compare.html", {
        "items": items, "errors": errors, "heading": heading or "plans and runs",
        "chart_data": {"items": [{"key": item["key"], "num_devices": item["num_devices"], "predicted": item["timeline"]}
                                 for item in items],
                       "x_max": max((item["span_ms"] for item in items), default=0.0)},
    }, status=400 if errors and not items else 200)
