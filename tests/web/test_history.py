"""The team's history: filters (model, strategy, status, user, date, name) and cursor pages in the API and on the
History page; rename, archive and soft delete that take their dependents along, and an admin's restore."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import JobStatus, ModelSpecRecord, Plan, PlanningJob, Run
from planner.spec.presets import load_model_preset


def api_as(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def ids(response) -> list[int]:
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


@pytest.fixture
def history(crew):
    """Besides the crew's objects (the owner's tiny-llama 1F1B job, succeeded, and its queued twin): a failed
    ZB-V job of tiny-hybrid by bob, and a cancelled one two days old by carol."""
    hybrid = spec_create(team=crew.people.team, owner=crew.people.member, spec=load_model_preset("tiny-hybrid"))
    job_fields = {"cluster_preset": "cpu-host", "cluster_doc": crew.planned.job.cluster_doc, "num_devices": 2,
                  "num_microbatches": 4}
    failed = PlanningJob.objects.create(spec=hybrid, created_by=crew.people.member, schedule="zb-v",
                                        status=JobStatus.FAILED, name="nightly zb-v", **job_fields)
    old = PlanningJob.objects.create(spec=hybrid, created_by=crew.admin, schedule="1f1b",
                                     status=JobStatus.CANCELLED, **job_fields)
    PlanningJob.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    return {"hybrid": hybrid, "failed": failed, "old": old, "crew": crew}


class TestHistoryApi:
    def test_status_filter_returns_only_failed_jobs(self, history):
        client = api_as(history["crew"].viewer)
        assert ids(client.get(reverse("api:jobs"), {"status": "failed"})) == [history["failed"].pk]

    @pytest.mark.parametrize("query, expected", [
        ({"model": "hybrid"}, ["failed", "old"]),
        ({"strategy": "1f1b"}, ["queued", "planned", "old"]),
        ({"user": "carol"}, ["old"]),
        ({"q": "nightly"}, ["failed"]),
        ({"q": "tiny-llama"}, ["queued", "planned"]),
        ({"created_before": (timezone.now() - timedelta(days=1)).date().isoformat()}, ["old"]),
        ({"created_after": timezone.now().date().isoformat(), "strategy": "1f1b", "status": "succeeded"}, ["planned"]),
    ])
    def test_jobs_filter_by_model_strategy_user_name_and_date(self, history, query, expected):
        crew = history["crew"]
        by_name = {"failed": history["failed"].pk, "old": history["old"].pk, "queued": crew.queued_job.pk,
                   "planned": crew.planned.job.pk}
        assert ids(api_as(crew.viewer).get(reverse("api:jobs"), query)) == [by_name[name] for name in expected]

    def test_runs_and_plans_filter_by_status_and_strategy(self, history):
        crew = history["crew"]
        client = api_as(crew.people.member)
        assert ids(client.get(reverse("api:runs"), {"status": "succeeded", "strategy": "1f1b"})) == [crew.finished_run.pk]
        assert ids(client.get(reverse("api:runs"), {"status": "failed"})) == []  # the failed run is deleted
        assert ids(client.get(reverse("api:plans"), {"strategy": "1f1b", "model": "llama"})) == [crew.planned.plan.pk]
        assert ids(client.get(reverse("api:specs"), {"user": "bob"})) == [history["hybrid"].pk]

    def test_an_unknown_status_is_a_400_naming_the_filter(self, history):
        response = api_as(history["crew"].viewer).get(reverse("api:jobs"), {"status": "exploded"})
        assert response.status_code == 400
        (error,) = response.json()["errors"]
        assert error["field"] == "status" and "exploded" in error["reason"]
        bad_date = api_as(history["crew"].viewer).get(reverse("api:jobs"), {"created_after": "yesterday"})
        assert bad_date.status_code == 400 and bad_date.json()["errors"][0]["field"] == "created_after"

    def test_cursor_pages_walk_every_job_once_newest_first(self, history):
        client = api_as(history["crew"].viewer)
        page = client.get(reverse("api:jobs"), {"page_size": 2}).json()
        seen = [row["id"] for row in page["results"]]
        while page["next"]:
            assert "page_size=2" in page["next"] and "cursor=" in page["next"]
            page = client.get(page["next"]).json()
            seen += [row["id"] for row in page["results"]]
        expected = list(PlanningJob.objects.order_by("-created_at", "-id").values_list("pk", flat=True))
        assert seen == expected and len(seen) == 4

    def test_an_outsiders_history_holds_none_of_the_team(self, history):
        assert ids(api_as(history["crew"].people.outsider).get(reverse("api:jobs"))) == []


class TestCuration:
    def test_dependents_are_shown_before_archiving(self, crew):
        body = api_as(crew.viewer).get(reverse("api:dependents", args=["specs", crew.planned.spec.pk])).json()
        assert {row["id"] for row in body["jobs"]} == {crew.planned.job.pk, crew.queued_job.pk}
        assert [row["id"] for row in body["plans"]] == [crew.planned.plan.pk]
        assert [row["id"] for row in body["runs"]] == [crew.finished_run.pk]  # not the deleted one
        assert body["runs"][0]["created_by"] == "alice"

    def test_rename_then_search_by_the_new_name(self, crew):
        client = api_as(crew.people.owner)
        response = client.patch(reverse("api:run", args=[crew.finished_run.pk]), {"name": "baseline 1f1b"}, format="json")
        assert response.status_code == 200 and response.json()["name"] == "baseline 1f1b"
        assert ids(client.get(reverse("api:runs"), {"q": "baseline"})) == [crew.finished_run.pk]

    def test_a_spec_cannot_be_renamed_to_nothing(self, crew):
        response = api_as(crew.people.owner).patch(reverse("api:spec", args=[crew.planned.spec.pk]), {"name": " "},
                                                   format="json")
        assert response.json() == {"errors": [{"field": "name", "reason": "is required for a spec"}]}
        assert ModelSpecRecord.objects.get().name == "tiny-llama"

    def test_archiving_a_job_hides_it_and_its_plans_and_runs_until_unarchived(self, crew):
        client, job = api_as(crew.admin), crew.planned.job
        assert client.post(reverse("api:curated-action", args=["jobs", job.pk, "archive"])).status_code == 200
        assert job.pk not in ids(client.get(reverse("api:jobs")))
        assert ids(client.get(reverse("api:jobs"), {"archived": "true"})) == [job.pk]
        assert ids(client.get(reverse("api:runs"))) == [] and ids(client.get(reverse("api:plans"))) == []
        assert client.get(reverse("api:job", args=[job.pk])).status_code == 200, "an archived job is still readable"
        assert client.post(reverse("api:curated-action", args=["jobs", job.pk, "unarchive"])).status_code == 200
        assert ids(client.get(reverse("api:runs"))) == [crew.finished_run.pk]

    def test_deleting_takes_the_dependents_along_and_an_admin_restores_exactly_those(self, crew):
        owner = api_as(crew.people.owner)
        PlanningJob.objects.filter(pk=crew.queued_job.pk).update(status=JobStatus.CANCELLED)
        response = owner.delete(reverse("api:spec", args=[crew.planned.spec.pk]))
        assert response.status_code == 200 and response.json()["deleted_at"]
        assert owner.get(reverse("api:spec", args=[crew.planned.spec.pk])).status_code == 404
        assert ids(owner.get(reverse("api:jobs"))) == [] and ids(owner.get(reverse("api:runs"))) == []
        assert api_as(crew.people.member).post(
            reverse("api:curated-action", args=["specs", crew.planned.spec.pk, "restore"])).status_code == 403
        assert api_as(crew.admin).post(
            reverse("api:curated-action", args=["specs", crew.planned.spec.pk, "restore"])).status_code == 200
        assert ids(owner.get(reverse("api:runs"))) == [crew.finished_run.pk]
        assert Run.objects.get(pk=crew.deleted_run.pk).deleted_at is not None, "deleted before: stays deleted"
        assert not Plan.objects.filter(deleted_at__isnull=False).exists()

    def test_work_still_going_cannot_be_deleted(self, crew):
        response = api_as(crew.people.owner).delete(reverse("api:spec", args=[crew.planned.spec.pk]))
        assert response.status_code == 409 and response.json()["errors"][0]["field"] == "status"
        assert not ModelSpecRecord.objects.filter(deleted_at__isnull=False).exists()

    def test_a_member_changes_their_own_work_but_not_what_others_built_on_it(self, crew):
        member = api_as(crew.people.member)
        spec = spec_create(team=crew.people.team, owner=crew.people.member, spec=load_model_preset("tiny-hybrid"))
        assert member.post(reverse("api:curated-action", args=["specs", spec.pk, "archive"])).status_code == 200
        member.post(reverse("api:curated-action", args=["specs", spec.pk, "unarchive"]))
        PlanningJob.objects.create(spec=spec, created_by=crew.admin, cluster_preset="cpu-host",
                                   cluster_doc=crew.planned.job.cluster_doc, num_devices=2, num_microbatches=4,
                                   schedule="1f1b", status=JobStatus.SUCCEEDED)
        refused = member.post(reverse("api:curated-action", args=["specs", spec.pk, "archive"]))
        assert refused.status_code == 403 and "another user created" in refused.json()["errors"][0]["reason"]
        assert ModelSpecRecord.objects.get(pk=spec.pk).archived_at is None

    def test_a_member_cancels_their_own_job(self, crew):
        job = PlanningJob.objects.create(spec=crew.planned.spec, created_by=crew.people.member, cluster_preset="cpu-host",
                                         cluster_doc=crew.planned.job.cluster_doc, num_devices=2, num_microbatches=4,
                                         schedule="1f1b")
        response = api_as(crew.people.member).post(reverse("api:job-cancel", args=[job.pk]))
        assert response.status_code == 200 and response.json()["status"] == "cancelled"


class TestHistoryPage:
    def test_filters_stay_in_the_url_and_select_the_rows(self, client, history):
        client.force_login(history["crew"].viewer)
        page = client.get(reverse("studio:history"), {"kind": "jobs", "status": "failed"}).content.decode()
        assert re.findall(r'data-row="(\d+)"', page) == [str(history["failed"].pk)]
        assert 'value="failed" selected' in page
        page = client.get(reverse("studio:history"), {"kind": "runs", "q": "tiny"}).content.decode()
        assert re.findall(r'data-row="(\d+)"', page) == [str(history["crew"].finished_run.pk)]

    def test_the_next_page_link_keeps_the_filters(self, client, history):
        client.force_login(history["crew"].viewer)
        page = client.get(reverse("studio:history"), {"kind": "jobs", "strategy": "1f1b", "page_size": 1}).content.decode()
        next_link = re.search(r'href="([^"]+)" id="next-page"', page).group(1).replace("&amp;", "&")
        assert "strategy=1f1b" in next_link and "kind=jobs" in next_link and "cursor=" in next_link
        second = client.get(next_link).content.decode()
        assert re.findall(r'data-row="(\d+)"', second) == [str(history["crew"].planned.job.pk)]

    def test_a_bad_filter_shows_its_error(self, client, history):
        client.force_login(history["crew"].viewer)
        response = client.get(reverse("studio:history"), {"kind": "jobs", "status": "exploded"})
        assert response.status_code == 400 and "Select a valid choice" in response.content.decode()

    def test_the_manage_page_lists_dependents_before_deleting(self, client, crew):
        client.force_login(crew.people.owner)
        page = client.get(reverse("studio:curate", args=["plans", crew.planned.plan.pk])).content.decode()
        assert f"<strong>1 runs</strong>:\n      #{crew.finished_run.pk}" in page and 'id="delete"' in page
        response = client.post(reverse("studio:curate", args=["plans", crew.planned.plan.pk]), {"action": "delete"})
        assert response.status_code == 302 and Plan.objects.get().deleted_at is not None
        assert Run.objects.get(pk=crew.finished_run.pk).deleted_at is not None

    def test_only_an_admin_lists_deleted_work_and_restores_it_from_the_page(self, client, crew):
        client.force_login(crew.people.member)
        assert client.get(reverse("studio:history"), {"kind": "runs", "deleted": "1"}).status_code == 403
        client.force_login(crew.admin)
        page = client.get(reverse("studio:history"), {"kind": "runs", "deleted": "1"}).content.decode()
        assert re.findall(r'data-row="(\d+)"', page) == [str(crew.deleted_run.pk)]
        response = client.post(reverse("studio:curate", args=["runs", crew.deleted_run.pk]), {"action": "restore"})
        assert response.status_code == 302 and Run.objects.get(pk=crew.deleted_run.pk).deleted_at is None


def test_the_api_schema_documents_the_filters_the_cursor_and_the_token_header(client):
    schema = client.get(reverse("api-schema"), {"format": "json"}).json()
    parameters = {parameter["name"] for parameter in schema["paths"]["/api/jobs/"]["get"]["parameters"]}
    assert {"status", "strategy", "model", "user", "q", "created_after", "created_before", "archived", "team",
            "cursor", "page_size"} <= parameters
    token = schema["components"]["securitySchemes"]["knoxApiToken"]
    assert (token["in"], token["name"]) == ("header", "Authorization") and '"Token"' in token["description"]


@pytest.fixture
def results(people, planned):
    """Five plans of one job with known results (iteration, bubble, tokens/s), made in an order none of them sorts
    by; two runs of the first, one measured (summary) and one not yet."""
    rows = [(30.0, 0.20, 900.0), (10.0, 0.50, 2700.0), (20.0, 0.10, 1300.0), (20.0, 0.30, 1400.0), (40.0, 0.05, 600.0)]
    plans = [Plan.objects.create(job=planned.job, strategy="1f1b", layout="x", plan_doc={}, profile_doc={},
                                 simulation={"tokens_per_s": tokens}, iteration_ms=iteration, bubble_ratio=bubble,
                                 name=f"result {index}")
             for index, (iteration, bubble, tokens) in enumerate(rows)]
    measured = Run.objects.create(plan=plans[0], created_by=people.member, world_size=2, status=JobStatus.SUCCEEDED,
                                  summary={"median_iteration_ms": 33.5})
    waiting = Run.objects.create(plan=plans[0], created_by=people.member, world_size=2)
    return {"plans": plans, "measured": measured, "waiting": waiting}


def _every_page(client, url: str, query: dict) -> list[dict]:
    """Every row of a list, one per page, following the cursor links."""
    rows, page = [], client.get(url, {**query, "page_size": 1}).json()
    while True:
        rows.extend(page["results"])
        if not page["next"]:
            return rows
        page = client.get(page["next"]).json()


class TestSortingByResults:
    @pytest.mark.parametrize("sort, key", [("iteration", lambda p: p.iteration_ms),
                                           ("-bubble", lambda p: -p.bubble_ratio),
                                           ("-tokens_per_s", lambda p: -p.simulation["tokens_per_s"])])
    def test_plans_sort_by_a_result_across_cursor_pages(self, people, results, sort, key):
        mine = [plan.pk for plan in results["plans"]]
        rows = _every_page(api_as(people.member), reverse("api:plans"), {"sort": sort, "q": "result"})
        expected = sorted(results["plans"], key=lambda plan: (key(plan), plan.pk if not sort.startswith("-")
                                                              else -plan.pk))
        assert [row["id"] for row in rows] == [plan.pk for plan in expected]
        assert sorted(row["id"] for row in rows) == sorted(mine), "no row skipped or repeated by the cursor"

    def test_runs_sort_by_observed_iteration_with_unmeasured_ones_last(self, people, results):
        rows = _every_page(api_as(people.member), reverse("api:runs"), {"sort": "observed_iteration"})
        assert [row["id"] for row in rows] == [results["measured"].pk, results["waiting"].pk]

    def test_an_unknown_sort_is_a_400_naming_it(self, people, results):
        response = api_as(people.member).get(reverse("api:plans"), {"sort": "fastest"})
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == "sort"

    def test_the_history_page_shows_results_and_sorts_by_them(self, client, people, planned, results):
        client.force_login(people.member)
        page = client.get(reverse("studio:history"), {"kind": "plans", "sort": "-tokens_per_s", "q": "result"}).content.decode()
        shown = [int(pk) for pk in re.findall(r'<tr data-row="(\d+)">', page)]
        best = max(results["plans"], key=lambda plan: plan.simulation["tokens_per_s"])
        assert shown[0] == best.pk and "2,700" in page.split(f'<tr data-row="{best.pk}">')[1].split("</tr>")[0]
        assert 'data-sort="tokens_per_s">Tokens / s ↓</a>' in page
        jobs = client.get(reverse("studio:history"), {"kind": "jobs", "sort": "iteration"}).content.decode()
        row = jobs.split(f'<tr data-row="{planned.job.pk}">')[1].split("</tr>")[0]
        assert f"{planned.job.own_plan.iteration_ms:.2f} ms" in row, "a job shows its own plan's result"


def test_the_dashboard_sorts_its_jobs_by_their_own_plans_results(client, people, planned):
    """Three jobs of the team whose own plans took 30, 10 and 20 ms (bubbles 10, 50, 30 %), made in that order: the
    dashboard lists them newest first, and by iteration or bubble when a header asks, with an arrow on it."""
    jobs = [planned.job]
    for _ in range(2):
        job = PlanningJob.objects.get(pk=planned.job.pk)
        job.pk = None
        job.save()
        jobs.append(job)
    for job, (iteration, bubble) in zip(jobs, [(30.0, 0.1), (10.0, 0.5), (20.0, 0.3)]):
        Plan.objects.filter(job=job).delete()
        Plan.objects.create(job=job, strategy=job.schedule, layout="x", plan_doc={}, profile_doc={}, simulation={},
                            iteration_ms=iteration, bubble_ratio=bubble)
    client.force_login(people.member)

    def order(**query) -> tuple[list[int], str]:
        page = client.get(reverse("studio:dashboard"), query).content.decode()
        table = page.split("<h2>Planning jobs</h2>")[1].split("</table>")[0]
        return [int(pk) for pk in re.findall(r'<td><a href="/jobs/(\d+)/">', table)], table

    newest, _ = order()
    assert newest == [jobs[2].pk, jobs[1].pk, jobs[0].pk]
    fastest, table = order(sort="iteration")
    assert fastest == [jobs[1].pk, jobs[2].pk, jobs[0].pk]
    assert 'data-sort="iteration">Iteration ↑</a>' in table and "sort=-iteration" in table, "a second click reverses"
    assert order(sort="-iteration")[0] == [jobs[0].pk, jobs[2].pk, jobs[1].pk]
    assert order(sort="-bubble")[0] == [jobs[1].pk, jobs[2].pk, jobs[0].pk]
    assert order(sort="fastest")[0] == newest, "an unknown sort keeps the dashboard's own order"
