"""What each role in a team may do; every service that changes something asks here first.

| role   | may |
|--------|-----|
| viewer | read and export the team's specs, clusters, jobs, plans and runs |
| member | also create specs, clusters, jobs and runs (which create plans); cancel, rename, archive and delete their own |
| admin  | also do that to anyone's, manage members and invitations, restore deleted objects |
| owner  | an admin who also transfers the ownership; each team has exactly one |

A refusal is a ``RoleRefusal``: Django's PermissionDenied (a page answers 403 with the reason), which the API
turns into 403 ``{"errors": [{"field": "role", "reason": ...}]}``.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied

from adaptis_web.studio.models import Membership, Team

Role = Membership.Role
RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2, Role.OWNER: 3}


class RoleRefusal(PermissionDenied):
    def __init__(self, reason: str, field: str = "role"):
        super().__init__(reason)
        self.field = field
        self.reason = reason


def role_of(*, user: AbstractBaseUser, team: Team) -> str | None:
    """The user's role in ``team``; None for someone outside it (anonymous included)."""
    if not user.is_authenticated:
        return None
    return Membership.objects.filter(team=team, user=user).values_list("role", flat=True).first()


def role_allows(role: str | None, at_least: str) -> bool:
    return role is not None and RANK[role] >= RANK[at_least]


def role_require(*, user: AbstractBaseUser, team: Team, at_least: str, doing: str) -> str:
    """The user's role in ``team`` when it is ``at_least`` that trusted; RoleRefusal naming why not."""
    role = role_of(user=user, team=team)
    if role is None:
        raise RoleRefusal(f"{doing} needs a role in team {team.name!r}; you are not a member of it")
    if not role_allows(role, at_least):
        raise RoleRefusal(f"{doing} needs the {at_least} role or above in team {team.name!r}; you are a {role}")
    return role


def role_require_own_or_admin(*, user: AbstractBaseUser, team: Team, creator_id: int | None, doing: str) -> str:
    """A member may change what they created; an admin (or the owner) anything of the team."""
    role = role_require(user=user, team=team, at_least=Role.MEMBER, doing=doing)
    if creator_id != user.pk and not role_allows(role, Role.ADMIN):
        raise RoleRefusal(f"{doing} on something another user created needs the admin role in team "
                          f"{team.name!r}; you are a {role}")
    return role


def role_permissions(*, user: AbstractBaseUser, team: Team, creator_id: int | None = None) -> dict:
    """What a page offers ``user`` on an object of ``team`` created by ``creator_id``: it shows only the buttons
    the services would accept."""
    role = role_of(user=user, team=team)
    admin = role_allows(role, Role.ADMIN)
    return {"role": role, "can_create": role_allows(role, Role.MEMBER), "is_admin": admin,
            "can_change": admin or (role_allows(role, Role.MEMBER) and creator_id == user.pk)}
