"""The run pages (the run's observed timeline against its prediction, its steps, its launch for a cluster run) and
the page actions that start work on the runs' host: run a plan, measure a spec's profile, cancel a run, re-plan
from a run. A refused form is shown on the page it was sent from."""

from __future__ import annotations

from contextlib import suppress

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from adaptis_web.studio.accounts.roles import role_permissions
from adaptis_web.studio.catalog.selectors import spec_get_for_user
from adaptis_web.studio.planning.forms import SpecPlanningForm
from adaptis_web.studio.planning.plan_views import plan_page
from adaptis_web.studio.planning.predictions import run_prediction
from adaptis_web.studio.planning.selectors import plan_get_for_user
from adaptis_web.studio.planning.views import job_page, spec_page
from adaptis_web.studio.runs.calibration import job_replan_from_run
from adaptis_web.studio.runs.cluster_runs import launch
from adaptis_web.studio.runs.forms import RunForm
from adaptis_web.studio.runs.local_runs import run_create
from adaptis_web.studio.runs.profiling import measured_profile_create, plan_local_prediction
from adaptis_web.studio.runs.run_control import (observed_statistic, plan_replicas, predicted_step_end,
                                                 predicted_tokens_per_s, run_cancel, run_phase, run_steps_chart)
from adaptis_web.studio.runs.selectors import run_events_after, run_get_for_user, run_replans
from planner.errors import SpecError
from planner.service import load_model_spec


@login_required
@require_POST
def spec_profile(request: HttpRequest, spec_id: int) -> HttpResponse:
    """Measure the spec on the runs' host (``runs.profiling``), then back to the spec page."""
    record = spec_get_for_user(user=request.user, spec_id=spec_id)
    try:
        measured_profile_create(spec_record=record, user=request.user,
                                num_ranks=int(request.POST.get("num_ranks") or 2),
                                split_backward=request.POST.get("split_backward") == "on")
    except (SpecError, ValueError) as error:
        spec = load_model_spec(record.doc)
        return spec_page(request, record, spec, SpecPlanningForm(spec=spec), profile_error=str(error), status=400)
    return redirect("studio:spec", spec_id=record.pk)


@login_required
@require_POST
def plan_run(request: HttpRequest, plan_id: int) -> HttpResponse:
    plan = plan_get_for_user(user=request.user, plan_id=plan_id)
    form = RunForm(request.POST)
    if form.is_valid():
        try:
            run = run_create(plan=plan, user=request.user, steps=form.cleaned_data["steps"],
                             scale_down=form.cleaned_data["scale_down"])
            return redirect("studio:run", run_id=run.pk)
        except SpecError as error:
            form.add_spec_error(error)
    if request.POST.get("page") == "plan":  # the refusal shown on the page the form was sent from
        return plan_page(request, plan, run_form=form, status=400)
    return job_page(request, plan.job, form, plan=plan, status=400)


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    return _run_page(request, run_get_for_user(user=request.user, run_id=run_id))


@login_required
@require_POST
def run_replan(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request.user, run_id=run_id)
    try:
        job = job_replan_from_run(run=run, user=request.user)
    except SpecError as error:
        return _run_page(request, run, replan_error=str(error), status=getattr(error, "status", 400))
    return redirect("studio:job", job_id=job.pk)


@login_required
@require_POST
def run_cancel_view(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_get_for_user(user=request.user, run_id=run_id)
    with suppress(SpecError):  # it finished meanwhile: the page it returns to shows how
        run_cancel(run=run, user=request.user)
    return redirect("studio:run", run_id=run.pk)


def _run_page(request: HttpRequest, run, *, replan_error: str = "", status: int = 200) -> HttpResponse:
    plan = run.plan
    local = plan_local_prediction(plan)  # the plan's stages timed on the runs' host, once measured
    simulation = local or run_prediction(plan)   # a hybrid plan as the executor runs it
    events = run_events_after(run=run)  # the first page; the page polls for the rest (after its last_seq)
    replicas = plan_replicas(plan.plan_doc)
    return render(request, "studio/run_detail.html", {
        "run": run, "plan": plan, "job": plan.job, "replan_error": replan_error,
        "replans": run_replans(run=run),
        "phase": run_phase(run=run, event_count=len(events["events"])), "local_prediction": local,
        "simulation": simulation, "replicas": replicas,
        "observed_statistic": observed_statistic(run.summary),
        "timeline_data": {
            "num_devices": plan.plan_doc["num_devices"], "predicted": simulation["timeline"],
            "iteration_ms": simulation["iteration_ms"],
            "stage_devices": [stage["device"] for stage in plan.plan_doc["stages"]],
            "observed": events["events"], "collectives": events["collectives"], "last_seq": events["last_seq"],
            "replicas": replicas,
            "predicted_step_end": predicted_step_end(simulation.get("predicted") or plan.plan_doc.get("predicted")
                                                     or {}) if replicas > 1 else [],
        },
        "device_comparison": device_comparison(simulation, run.summary),
        "steps_chart": run_steps_chart(run=run, predicted_ms=simulation["iteration_ms"],
                                       predicted_tokens_per_s=predicted_tokens_per_s(plan.plan_doc, simulation)),
        "launch": launch(run, ingest_url=request.build_absolute_uri(reverse("api:run-events", args=[run.pk])))
        if run.target == "cluster" else None,
        **role_permissions(user=request.user, team=plan.job.spec.team, creator_id=run.created_by_id),
    }, status=status)


def device_comparison(simulation: dict, observed_summary: dict) -> list[dict]:
    """Per device: the observed busy/bubble of a finished run next to the predicted bubble ratio; in a hybrid run
    also its replicas, the spread of their busy time and its collectives' median ms per step (planner.observed)."""
    predicted = {row["device"]: row for row in simulation["per_device"]}
    rows = []
    for row in (observed_summary or {}).get("per_device", []):
        expected = predicted.get(row["device"])
        rows.append({"device": row["device"], "observed_busy_ms": row["busy_ms"],
                     "observed_bubble_ms": row["bubble_ms"], "observed_bubble_ratio": row["bubble_ratio"],
                     "predicted_bubble_ratio": expected["bubble_ms"] / simulation["iteration_ms"] if expected else None,
                     "replicas": row.get("replicas"), "busy_spread_ms": row.get("busy_spread_ms"),
                     "collective_ms": sorted((row.get("collective_ms") or {}).items())})
    return rows
