"""Reads of teams, memberships, invitations and API tokens, always scoped to the user asking."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Case, QuerySet, Value, When
from django.shortcuts import get_object_or_404
from django.utils import timezone

from adaptis_web.studio.common.refusals import Missing
from adaptis_web.studio.models import ApiToken, Invitation, Membership, Team
from planner.errors import SpecError


def team_list_for_user(*, user: AbstractBaseUser) -> QuerySet[Team]:
    return Team.objects.filter(memberships__user=user).order_by("name")


def team_for_request(*, user: AbstractBaseUser, team_id: int | None) -> Team:
    """The team a request names, or the user's only team when it names none."""
    teams = team_list_for_user(user=user)
    if team_id is not None:
        team = teams.filter(pk=team_id).first()
        if team is None:
            raise Missing("team", f"no team with id {team_id} among your teams")
        return team
    count = teams.count()
    if count == 1:
        return teams.get()
    if count == 0:
        raise SpecError("team", "you belong to no team yet; ask a team owner to add you")
    raise SpecError("team", f"is required: you belong to {count} teams")


def membership_list_for_user(*, user: AbstractBaseUser) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("team").order_by("team__name")


def team_get_for_user(*, user: AbstractBaseUser, team_id: int) -> Team:
    return get_object_or_404(team_list_for_user(user=user), pk=team_id)


def team_memberships(*, team: Team) -> QuerySet[Membership]:
    """The team's members, the owner first, then by role and name."""
    order = Case(*(When(role=role, then=Value(rank)) for rank, role in enumerate(Membership.Role.values)))
    return team.memberships.select_related("user").order_by(order, "user__username")


def team_open_invitations(*, team: Team) -> QuerySet[Invitation]:
    return team.invitations.filter(accepted_at__isnull=True, expires_at__gt=timezone.now()).order_by("-created_at")


def team_current(*, user: AbstractBaseUser, team_id: int | None) -> Team | None:
    """The team a user works in: the one they switched to (``team_id``, kept in their session) while they still
    belong to it, else their first team by name; None when they have none."""
    teams = team_list_for_user(user=user)
    return (teams.filter(pk=team_id).first() if team_id is not None else None) or teams.first()


def token_list_for_user(*, user: AbstractBaseUser) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user)


def token_get_for_user(*, user: AbstractBaseUser, token_key: str) -> ApiToken:
    return get_object_or_404(token_list_for_user(user=user), token_key=token_key)


def user_is_member(*, user: AbstractBaseUser, team: Team) -> bool:
    return Membership.objects.filter(team=team, user=user).exists()
