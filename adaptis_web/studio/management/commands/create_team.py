"""``manage.py create_team NAME --owner USERNAME``: the first team of a fresh installation, owned by an existing
user (e.g. one made with ``createsuperuser``). Later teams are created on the Teams page or ``POST /api/teams/``."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from adaptis_web.studio.accounts.teams import team_create
from planner.errors import SpecError


class Command(BaseCommand):
    help = "Create a team owned by an existing user."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the team's name (unique, case-insensitively)")
        parser.add_argument("--owner", required=True, help="username of the owner (who then manages members)")

    def handle(self, *args, name: str, owner: str, **options):
        user = get_user_model().objects.filter(username=owner).first()
        if user is None:
            raise CommandError(f"--owner: no user named {owner!r}; create one first (manage.py createsuperuser)")
        try:
            team = team_create(name=name, owner=user)
        except SpecError as error:
            raise CommandError(f"{error.field}: {error.reason}") from None
        self.stdout.write(f"team {team.name!r} (id {team.pk}) created; {owner} is its owner")
