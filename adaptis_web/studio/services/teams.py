"""Teams and their members."""

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from adaptis_web.studio.models import Membership, Team


@transaction.atomic
def team_create(*, name: str, owner: AbstractBaseUser) -> Team:
    team = Team.objects.create(name=name)
    Membership.objects.create(team=team, user=owner, role=Membership.Role.OWNER)
    return team


def membership_add(*, team: Team, user: AbstractBaseUser, role: str = Membership.Role.MEMBER) -> Membership:
    """Add ``user`` to ``team``, or change the role of an existing membership."""
    membership, _ = Membership.objects.update_or_create(team=team, user=user, defaults={"role": role})
    return membership

