"""Pages of teams (members, roles, invitations, ownership, switching) and of the user's API tokens.

Each POST names its ``action``; a SpecError shows on the page (400), a role's refusal is a 403 with its reason.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from adaptis_web.studio.accounts import teams
from adaptis_web.studio.accounts.forms import TeamForm, TokenForm
from adaptis_web.studio.accounts.roles import role_permissions
from adaptis_web.studio.accounts.selectors import (
    membership_list_for_user,
    team_current,
    team_get_for_user,
    team_memberships,
    team_open_invitations,
    token_get_for_user,
    token_list_for_user,
)
from adaptis_web.studio.accounts.tokens import token_create, token_revoke
from adaptis_web.studio.runs.cluster_runs import DEFAULT_ENVIRONMENT
from planner.errors import SpecError

CURRENT_TEAM_SESSION_KEY = "current_team_id"


def current_team(request: HttpRequest):
    """The team the user works in (switched to, else their first); None when they belong to none."""
    return team_current(user=request.user, team_id=request.session.get(CURRENT_TEAM_SESSION_KEY))


@login_required
@require_http_methods(["GET", "POST"])
def team_list(request: HttpRequest) -> HttpResponse:
    form = TeamForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            team = teams.team_create(name=form.cleaned_data["name"], owner=request.user)
            request.session[CURRENT_TEAM_SESSION_KEY] = team.pk
            return redirect("studio:team", team_id=team.pk)
        except SpecError as error:
            form.add_spec_error(error)
    memberships = membership_list_for_user(user=request.user)
    return render(request, "studio/teams.html", {"memberships": memberships, "form": form},
                  status=400 if form.is_bound else 200)


@login_required
@require_POST
def team_switch(request: HttpRequest) -> HttpResponse:
    team_id = request.POST.get("team", "")
    team = team_get_for_user(user=request.user, team_id=int(team_id)) if team_id.isdigit() else None
    if team is not None:
        request.session[CURRENT_TEAM_SESSION_KEY] = team.pk
    next_url = request.POST.get("next", "")
    return redirect(next_url if next_url.startswith("/") and not next_url.startswith("//") else "studio:dashboard")


TEAM_ACTIONS = {
    "rename": lambda team, by, post: teams.team_rename(team=team, user=by, name=post.get("name", "")),
    "environment": lambda team, by, post: teams.team_run_environment_set(
        team=team, user=by, environment=post.get("run_environment", "")),
    "add": lambda team, by, post: teams.member_add_by_username(team=team, by=by, username=post.get("username", ""),
                                                               role=post.get("role", "")),
    "role": lambda team, by, post: teams.member_role_change(team=team, by=by, user_id=_user_id(post),
                                                            role=post.get("role", "")),
    "remove": lambda team, by, post: teams.member_remove(team=team, by=by, user_id=_user_id(post)),
    "transfer": lambda team, by, post: teams.team_transfer(team=team, by=by, user_id=_user_id(post)),
}


def _user_id(post) -> int:
    value = post.get("user", "")
    if not value.isdigit():
        raise SpecError("user", "is required: the member's id")
    return int(value)


@login_required
@require_http_methods(["GET", "POST"])
def team_detail(request: HttpRequest, team_id: int) -> HttpResponse:
    team = team_get_for_user(user=request.user, team_id=team_id)
    error, invitation_url, status = None, None, 200
    action = request.POST.get("action", "")
    if request.method == "POST":
        try:
            if action == "leave":
                teams.team_leave(team=team, user=request.user)
                request.session.pop(CURRENT_TEAM_SESSION_KEY, None)
                return redirect("studio:teams")
            if action == "invite":
                _, key = teams.invitation_create(team=team, by=request.user, role=request.POST.get("role", ""))
                invitation_url = request.build_absolute_uri(reverse("studio:invitation", args=[key]))
                status = 201
            elif action in TEAM_ACTIONS:
                TEAM_ACTIONS[action](team, request.user, request.POST)
                return redirect("studio:team", team_id=team.pk)
            else:
                raise SpecError("action", f"unknown action {action!r}")
        except SpecError as spec_error:
            error, status = spec_error, 400
    return render(request, "studio/team_detail.html", {
        "team": team, "members": team_memberships(team=team), "error": error,
        "invitations": team_open_invitations(team=team), "invitation_url": invitation_url,
        "grantable_roles": teams.GRANTABLE_ROLES, **role_permissions(user=request.user, team=team),
        "default_environment": DEFAULT_ENVIRONMENT.split("#")[0].strip(),
    }, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def invitation(request: HttpRequest, key: str) -> HttpResponse:
    """An invitation link: shows the team and role, POST joins."""
    try:
        found = teams.invitation_for_key(key=key)
        if request.method == "POST":
            membership = teams.invitation_accept(key=key, user=request.user)
            request.session[CURRENT_TEAM_SESSION_KEY] = membership.team_id
            return redirect("studio:team", team_id=membership.team_id)
    except SpecError as error:
        return render(request, "studio/invitation.html", {"error": error}, status=400)
    return render(request, "studio/invitation.html", {"invitation": found})


@login_required
@require_http_methods(["GET", "POST"])
def api_tokens(request: HttpRequest) -> HttpResponse:
    """The user's API tokens; POST creates one, shown on this response only (it is stored hashed)."""
    form = TokenForm(request.POST or None)
    created_key, status = None, 200
    if request.method == "POST":
        if form.is_valid():
            try:
                _, created_key = token_create(user=request.user, name=form.cleaned_data["name"],
                                              expires_in_days=form.cleaned_data["expires_in_days"])
                form = TokenForm()
            except SpecError as error:
                form.add_spec_error(error)
        status = 400 if created_key is None else 201
    return render(request, "studio/api_tokens.html", {
        "tokens": token_list_for_user(user=request.user), "form": form, "created_key": created_key,
    }, status=status)


@login_required
@require_POST
def api_token_revoke(request: HttpRequest, token_key: str) -> HttpResponse:
    token_revoke(token=token_get_for_user(user=request.user, token_key=token_key))
    return redirect("studio:api-tokens")
