"""Saved team clusters: the page that saves one (a file, a pasted document or a copy of a preset or named
cluster) and the page of one. Renaming, archiving and deleting go through the curation pages like every kind."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from adaptis_web.studio.accounts.roles import role_permissions
from adaptis_web.studio.accounts.views import current_team
from adaptis_web.studio.catalog.clusters import cluster_create
from adaptis_web.studio.catalog.forms import ClusterForm
from adaptis_web.studio.catalog.selectors import cluster_get_for_user
from planner.service import load_cluster
from planner.errors import SpecError

RECENT_JOBS = 20


@login_required
@require_http_methods(["GET", "POST"])
def cluster_new(request: HttpRequest) -> HttpResponse:
    form = ClusterForm(request.POST or None, request.FILES or None, user=request.user,
                       initial={"team": current_team(request)})
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data.get("file")
        try:
            record = cluster_create(team=form.cleaned_data["team"], owner=request.user, cluster=form.cluster,
                                    name=form.cleaned_data["name"], source_filename=upload.name if upload else "")
            return redirect("studio:cluster", cluster_id=record.pk)
        except SpecError as error:
            form.add_spec_error(error)
    return render(request, "studio/cluster_new.html", {"form": form}, status=400 if form.is_bound else 200)


@login_required
def cluster_detail(request: HttpRequest, cluster_id: int) -> HttpResponse:
    record = cluster_get_for_user(user=request.user, cluster_id=cluster_id)
    cluster = load_cluster(record.doc)
    return render(request, "studio/cluster_detail.html", {
        "record": record, "cluster": cluster, "doc_json": json.dumps(record.doc, indent=2),
        "memory_gib": cluster.device.memory_bytes / 2**30,
        "jobs": record.jobs.filter(deleted_at__isnull=True).select_related("spec")[:RECENT_JOBS],
        **role_permissions(user=request.user, team=record.team, creator_id=record.owner_id),
    })
