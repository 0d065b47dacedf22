"""``manage.py seed_demo``: a demo team and user with every model preset as a team spec. Idempotent.

The login is public knowledge, so the command seeds only where ``settings.SEED_DEMO`` allows it (DEBUG on, or
ADAPTIS_SEED_DEMO=1); elsewhere it says why it did nothing and exits 0, so a deployment may always call it.
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from adaptis_web.studio.accounts.teams import membership_add
from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import Membership, ModelSpecRecord, Team
from planner.service import load_model_preset, model_preset_names

DEMO_TEAM = "demo"
DEMO_USER = "demo"
DEMO_PASSWORD = "demo-pass-2026"


class Command(BaseCommand):
    help = "Create the demo team, the user demo / demo-pass-2026 and the model presets as its specs."

    def handle(self, *args, **options):
        if not settings.SEED_DEMO:
            self.stdout.write("demo account not seeded: DEBUG is off and ADAPTIS_SEED_DEMO is not 1")
            return
        self._seed()

    @transaction.atomic
    def _seed(self):
        user, created = get_user_model().objects.get_or_create(username=DEMO_USER)
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        team, _ = Team.objects.get_or_create(name=DEMO_TEAM)
        membership_add(team=team, user=user, role=Membership.Role.OWNER)
        existing = set(ModelSpecRecord.objects.filter(team=team, source_filename__startswith="preset:")
                       .values_list("source_filename", flat=True))
        added = []
        for name in model_preset_names():
            if f"preset:{name}" not in existing:
                spec_create(team=team, owner=user, spec=load_model_preset(name), source_filename=f"preset:{name}")
                added.append(name)
        self.stdout.write(f"team {DEMO_TEAM!r}: user {DEMO_USER} / password {DEMO_PASSWORD}"
                          + ("" if created else " (existing user: password unchanged)"))
        self.stdout.write(f"model presets added: {', '.join(added) if added else 'none (all present)'}")
