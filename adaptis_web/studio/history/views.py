"""The dashboard (the current team's latest work), the team's history (specs, jobs, plans, runs) with the API's
filters and cursor pages, and the page that renames, archives, deletes and restores one object after showing what
depends on it."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from rest_framework.request import Request

from adaptis_web.studio.accounts.roles import Role, role_permissions, role_require
from adaptis_web.studio.accounts.selectors import team_list_for_user
from adaptis_web.studio.accounts.views import current_team
from adaptis_web.studio.catalog.selectors import spec_list_for_user
from adaptis_web.studio.history import curation
from adaptis_web.studio.history.filters import HISTORY_FILTERS, HistoryCursorPagination, sort_links, sort_ordering
from adaptis_web.studio.history.selectors import CURATED_KINDS, UNMEASURED, curated_get_for_user, history_for_user
from adaptis_web.studio.models import PlanningJob
from adaptis_web.studio.runs.selectors import run_list_for_user
from planner.errors import SpecError

RECENT_ROWS = 20


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """The current team's latest work (the History page has all of it, filtered); ``?sort=iteration`` (or
    ``bubble``, "-" for descending) orders the jobs by their own plan's result, as the History page does."""
    user, team = request.user, current_team(request)
    sort = request.GET.get("sort", "")
    jobs = history_for_user(user=user, kind="jobs").filter(spec__team=team, archived_at__isnull=True)
    return render(request, "studio/dashboard.html", {
        "teams": team_list_for_user(user=user), "team": team, **sort_links(sort, ("iteration", "bubble")),
        "jobs": jobs.order_by(*(sort_ordering(PlanningJob, sort) or ("-created_at", "-id")))[:RECENT_ROWS],
        "runs": run_list_for_user(user=user).filter(plan__job__spec__team=team, archived_at__isnull=True)[
            :RECENT_ROWS],
        "specs": spec_list_for_user(user=user).filter(team=team, archived_at__isnull=True).defer("doc")[
            :RECENT_ROWS],
        **(role_permissions(user=user, team=team) if team else {}),
    })


@login_required
def history(request: HttpRequest) -> HttpResponse:
    """``?kind=jobs&status=failed&q=…``: the current team's objects of one kind, filtered; the filters and the
    cursor stay in the URL. ``deleted=1`` lists the deleted ones, for an admin to restore."""
    kind = request.GET.get("kind", "jobs")
    if kind not in CURATED_KINDS:
        raise Http404(f"no history of {kind!r}")
    team = current_team(request)
    deleted = request.GET.get("deleted") == "1"
    if deleted and team is not None:
        role_require(user=request.user, team=team, at_least=Role.ADMIN, doing="listing deleted work")
    rows = history_for_user(user=request.user, kind=kind, deleted=deleted)
    if team is not None:
        rows = rows.filter(**{HISTORY_FILTERS[kind].team_path: team})
    filters = HISTORY_FILTERS[kind](request.GET, queryset=rows)
    paginator = HistoryCursorPagination()
    page = paginator.paginate_queryset(filters.qs, Request(request)) if filters.is_valid() else []
    return render(request, "studio/history.html", {
        **sort_links(request.GET.get("sort", ""), ("iteration", "bubble", "tokens_per_s", "observed_iteration")),
        "unmeasured": UNMEASURED,
        "kind": kind, "kinds": CURATED_KINDS, "filters": filters, "rows": page, "team": team,
        "deleted": deleted, "next_link": paginator.get_next_link() if page else None,
        "compare_kind": {"plans": "plan", "runs": "run"}.get(kind) if not deleted else None,
        "previous_link": paginator.get_previous_link() if page else None,
        **(role_permissions(user=request.user, team=team) if team else {}),
    }, status=200 if filters.is_valid() else 400)


CURATION_ACTIONS = {"archive": curation.object_archive, "unarchive": curation.object_unarchive,
                    "delete": curation.object_delete, "restore": curation.object_restore}


@login_required
@require_http_methods(["GET", "POST"])
def curate(request: HttpRequest, kind: str, object_id: int) -> HttpResponse:
    """Rename, archive, delete or restore a spec, job, plan or run; GET shows what depends on it first."""
    deleted = request.GET.get("deleted") == "1" or request.POST.get("action") == "restore"
    obj = curated_get_for_user(user=request.user, kind=kind, object_id=object_id, deleted=deleted)
    error, status = None, 200
    if request.method == "POST":
        action = request.POST.get("action", "")
        try:
            if action == "rename":
                curation.object_rename(obj=obj, user=request.user, name=request.POST.get("name", ""))
            elif action in CURATION_ACTIONS:
                CURATION_ACTIONS[action](obj=obj, user=request.user)
            else:
                raise SpecError("action", f"unknown action {action!r}")
            if action == "delete":
                return redirect(f"{reverse('studio:history')}?kind={kind}")
            return redirect("studio:curate", kind=kind, object_id=obj.pk)
        except SpecError as spec_error:
            error, status = spec_error, 400
    team = curation.object_team(obj)
    return render(request, "studio/curate.html", {
        "kind": kind, "noun": curation.KINDS[type(obj)].noun, "obj": obj, "error": error, "team": team,
        "dependents": curation.dependents_summary(obj),
        **role_permissions(user=request.user, team=team, creator_id=curation.object_creator_id(obj)),
    }, status=status)
