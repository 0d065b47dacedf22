"""The planning pages: upload a spec and plan it, a spec's page (plan it again, its layers' costs, its measured
profiles), a job's page (its search comparison or hybrid configurations, and one of its plans). Each view reads
through a selector (404 for other teams' objects), validates with a form and calls a service; live parts (job
progress) poll the REST API from the browser."""

from __future__ import annotations

from contextlib import suppress

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from adaptis_web.studio.accounts.roles import role_permissions
from adaptis_web.studio.accounts.views import current_team
from adaptis_web.studio.catalog.selectors import spec_get_for_user
from adaptis_web.studio.history.views import RECENT_ROWS
from adaptis_web.studio.models import Plan, PlanningJob
from adaptis_web.studio.planning.capacity import capacity_page_context
from adaptis_web.studio.planning.forms import SpecPlanningForm, UploadForm
from adaptis_web.studio.planning.hybrid_pages import hybrid_page_context
from adaptis_web.studio.planning.jobs import (job_cancel, job_create_for_shape, job_from_capacity_count,
                                             spec_create_with_job)
from adaptis_web.studio.planning.plan_views import run_card_context
from adaptis_web.studio.planning.predictions import plan_prediction
from adaptis_web.studio.planning.selectors import job_get_for_user, job_own_plan, job_plan_from_query
from adaptis_web.studio.runs.forms import RunForm
from adaptis_web.studio.runs.profiling import layer_cost_chart, plan_local_prediction
from adaptis_web.studio.runs.selectors import spec_measured_profile
from planner.errors import SpecError
from planner.service import load_model_spec, preset_names


@login_required
@require_http_methods(["GET", "POST"])
def upload(request: HttpRequest) -> HttpResponse:
    form = UploadForm(request.POST or None, request.FILES or None, user=request.user,
                      initial={"team": current_team(request), "existing_spec": request.GET.get("spec"),
                               "preset": request.GET.get("preset")})
    if request.method == "POST" and form.is_valid():
        if form.spec_record is not None:
            job = job_create_for_shape(spec_record=form.spec_record, spec=form.spec, user=request.user,
                                       request=form.job_request)
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
    record = spec_get_for_user(user=request.user, spec_id=spec_id)
    spec = load_model_spec(record.doc)
    form = SpecPlanningForm(request.POST or None, request.FILES or None, spec=spec, team=record.team)
    if request.method == "POST" and form.is_valid():
        job = job_create_for_shape(spec_record=record, spec=form.spec, user=request.user, request=form.job_request)
        return redirect("studio:job", job_id=job.pk)
    return spec_page(request, record, spec, form, status=400 if form.is_bound else 200)


def spec_page(request: HttpRequest, record, spec, form, *, profile_error: str = "", status: int = 200):
    # The cluster asked for, else the preset the spec was last planned on (its jobs are newest first), else the
    # host's CPU: a model planned on H100s opens on the H100's costs.
    recent = record.jobs.filter(deleted_at__isnull=True).exclude(cluster_preset="").values_list(
        "cluster_preset", flat=True)[:RECENT_ROWS]
    last_planned = next((name for name in recent if name in preset_names()), "cpu-host")
    cost_cluster = request.GET.get("cluster") if request.GET.get("cluster") in preset_names() else last_planned
    measured = spec_measured_profile(spec=record)
    return render(request, "studio/spec_detail.html", {
        "record": record, "spec": spec, "layers": list(zip(spec.layer_names(), spec.layers)), "form": form,
        "jobs": record.jobs.filter(deleted_at__isnull=True)[:RECENT_ROWS],
        "layer_costs": layer_cost_chart(spec=spec, cluster_preset=cost_cluster, measured=measured),
        "cost_cluster": cost_cluster, "cluster_presets": preset_names(), "measured": measured,
        "profiles": record.measured_profiles.filter(deleted_at__isnull=True)[:5], "profile_error": profile_error,
        **role_permissions(user=request.user, team=record.team, creator_id=record.owner_id),
    }, status=status)


def job_page(request: HttpRequest, job: PlanningJob, run_form: RunForm, plan: Plan | None = None,
              status: int = 200, capacity_error: str = "") -> HttpResponse:
    """The job, its search comparison (if any), and one of its plans: ``plan``, else the one the job made (plans
    edited from it are listed, never shown in its place). A hybrid job shows its configurations, cluster and
    memory instead (``hybrid_pages``)."""
    plan = plan or job_own_plan(job=job)
    context = {"job": job, "plan": plan, "run_form": run_form,
               "comparison": None if job.is_hybrid or job.is_capacity else search_comparison(job.result),
               **role_permissions(user=request.user, team=job.spec.team, creator_id=job.created_by_id)}
    if job.is_capacity:
        context.update(capacity_page_context(job), capacity_error=capacity_error)
    elif job.is_hybrid:
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
            "gap_percent": 100 * result["gap"], "bound_parts": sorted(parts, key=lambda part: -part[1]),
            # Results stored before the bound named its binding term and the plan's memory do not have them.
            "binding": result.get("binding"), "memory_binding": result.get("memory_binding")}


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
    job = job_get_for_user(user=request.user, job_id=job_id)
    plan = job_plan_from_query(job=job, plan_id=request.GET.get("plan"))
    return job_page(request, job, RunForm(), plan=plan)


@login_required
@require_POST
def job_cancel_view(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_get_for_user(user=request.user, job_id=job_id)
    with suppress(SpecError):  # it finished meanwhile: the page it returns to shows how
        job_cancel(job=job, user=request.user)
    return redirect("studio:job", job_id=job.pk)


@login_required
@require_POST
def job_plan_count_view(request: HttpRequest, job_id: int) -> HttpResponse:
    """A capacity job's count planned in full as a hybrid job (``job_from_capacity_count``); its page, or this one
    saying why not."""
    job = job_get_for_user(user=request.user, job_id=job_id)
    try:
        gpus = int(request.POST.get("gpus", ""))
    except ValueError:
        return job_page(request, job, RunForm(), status=400,
                        capacity_error=f"gpus: must be a GPU count; got {request.POST.get('gpus', '')!r}")
    try:
        hybrid_job = job_from_capacity_count(job=job, user=request.user, gpus=gpus)
    except SpecError as error:
        return job_page(request, job, RunForm(), status=getattr(error, "status", 400), capacity_error=str(error))
    return redirect("studio:job", job_id=hybrid_job.pk)
