"""Every endpoint and page against every kind of visitor: the team's owner, an admin, a member, a viewer, a member
of another team and an anonymous visitor (healthchecks' style: each view test checks access).

The objects acted on were created by the owner (see the ``crew`` fixture), so a plain member changing them is
refused as a viewer is. Each row gives the expected status for (owner, admin, member, viewer, outsider,
anonymous); a refusal by role must be a 403 that names the reason, and nothing may change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.models import (ClusterRecord, Invitation, MeasuredProfile, Membership, ModelSpecRecord, Plan,
                                       PlanningJob, Run)
from planner.spec.presets import load_model_preset

# Who may do what is the roles table's and the views' business, the same on either database.
pytestmark = pytest.mark.any_database

WHO = ("owner", "admin", "member", "viewer", "outsider", "anonymous")
READ = (200, 200, 200, 200, 404, 401)  # an object of the team
LIST = (200, 200, 200, 200, 200, 401)  # a list: the outsider sees their own team's rows
CREATE = (201, 201, 201, 403, 404, 401)  # the outsider names a spec, plan or team they cannot see: 404 on it
CHANGE_ANYONES = (200, 200, 403, 403, 404, 401)  # the owner's object: a member may change only their own
ADMIN_ONLY = (200, 200, 403, 403, 404, 401)


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    url: Callable
    expected: tuple
    data: Callable = lambda crew: None

    def __str__(self) -> str:
        return self.name


API_CASES = [
    Case("teams list", "get", lambda c: reverse("api:teams"), LIST),
    Case("team detail", "get", lambda c: reverse("api:team", args=[c.people.team.pk]), READ),
    Case("create a team", "post", lambda c: reverse("api:teams"), (201, 201, 201, 201, 201, 401),
         lambda c: {"name": "new-team"}),
    Case("rename the team", "patch", lambda c: reverse("api:team", args=[c.people.team.pk]), ADMIN_ONLY,
         lambda c: {"name": "renamed-team"}),
    Case("save the team's run environment", "patch", lambda c: reverse("api:team", args=[c.people.team.pk]),
         ADMIN_ONLY, lambda c: {"run_environment": "source ~/adaptis/.venv/bin/activate"}),
    Case("add a member", "post", lambda c: reverse("api:team-members", args=[c.people.team.pk]),
         (201, 201, 403, 403, 404, 401), lambda c: {"username": "mallory", "role": "viewer"}),
    Case("change a role", "patch", lambda c: reverse("api:team-member", args=[c.people.team.pk, c.extra.pk]),
         ADMIN_ONLY, lambda c: {"role": "viewer"}),
    Case("remove a member", "delete", lambda c: reverse("api:team-member", args=[c.people.team.pk, c.extra.pk]),
         (204, 204, 403, 403, 404, 401)),
    Case("invite by link", "post", lambda c: reverse("api:team-invitations", args=[c.people.team.pk]),
         (201, 201, 403, 403, 404, 401), lambda c: {"role": "member"}),
    Case("transfer the ownership", "post", lambda c: reverse("api:team-transfer", args=[c.people.team.pk]),
         (200, 403, 403, 403, 404, 401), lambda c: {"user_id": c.admin.pk}),
    Case("leave", "post", lambda c: reverse("api:team-leave", args=[c.people.team.pk]),
         (403, 204, 204, 204, 404, 401)),
    Case("presets", "get", lambda c: reverse("api:presets"), LIST),
    Case("tokens list", "get", lambda c: reverse("api:tokens"), LIST),
    Case("specs list", "get", lambda c: reverse("api:specs"), LIST),
    Case("spec detail", "get", lambda c: reverse("api:spec", args=[c.planned.spec.pk]), READ),
    Case("create a spec", "post", lambda c: reverse("api:specs"), CREATE,
         lambda c: {"doc": load_model_preset("tiny-llama").to_dict(), "team": c.people.team.pk}),
    Case("rename a spec", "patch", lambda c: reverse("api:spec", args=[c.planned.spec.pk]), CHANGE_ANYONES,
         lambda c: {"name": "renamed"}),
    Case("measure a profile", "post", lambda c: reverse("api:spec-profiles", args=[c.planned.spec.pk]),
         (201, 201, 201, 403, 404, 401), lambda c: {"num_ranks": 2}),
    Case("measured profile", "get", lambda c: reverse("api:profile", args=[c.measured_profile.pk]), READ),
    Case("jobs list", "get", lambda c: reverse("api:jobs"), LIST),
    Case("job detail", "get", lambda c: reverse("api:job", args=[c.planned.job.pk]), READ),
    Case("create a job", "post", lambda c: reverse("api:jobs"), CREATE,
         lambda c: {"spec": c.planned.spec.pk, "cluster_preset": "cpu-host", "num_devices": 2,
                    "num_microbatches": 4, "schedule": "1f1b"}),
    Case("cancel a job", "post", lambda c: reverse("api:job-cancel", args=[c.queued_job.pk]), CHANGE_ANYONES),
    Case("rename a job", "patch", lambda c: reverse("api:job", args=[c.planned.job.pk]), CHANGE_ANYONES,
         lambda c: {"name": "renamed"}),
    Case("archive a job", "post", lambda c: reverse("api:curated-action", args=["jobs", c.planned.job.pk, "archive"]),
         CHANGE_ANYONES),
    Case("dependents of a spec", "get", lambda c: reverse("api:dependents", args=["specs", c.planned.spec.pk]), READ),
    Case("plans list", "get", lambda c: reverse("api:plans"), LIST),
    Case("plan detail", "get", lambda c: reverse("api:plan", args=[c.planned.plan.pk]), READ),
    Case("rename a plan", "patch", lambda c: reverse("api:plan", args=[c.planned.plan.pk]), CHANGE_ANYONES,
         lambda c: {"name": "the good one"}),
    Case("delete a plan", "delete", lambda c: reverse("api:plan", args=[c.planned.plan.pk]), CHANGE_ANYONES),
    Case("simulate an edited plan", "post", lambda c: reverse("api:plan-simulate", args=[c.planned.plan.pk]), READ,
         lambda c: c.planned.plan.plan_doc),
    Case("save an edited plan", "post", lambda c: reverse("api:plan-derive", args=[c.planned.plan.pk]),
         (201, 201, 201, 403, 404, 401), lambda c: {"plan": c.planned.plan.plan_doc}),
    Case("export a plan", "get", lambda c: reverse("api:plan-export", args=[c.planned.plan.pk, "torch-csv"]), READ),
    Case("runs list", "get", lambda c: reverse("api:runs"), LIST),
    Case("run detail", "get", lambda c: reverse("api:run", args=[c.finished_run.pk]), READ),
    Case("run events", "get", lambda c: reverse("api:run-events", args=[c.finished_run.pk]), READ),
    Case("start a run", "post", lambda c: reverse("api:runs"), CREATE, lambda c: {"plan": c.planned.plan.pk}),
    Case("re-plan from a run", "post", lambda c: reverse("api:run-replan", args=[c.finished_run.pk]),
         (201, 201, 201, 403, 404, 401)),
    Case("delete a run", "delete", lambda c: reverse("api:run", args=[c.finished_run.pk]), CHANGE_ANYONES),
    Case("cancel a run", "post", lambda c: reverse("api:run-cancel", args=[c.queued_run.pk]), CHANGE_ANYONES),
    Case("dependents of a run", "get", lambda c: reverse("api:dependents", args=["runs", c.finished_run.pk]), READ),
    Case("api schema (public, as before)", "get", lambda c: reverse("api-schema"), (200,) * 6),
    Case("restore a deleted run", "post",
         lambda c: reverse("api:curated-action", args=["runs", c.deleted_run.pk, "restore"]), ADMIN_ONLY),
    Case("clusters list", "get", lambda c: reverse("api:clusters"), LIST),
    Case("cluster detail", "get", lambda c: reverse("api:cluster", args=[c.cluster.pk]), READ),
    Case("save a cluster", "post", lambda c: reverse("api:clusters"), CREATE,
         lambda c: {"doc": c.cluster.doc, "team": c.people.team.pk, "name": "new pod"}),
    Case("rename a cluster", "patch", lambda c: reverse("api:cluster", args=[c.cluster.pk]), CHANGE_ANYONES,
         lambda c: {"name": "renamed"}),
    Case("archive a cluster", "post",
         lambda c: reverse("api:curated-action", args=["clusters", c.cluster.pk, "archive"]), CHANGE_ANYONES),
    Case("delete a cluster", "delete", lambda c: reverse("api:cluster", args=[c.cluster.pk]), CHANGE_ANYONES),
    Case("dependents of a cluster", "get", lambda c: reverse("api:dependents", args=["clusters", c.cluster.pk]),
         READ),
    Case("restore a deleted cluster", "post",
         lambda c: reverse("api:curated-action", args=["clusters", c.deleted_cluster.pk, "restore"]), ADMIN_ONLY),
    Case("create a hybrid job on a saved cluster", "post", lambda c: reverse("api:jobs"), CREATE,
         lambda c: {"spec": c.planned.spec.pk, "mode": "hybrid", "saved_cluster": c.cluster.pk, "gpus": 4,
                    "seq_len": 256, "global_batch": 8}),
]


@pytest.fixture
def crew(crew):
    """The crew, and a queued run of the owner's on a plan of its own (cancelling it must not touch the rest)."""
    plan = Plan.objects.get(pk=crew.planned.plan.pk)
    plan.pk = None
    plan.save()
    crew.queued_run = Run.objects.create(plan=plan, created_by=crew.people.owner, world_size=2)
    crew.measured_profile = MeasuredProfile.objects.create(spec=crew.planned.spec, created_by=crew.people.owner,
                                                           num_ranks=2, split_backward=False)
    return crew


