"""``manage.py create_team``: the first team of a fresh installation, owned by an existing user."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from adaptis_web.studio.models import Membership, Team


def test_creates_the_team_with_the_user_as_owner(db, django_user_model):
    django_user_model.objects.create_superuser("root", password="root-pass-2026")
    output = StringIO()
    call_command("create_team", "ml-infra", "--owner", "root", stdout=output)
    team = Team.objects.get(name="ml-infra")
    assert "team 'ml-infra'" in output.getvalue()
    assert list(Membership.objects.filter(team=team).values_list("user__username", "role")) == [("root", "owner")]


@pytest.mark.parametrize("name, owner, message", [("ml-infra", "nobody", "--owner: no user named 'nobody'"),
                                                  ("", "root", "name: is required")])
def test_bad_arguments_are_refused_and_create_nothing(db, django_user_model, name, owner, message):
    django_user_model.objects.create_user("root", password="root-pass-2026")
    with pytest.raises(CommandError, match=message):
        call_command("create_team", name, "--owner", owner)
    assert not Team.objects.exists()
