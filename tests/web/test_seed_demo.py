"""``manage.py seed_demo``: the demo user can log in and sees every model preset; running it twice adds nothing."""

from io import StringIO

from django.contrib.auth import authenticate
from django.core.management import call_command
from django.test import RequestFactory

from adaptis_web.studio.models import Membership, ModelSpecRecord, Team
from planner.spec.presets import load_model_preset, model_preset_names


def test_seed_demo_creates_user_team_and_preset_specs_idempotently(db):
    output = StringIO()
    call_command("seed_demo", stdout=output)
    assert "demo / password demo-pass-2026" in output.getvalue()
    # django-axes watches every login, so authenticating takes the request it comes with
    user = authenticate(RequestFactory().post("/accounts/login/"), username="demo", password="demo-pass-2026")
    assert user is not None
    team = Team.objects.get(name="demo")
    assert Membership.objects.get(team=team, user=user).role == Membership.Role.OWNER
    specs = {record.name: record for record in ModelSpecRecord.objects.filter(team=team)}
    assert set(specs) == set(model_preset_names())
    assert {"tiny-llama", "tiny-hybrid", "llama-3-8b", "deepseek-v3"} <= set(specs)
    assert specs["deepseek-v3"].doc == load_model_preset("deepseek-v3").to_dict()

    call_command("seed_demo", stdout=StringIO())
    assert ModelSpecRecord.objects.filter(team=team).count() == len(model_preset_names())
    assert Team.objects.count() == 1 and Membership.objects.count() == 1


def test_seed_demo_creates_nothing_where_the_settings_forbid_it(db, settings):
    settings.SEED_DEMO = False
    output = StringIO()
    call_command("seed_demo", stdout=output)
    assert "not seeded" in output.getvalue()
    assert authenticate(RequestFactory().post("/accounts/login/"), username="demo", password="demo-pass-2026") is None
    assert not Team.objects.exists() and not ModelSpecRecord.objects.exists()


def _seed_demo_setting(**env: str) -> bool:
    """settings.SEED_DEMO as a process started with ``env`` (and nothing else of ours) computes it."""
    import os
    import subprocess
    import sys

    base = {key: value for key, value in os.environ.items() if key not in ("DEBUG", "ADAPTIS_SEED_DEMO")}
    result = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.SEED_DEMO)"],
        env={**base, "DJANGO_SETTINGS_MODULE": "adaptis_web.settings", "SECRET_KEY": "x" * 50, **env},
        capture_output=True, text=True, check=True)
    return result.stdout.strip() == "True"


def test_demo_account_is_seeded_in_development_or_on_request_never_in_production_by_default():
    assert _seed_demo_setting() is True  # DEBUG defaults to on: make run
    assert _seed_demo_setting(DEBUG="true", ADAPTIS_SEED_DEMO="0") is True
    assert _seed_demo_setting(DEBUG="false") is False  # production, as docker-compose runs it
    assert _seed_demo_setting(DEBUG="false", ADAPTIS_SEED_DEMO="0") is False
    assert _seed_demo_setting(DEBUG="false", ADAPTIS_SEED_DEMO="1") is True