def _state():
    """What a refused request must leave alone."""
    return (ModelSpecRecord.objects.filter(deleted_at__isnull=True, archived_at__isnull=True).count(),
            PlanningJob.objects.filter(archived_at__isnull=True, cancel_requested=False).count(),
            Run.objects.filter(deleted_at__isnull=True, cancel_requested=False).count(),
            sorted(Membership.objects.values_list("user_id", "role")),
            Invitation.objects.count(), MeasuredProfile.objects.count(),
            sorted(ModelSpecRecord.objects.values_list("name", flat=True)),
            sorted(ClusterRecord.objects.values_list("name", "archived_at", "deleted_at")),
            Plan.objects.count())


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("case", API_CASES, ids=str)
def test_api_access(crew, case, who):
    client = APIClient()
    if crew.user(who) is not None:
        client.force_authenticate(crew.user(who))
    before = _state()
    response = getattr(client, case.method)(case.url(crew), case.data(crew), format="json")
    expected = case.expected[WHO.index(who)]
    assert response.status_code == expected, (case.name, who, response.content[:300])
    if expected == 403:
        (error,) = response.json()["errors"]
        assert error["field"] == "role" and len(error["reason"]) > 20, error
    if expected >= 400:
        assert _state() == before, "a refused request changed something"


PAGE_READ = (200, 200, 200, 200, 404, 302)
PAGE_OPEN = (200, 200, 200, 200, 200, 302)  # pages of the user's own (their teams, tokens, history)
PAGE_CHANGE_ANYONES = (302, 302, 403, 403, 404, 302)

