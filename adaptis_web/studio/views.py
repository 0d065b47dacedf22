"""Server-rendered pages. Each view reads through a selector (404 for other teams' objects), validates with a
form and calls a service; live parts (job progress, run events) poll the REST API from the browser."""

from __future__ import annotations

from contextlib import suppress

from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from adaptis_web.studio import selectors
from adaptis_web.studio.account_views import current_team
from adaptis_web.studio.filters import sort_links, sort_ordering
from adaptis_web.studio.hybrid_pages import hybrid_page_context
from adaptis_web.studio.services.roles import role_permissions
from adaptis_web.studio.forms import RunForm, SpecPlanningForm, UploadForm
from adaptis_web.studio.plan_views import plan_page, run_card_context
from adaptis_web.studio.models import Plan, PlanningJob
from adaptis_web.studio.services.calibration import job_replan_from_run
from adaptis_web.studio.services.cluster_runs import launch
from adaptis_web.studio.services.predictions import plan_prediction
from adaptis_web.studio.services.jobs import job_cancel, job_create, spec_create_with_job
from adaptis_web.studio.services.runs import run_create
from adaptis_web.studio.services.specs import spec_for_shape
from adaptis_web.studio.services.run_control import observed_statistic, run_cancel, run_phase, run_steps_chart
from adaptis_web.studio.services.profiling import layer_cost_chart, measured_profile_create, plan_local_prediction
from planner.errors import SpecError
from planner.service import preset_names
from planner.spec.model import load_model_spec

RECENT_ROWS = 20


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """The current team's latest work (the History page has all of it, filtered); ``?sort=iteration`` (or
    ``bubble``, "-" for descending) orders the jobs by their own plan's result, as the History page does."""
    user, team = request.user, current_team(request)
    sort = request.GET.get("sort", "")
    jobs = selectors.history_for_user(user=user, kind="jobs").filter(spec__team=team, archived_at__isnull=True)
    return render(request, "studio/dashboard.html", {
        "teams": selectors.team_list_for_user(user=user), "team": team, **sort_links(sort, ("iteration", "bubble")),
        "jobs": jobs.order_by(*(sort_ordering(PlanningJob, sort) or ("-created_at", "-id")))[:RECENT_ROWS],
        "runs": selectors.run_list_for_user(user=user).filter(plan__job__spec__team=team, archived_at__isnull=True)[
            :RECENT_ROWS],
        "specs": selectors.spec_list_for_user(user=user).filter(team=team, archived_at__isnull=True).defer("doc")[
            :RECENT_ROWS],
        **(role_permissions(user=user, team=team) if team else {}),
    })


