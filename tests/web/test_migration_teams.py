"""Migration 0004 on a database from before it: a team with two owners (possible through Django admin) keeps
the earliest as owner and the other becomes an admin, so the one-owner constraint can be added."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("studio", "0003_run_balancing_loss")]


@pytest.mark.django_db(transaction=True)
def test_extra_owners_become_admins():
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate(BEFORE)
    try:
        old = executor.loader.project_state(BEFORE).apps
        User, Team, Membership = (old.get_model(*name) for name in
                                  (("auth", "User"), ("studio", "Team"), ("studio", "Membership")))
        first, second = (User.objects.create(username=name) for name in ("first", "second"))
        team = Team.objects.create(name="two-owners")
        Membership.objects.create(team=team, user=first, role="owner")
        Membership.objects.create(team=team, user=second, role="owner")
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
    from adaptis_web.studio.models import Membership as CurrentMembership

    roles = dict(CurrentMembership.objects.values_list("user__username", "role"))
    assert roles == {"first": "owner", "second": "admin"}