PAGE_CASES = [
    Case("dashboard", "get", lambda c: reverse("studio:dashboard"), PAGE_OPEN),
    Case("history", "get", lambda c: reverse("studio:history") + "?kind=runs&status=succeeded", PAGE_OPEN),
    Case("teams", "get", lambda c: reverse("studio:teams"), PAGE_OPEN),
    Case("team page", "get", lambda c: reverse("studio:team", args=[c.people.team.pk]), PAGE_READ),
    Case("api tokens", "get", lambda c: reverse("studio:api-tokens"), PAGE_OPEN),
    Case("upload", "get", lambda c: reverse("studio:upload"), PAGE_OPEN),
    Case("spec page", "get", lambda c: reverse("studio:spec", args=[c.planned.spec.pk]), PAGE_READ),
    Case("job page", "get", lambda c: reverse("studio:job", args=[c.planned.job.pk]), PAGE_READ),
    Case("run page", "get", lambda c: reverse("studio:run", args=[c.finished_run.pk]), PAGE_READ),
    Case("plan page", "get", lambda c: reverse("studio:plan", args=[c.planned.plan.pk]), PAGE_READ),
    Case("compare page", "get",
         lambda c: f"{reverse('studio:compare')}?plan={c.planned.plan.pk}&run={c.finished_run.pk}", PAGE_READ),
    Case("manage page", "get", lambda c: reverse("studio:curate", args=["jobs", c.planned.job.pk]), PAGE_READ),
    Case("plan a spec", "post", lambda c: reverse("studio:spec", args=[c.planned.spec.pk]),
         (302, 302, 302, 403, 404, 302),
         lambda c: {"cluster_preset": "cpu-host", "num_devices": 2, "num_microbatches": 4, "schedule": "1f1b",
                    "partition": "uniform"}),
    Case("measure a profile", "post", lambda c: reverse("studio:spec-profile", args=[c.planned.spec.pk]),
         (302, 302, 302, 403, 404, 302), lambda c: {"num_ranks": 2}),
    Case("run a plan", "post", lambda c: reverse("studio:plan-run", args=[c.planned.plan.pk]),
         (302, 302, 302, 403, 404, 302), lambda c: {"steps": 1}),
    Case("cancel a job", "post", lambda c: reverse("studio:job-cancel", args=[c.queued_job.pk]), PAGE_CHANGE_ANYONES),
    Case("re-plan from a run", "post", lambda c: reverse("studio:run-replan", args=[c.finished_run.pk]),
         (302, 302, 302, 403, 404, 302)),
    Case("cancel a run", "post", lambda c: reverse("studio:run-cancel", args=[c.queued_run.pk]), PAGE_CHANGE_ANYONES),
    Case("archive a job", "post", lambda c: reverse("studio:curate", args=["jobs", c.planned.job.pk]),
         PAGE_CHANGE_ANYONES, lambda c: {"action": "archive"}),
    Case("rename a spec", "post", lambda c: reverse("studio:curate", args=["specs", c.planned.spec.pk]),
         PAGE_CHANGE_ANYONES, lambda c: {"action": "rename", "name": "renamed"}),
    Case("add a member", "post", lambda c: reverse("studio:team", args=[c.people.team.pk]),
         (302, 302, 403, 403, 404, 302), lambda c: {"action": "add", "username": "mallory", "role": "viewer"}),
    Case("change a role", "post", lambda c: reverse("studio:team", args=[c.people.team.pk]),
         (302, 302, 403, 403, 404, 302), lambda c: {"action": "role", "user": c.extra.pk, "role": "viewer"}),
    Case("invite by link", "post", lambda c: reverse("studio:team", args=[c.people.team.pk]),
         (201, 201, 403, 403, 404, 302), lambda c: {"action": "invite", "role": "member"}),
    Case("remove a member", "post", lambda c: reverse("studio:team", args=[c.people.team.pk]),
         (302, 302, 403, 403, 404, 302), lambda c: {"action": "remove", "user": c.extra.pk}),
    Case("transfer the ownership", "post", lambda c: reverse("studio:team", args=[c.people.team.pk]),
         (302, 403, 403, 403, 404, 302), lambda c: {"action": "transfer", "user": c.admin.pk}),
    Case("switch team", "post", lambda c: reverse("studio:team-switch"), (302, 302, 302, 302, 404, 302),
         lambda c: {"team": c.people.team.pk}),
    Case("create a team", "post", lambda c: reverse("studio:teams"), (302, 302, 302, 302, 302, 302),
         lambda c: {"name": "new-team"}),
    Case("list deleted work", "get", lambda c: reverse("studio:history") + "?kind=runs&deleted=1",
         (200, 200, 403, 403, 200, 302)),  # the outsider's current team is their own, which they own
    Case("restore a deleted run", "post", lambda c: reverse("studio:curate", args=["runs", c.deleted_run.pk]),
         (302, 302, 403, 403, 404, 302), lambda c: {"action": "restore"}),
    Case("clusters page", "get", lambda c: reverse("studio:cluster-new"), PAGE_OPEN),
    Case("cluster page", "get", lambda c: reverse("studio:cluster", args=[c.cluster.pk]), PAGE_READ),
    Case("save a cluster", "post", lambda c: reverse("studio:cluster-new"),
         (302, 302, 302, 403, 400, 302),  # the outsider picks a team that is not theirs: the form refuses it
         lambda c: {"team": c.people.team.pk, "name": "copied pod", "from_preset": "h100-sxm-4x8"}),
    Case("archive a cluster", "post", lambda c: reverse("studio:curate", args=["clusters", c.cluster.pk]),
         PAGE_CHANGE_ANYONES, lambda c: {"action": "archive"}),
    Case("plan a spec, hybrid, on a saved cluster", "post", lambda c: reverse("studio:spec", args=[c.planned.spec.pk]),
         (302, 302, 302, 403, 404, 302),
         lambda c: {"mode": "hybrid", "cluster_preset": "cpu-host", "saved_cluster": c.cluster.pk, "gpus": 4,
                    "seq_len": 256, "global_batch": 8, "schedule": "adaptis", "sharding": ""}),
]


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("case", PAGE_CASES, ids=str)
def test_page_access(client, crew, case, who):
    if crew.user(who) is not None:
        client.force_login(crew.user(who))
    before = _state()
    data = case.data(crew)
    response = client.post(case.url(crew), data) if case.method == "post" else client.get(case.url(crew))
    expected = case.expected[WHO.index(who)]
    assert response.status_code == expected, (case.name, who, response.content[:300])
    if who == "anonymous":
        assert response.url.startswith(reverse("login"))
    if expected == 403:
        assert re.search(r'id="refusal">[^<]*needs the (member|admin|owner) role', response.content.decode())
    if expected >= 400 or who == "anonymous":
        assert _state() == before, "a refused request changed something"