@login_required
@require_http_methods(["GET", "POST"])
def upload(request: HttpRequest) -> HttpResponse:
    form = UploadForm(request.POST or None, request.FILES or None, user=request.user,
                      initial={"team": current_team(request), "existing_spec": request.GET.get("spec"),
                               "preset": request.GET.get("preset")})
    if request.method == "POST" and form.is_valid():
        if form.spec_record is not None:
            with transaction.atomic():
                job = job_create(spec_record=spec_for_shape(record=form.spec_record, spec=form.spec,
                                                            user=request.user),
                                 user=request.user, request=form.job_request)
        else:
            job = spec_create_with_job(team=form.team, user=request.user, spec=form.unshaped_spec or form.spec,
                                       source_filename=form.source_filename, request=form.job_request,
                                       warnings=form.spec_warnings,
                                       planned=form.spec if form.unshaped_spec is not None else None)
        return redirect("studio:job", job_id=job.pk)
    status = 400 if form.is_bound else 200
    return render(request, "studio/upload.html", {"form": form}, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def spec_detail(request: HttpRequest, spec_id: int) -> HttpResponse:
    record = selectors.spec_get_for_user(user=request.user, spec_id=spec_id)
    spec = load_model_spec(record.doc)
    form = SpecPlanningForm(request.POST or None, request.FILES or None, spec=spec, team=record.team)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            job = job_create(spec_record=spec_for_shape(record=record, spec=form.spec, user=request.user),
                             user=request.user, request=form.job_request)
        return redirect("studio:job", job_id=job.pk)
    return _spec_page(request, record, spec, form, status=400 if form.is_bound else 200)


def _spec_page(request: HttpRequest, record, spec, form, *, profile_error: str = "", status: int = 200):
    # The cluster asked for, else the preset the spec was last planned on (its jobs are newest first), else the
    # host's CPU: a model planned on H100s opens on the H100's costs.
    recent = record.jobs.filter(deleted_at__isnull=True).exclude(cluster_preset="").values_list(
        "cluster_preset", flat=True)[:RECENT_ROWS]
    last_planned = next((name for name in recent if name in preset_names()), "cpu-host")
    cost_cluster = request.GET.get("cluster") if request.GET.get("cluster") in preset_names() else last_planned
    measured = selectors.spec_measured_profile(spec=record)
    return render(request, "studio/spec_detail.html", {
        "record": record, "spec": spec, "layers": list(zip(spec.layer_names(), spec.layers)), "form": form,
        "jobs": record.jobs.filter(deleted_at__isnull=True)[:RECENT_ROWS],
        "layer_costs": layer_cost_chart(spec=spec, cluster_preset=cost_cluster, measured=measured),
        "cost_cluster": cost_cluster, "cluster_presets": preset_names(), "measured": measured,
        "profiles": record.measured_profiles.filter(deleted_at__isnull=True)[:5], "profile_error": profile_error,
        **role_permissions(user=request.user, team=record.team, creator_id=record.owner_id),
    }, status=status)


@login_required
@require_POST
def spec_profile(request: HttpRequest, spec_id: int) -> HttpResponse:
    """Measure the spec on the runs' host (``services.profiling``), then back to the spec page."""
    record = selectors.spec_get_for_user(user=request.user, spec_id=spec_id)
    try:
        with transaction.atomic():
            measured_profile_create(spec_record=record, user=request.user,
                                    num_ranks=int(request.POST.get("num_ranks") or 2),
                                    split_backward=request.POST.get("split_backward") == "on")
    except (SpecError, ValueError) as error:
        spec = load_model_spec(record.doc)
        return _spec_page(request, record, spec, SpecPlanningForm(spec=spec), profile_error=str(error), status=400)
    return redirect("studio:spec", spec_id=record.pk)


def _job_page(request: HttpRequest, job: PlanningJob, run_form: RunForm, plan: Plan | None = None,
              status: int = 200) -> HttpResponse:
    """The job, its search comparison (if any), and one of its plans: ``plan``, else the one the job made (plans
    edited from it are listed, never shown in its place). A hybrid job shows its configurations, cluster and
    memory instead (``hybrid_pages``)."""
    plan = plan or selectors.job_own_plan(job=job)
    context = {"job": job, "plan": plan, "run_form": run_form,
               "comparison": None if job.is_hybrid else search_comparison(job.result),
               **role_permissions(user=request.user, team=job.spec.team, creator_id=job.created_by_id)}
    if job.is_hybrid:
        context.update(hybrid_page_context(job), plan=None, hybrid_plan=plan)
    elif plan is not None:
        context.update(plan_context(plan))
    return render(request, "studio/job_detail.html", context, status=status)


def search_comparison(result: dict) -> dict | None:
    """What the comparison card shows of a search's summary: its plan, then every baseline fastest first
    (each with AdaPtis's speedup over it), the gap to the lower bound and the bound's parts, largest first."""
    if not result:
        return None
    adaptis = {"strategy": "adaptis", "plan_id": result["plan_id"], "iteration_ms": result["iteration_ms"],
               "bubble_ratio": result["bubble_ratio"], "peak_memory_bytes": result["peak_memory_bytes"],
               "adaptis_speedup": 1.0, "fits_memory": True, "layout": result["layout"]}
    baselines = sorted(({"strategy": name, **metrics} for name, metrics in result["baselines"].items()),
                       key=lambda row: row["iteration_ms"])
    parts = [(name.removesuffix("_ms").replace("_", " "), value)
             for name, value in result["lower_bound"].items() if name != "lower_bound_ms"]
    return {"rows": [{**row, "bubble_percent": 100 * row["bubble_ratio"]} for row in (adaptis, *baselines)],
            "gap_percent": 100 * result["gap"], "bound_parts": sorted(parts, key=lambda part: -part[1])}


def plan_context(plan: Plan) -> dict:
    """What the plan section of a page shows: metrics, per-device rows, the timeline data for the chart."""
    simulation = plan_prediction(plan)
    return {
        "simulation": simulation,
        "per_device": simulation["per_device"],
        "timeline_data": {"num_devices": plan.plan_doc["num_devices"], "predicted": simulation["timeline"],
                          "iteration_ms": simulation["iteration_ms"]},
        "local_prediction": plan_local_prediction(plan),
        **run_card_context(plan),
    }


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = selectors.job_get_for_user(user=request.user, job_id=job_id)
    plan = selectors.job_plan_from_query(job=job, plan_id=request.GET.get("plan"))
    return _job_page(request, job, RunForm(), plan=plan)


@login_required
@require_POST
def job_cancel_view(request: HttpRequest, job_id: int) -> HttpResponse:
    job = selectors.job_get_for_user(user=request.user, job_id=job_id)
    with suppress(SpecError):  # it finished meanwhile: the page it returns to shows how
        job_cancel(job=job, user=request.user)
    return redirect("studio:job", job_id=job.pk)


@login_required
@require_POST
def plan_run(request: HttpRequest, plan_id: int) -> HttpResponse:
    plan = selectors.plan_get_for_user(user=request.user, plan_id=plan_id)
    form = RunForm(request.POST)
    if form.is_valid():
        try:
            with transaction.atomic():
                run = run_create(plan=plan, user=request.user, steps=form.cleaned_data["steps"],
                                 scale_down=form.cleaned_data["scale_down"])
            return redirect("studio:run", run_id=run.pk)
        except SpecError as error:
            form.add_spec_error(error)
    if request.POST.get("page") == "plan":  # the refusal shown on the page the form was sent from
        return plan_page(request, plan, run_form=form, status=400)
    return _job_page(request, plan.job, form, plan=plan, status=400)


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    return _run_page(request, selectors.run_get_for_user(user=request.user, run_id=run_id))


@login_required
@require_POST
def run_replan(request: HttpRequest, run_id: int) -> HttpResponse:
    run = selectors.run_get_for_user(user=request.user, run_id=run_id)
    try:
        job = job_replan_from_run(run=run, user=request.user)
    except SpecError as error:
        return _run_page(request, run, replan_error=str(error), status=getattr(error, "status", 400))
    return redirect("studio:job", job_id=job.pk)


@login_required
@require_POST
def run_cancel_view(request: HttpRequest, run_id: int) -> HttpResponse:
    run = selectors.run_get_for_user(user=request.user, run_id=run_id)
    with suppress(SpecError):  # it finished meanwhile: the page it returns to shows how
        run_cancel(run=run, user=request.user)
    return redirect("studio:run", run_id=run.pk)


def _run_page(request: HttpRequest, run, *, replan_error: str = "", status: int = 200) -> HttpResponse:
    plan = run.plan
    local = plan_local_prediction(plan)  # the plan's stages timed on the runs' host, once measured
    simulation = local or plan_prediction(plan)
    events = selectors.run_event_rows_after(run=run)  # the first page; the page polls for the rest
    return render(request, "studio/run_detail.html", {
        "run": run, "plan": plan, "job": plan.job, "replan_error": replan_error,
        "replans": selectors.run_replans(run=run),
        "phase": run_phase(run=run, event_count=len(events)), "local_prediction": local, "simulation": simulation,
        "observed_statistic": observed_statistic(run.summary),
        "timeline_data": {
            "num_devices": plan.plan_doc["num_devices"], "predicted": simulation["timeline"],
            "iteration_ms": simulation["iteration_ms"],
            "stage_devices": [stage["device"] for stage in plan.plan_doc["stages"]],
            "observed": events,
        },
        "device_comparison": device_comparison(simulation, run.summary),
        "steps_chart": run_steps_chart(run=run, predicted_ms=simulation["iteration_ms"],
                                       predicted_tokens_per_s=simulation.get("tokens_per_s")),
        "launch": launch(run, ingest_url=request.build_absolute_uri(reverse("api:run-events", args=[run.pk])))
        if run.target == "cluster" else None,
        **role_permissions(user=request.user, team=plan.job.spec.team, creator_id=run.created_by_id),
    }, status=status)


def device_comparison(simulation: dict, observed_summary: dict) -> list[dict]:
    """Per device: the observed busy/bubble of a finished run next to the predicted bubble ratio."""
    predicted = {row["device"]: row for row in simulation["per_device"]}
    rows = []
    for row in (observed_summary or {}).get("per_device", []):
        expected = predicted.get(row["device"])
        rows.append({"device": row["device"], "observed_busy_ms": row["busy_ms"], "observed_bubble_ms": row["bubble_ms"],
                     "observed_bubble_ratio": row["bubble_ratio"],
                     "predicted_bubble_ratio": expected["bubble_ms"] / simulation["iteration_ms"] if expected else None})
    return rows
