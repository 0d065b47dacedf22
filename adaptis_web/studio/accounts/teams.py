"""Teams and their members: create a team, add members by username or by a single-use invitation link,
change roles, remove members, leave, transfer the ownership. Who may do which is accounts.roles's rule."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from adaptis_web.studio.accounts.roles import Role, RoleRefusal, role_require
from adaptis_web.studio.common.refusals import Conflict, Missing
from adaptis_web.studio.models import Invitation, Membership, Team
from planner.errors import SpecError

MAX_TEAM_NAME = 100
MAX_RUN_ENVIRONMENT = 500
# What a single line of shell may not hold: a line break or another control character (a tab is fine).
NOT_ONE_LINE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
INVITATION_LIFETIME = timedelta(days=7)
GRANTABLE_ROLES = (Role.ADMIN, Role.MEMBER, Role.VIEWER)  # the owner's role moves only by a transfer


def _checked_team_name(name: str, *, team: Team | None = None) -> str:
    name = name.strip()
    if not name:
        raise SpecError("name", "is required")
    if len(name) > MAX_TEAM_NAME:
        raise SpecError("name", f"is {len(name)} characters; the limit is {MAX_TEAM_NAME}")
    if Team.objects.filter(name__iexact=name).exclude(pk=getattr(team, "pk", None)).exists():
        raise Conflict("name", f"a team named {name!r} already exists")
    return name


def _checked_role(role: str, field: str = "role") -> str:
    if role not in GRANTABLE_ROLES:
        raise SpecError(field, f"must be one of {', '.join(GRANTABLE_ROLES)}; got {role!r} (the owner's role "
                               "moves only by transferring the ownership)")
    return role


@transaction.atomic
def team_create(*, name: str, owner: AbstractBaseUser) -> Team:
    team = Team.objects.create(name=_checked_team_name(name))
    Membership.objects.create(team=team, user=owner, role=Role.OWNER)
    return team


def team_rename(*, team: Team, user: AbstractBaseUser, name: str) -> Team:
    role_require(user=user, team=team, at_least=Role.ADMIN, doing="renaming the team")
    team.name = _checked_team_name(name, team=team)
    team.save(update_fields=["name"])
    return team


def checked_run_environment(environment: str) -> str:
    """A team's environment line for its cluster runs: one line of shell (or ``image:NAME``), not blank, bounded;
    the white space around it taken away."""
    if NOT_ONE_LINE.search(environment):
        raise SpecError("run_environment", "must be a single line (no line breaks or other control characters): "
                                           "join commands with && or ;")
    if len(environment) > MAX_RUN_ENVIRONMENT:
        raise SpecError("run_environment", f"is {len(environment)} characters; the limit is {MAX_RUN_ENVIRONMENT}")
    environment = environment.strip()
    if not environment:
        raise SpecError("run_environment", "is required: the shell line that readies the executor on every node, "
                                           "e.g. source ~/adaptis/.venv/bin/activate")
    return environment


def team_run_environment_set(*, team: Team, user: AbstractBaseUser, environment: str) -> Team:
    """Save the environment line the team's cluster runs start from, once for all of them (admins): the Slurm
    script runs it on every node, and an ``image:NAME`` is the container image of the Kubernetes PyTorchJob. A run's
    own environment, sent when it is created, overrides it."""
    role_require(user=user, team=team, at_least=Role.ADMIN, doing="changing the team's run environment")
    team.run_environment = checked_run_environment(environment)
    team.save(update_fields=["run_environment"])
    return team


@transaction.atomic
def team_update(*, team: Team, user: AbstractBaseUser, name: str | None = None,
                run_environment: str | None = None) -> Team:
    """Rename the team and/or save its run environment (admins; nothing sent changes nothing, still for admins)."""
    role_require(user=user, team=team, at_least=Role.ADMIN, doing="changing the team")
    if name is not None:
        team_rename(team=team, user=user, name=name)
    if run_environment is not None:
        team_run_environment_set(team=team, user=user, environment=run_environment)
    return team


def membership_add(*, team: Team, user: AbstractBaseUser, role: str = Role.MEMBER) -> Membership:
    """Add ``user`` to ``team``, or change the role of an existing membership (set-up code: no role check)."""
    membership, _ = Membership.objects.update_or_create(team=team, user=user, defaults={"role": role})
    return membership


@transaction.atomic
def member_add_by_username(*, team: Team, by: AbstractBaseUser, username: str, role: str) -> Membership:
    role_require(user=by, team=team, at_least=Role.ADMIN, doing="adding a member")
    _checked_role(role)
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise Missing("username", f"no user named {username!r}")
    if Membership.objects.filter(team=team, user=user).exists():
        raise Conflict("username", f"{username!r} is already a member of team {team.name!r}")
    return Membership.objects.create(team=team, user=user, role=role)


def _membership(team: Team, user_id: int) -> Membership:
    membership = Membership.objects.select_related("user").filter(team=team, user_id=user_id).first()
    if membership is None:
        raise Missing("user", f"no member with id {user_id} in team {team.name!r}")
    return membership


def member_role_change(*, team: Team, by: AbstractBaseUser, user_id: int, role: str) -> Membership:
    role_require(user=by, team=team, at_least=Role.ADMIN, doing="changing a member's role")
    _checked_role(role)
    membership = _membership(team, user_id)
    if membership.role == Role.OWNER:
        raise RoleRefusal("the owner's role changes only when they transfer the ownership")
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


def member_remove(*, team: Team, by: AbstractBaseUser, user_id: int) -> None:
    """An admin removes a member; anyone may remove themselves (``team_leave``). The owner is never removed."""
    if user_id == by.pk:
        team_leave(team=team, user=by)
        return
    role_require(user=by, team=team, at_least=Role.ADMIN, doing="removing a member")
    membership = _membership(team, user_id)
    if membership.role == Role.OWNER:
        raise RoleRefusal("the owner cannot be removed; they may transfer the ownership first")
    membership.delete()


def team_leave(*, team: Team, user: AbstractBaseUser) -> None:
    role = role_require(user=user, team=team, at_least=Role.VIEWER, doing="leaving a team")
    if role == Role.OWNER:
        raise RoleRefusal("the owner cannot leave the team; transfer the ownership to another member first")
    Membership.objects.filter(team=team, user=user).delete()


@transaction.atomic
def team_transfer(*, team: Team, by: AbstractBaseUser, user_id: int) -> Membership:
    """Make member ``user_id`` the owner; the previous owner stays on as an admin."""
    role_require(user=by, team=team, at_least=Role.OWNER, doing="transferring the ownership")
    successor = _membership(team, user_id)
    if successor.user_id == by.pk:
        raise Conflict("user", "you already own the team")
    Membership.objects.filter(team=team, role=Role.OWNER).update(role=Role.ADMIN)
    successor.role = Role.OWNER
    successor.save(update_fields=["role"])
    return successor


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def invitation_create(*, team: Team, by: AbstractBaseUser, role: str) -> tuple[Invitation, str]:
    """A single-use invitation; returns it and its key (the link's secret, shown once and stored hashed)."""
    role_require(user=by, team=team, at_least=Role.ADMIN, doing="inviting members")
    _checked_role(role)
    key = secrets.token_urlsafe(24)
    invitation = Invitation.objects.create(team=team, role=role, key_digest=_digest(key), created_by=by,
                                           expires_at=timezone.now() + INVITATION_LIFETIME)
    return invitation, key


def invitation_for_key(*, key: str) -> Invitation:
    """The open invitation ``key`` opens; SpecError on ``key`` for an unknown, used or expired one."""
    invitation = Invitation.objects.select_related("team").filter(key_digest=_digest(key)).first()
    if invitation is None:
        raise Missing("key", "no such invitation")
    if invitation.accepted_at is not None:
        raise Conflict("key", "this invitation has already been used")
    if invitation.expires_at < timezone.now():
        raise Conflict("key", "this invitation has expired; ask a team admin for a new one")
    return invitation


@transaction.atomic
def invitation_accept(*, key: str, user: AbstractBaseUser) -> Membership:
    invitation = invitation_for_key(key=key)
    if Membership.objects.filter(team=invitation.team, user=user).exists():
        raise Conflict("key", f"you are already a member of team {invitation.team.name!r}")
    # Claim it with a conditional update: of two people opening the link at once, one gets in.
    if not Invitation.objects.filter(pk=invitation.pk, accepted_at__isnull=True).update(
            accepted_at=timezone.now(), accepted_by=user):
        raise Conflict("key", "this invitation has already been used")
    return Membership.objects.create(team=invitation.team, user=user, role=invitation.role)
