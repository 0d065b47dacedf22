"""A team in two browsers at once: the owner and a member each plan a model through the page (the real Celery
worker plans them), both find each other's work in the team's History and filter it, with the filters in the
address; a viewer of the same team sees the plan but no Run button, and is refused (403 with the reason) when
they post to the run endpoints anyway.

Debian's Chromium driven by Playwright against pytest-django's live server. Screenshots in /tmp/team/screens/.
"""

import json
import re

import pytest
from playwright.sync_api import expect


from adaptis_web.studio.accounts.teams import membership_add, team_create
from adaptis_web.studio.models import Membership, Plan, Run
from tests.browser.conftest import SCREENS, logged_in

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


POST_AS_PAGE = """async ([url, body, json]) => {
  const csrf = document.cookie.split("; ").find((c) => c.startsWith("csrftoken=")).split("=")[1];
  const response = await fetch(url, {method: "POST", headers: json
      ? {"Content-Type": "application/json", "X-CSRFToken": csrf}
      : {"Content-Type": "application/x-www-form-urlencoded", "X-CSRFToken": csrf}, body});
  return {status: response.status, text: await response.text()};
}"""





@pytest.fixture
def team(django_user_model):
    users = {name: django_user_model.objects.create_user(name, password=f"{name}-pass-2026")
             for name in ("alice", "bob", "victor")}
    team = team_create(name="pipeline-team", owner=users["alice"])
    membership_add(team=team, user=users["bob"], role=Membership.Role.MEMBER)
    membership_add(team=team, user=users["victor"], role=Membership.Role.VIEWER)
    return team


def plan_through_the_page(page, live_server, spec_file, schedule) -> int:
    page.goto(f"{live_server.url}/upload/")
    page.set_input_files("#id_file", str(spec_file))
    # A GPU cluster: planned on the analytic profile at once (a CPU cluster's job waits for a profile measured on
    # the runs worker, the subject of tests/browser/test_studio_flow.py, not of this one).
    page.select_option("#id_cluster_preset", "h100-sxm-1x8")
    page.fill("#id_num_devices", "2")
    page.fill("#id_num_microbatches", "4")
    page.select_option("#id_schedule", schedule)
    page.click("#upload-form button[type=submit]")
    expect(page.locator("[data-job-status]")).to_have_text("succeeded", timeout=90_000)
    return int(re.search(r"/jobs/(\d+)/", page.url).group(1))


def history_rows(page) -> list[int]:
    return [int(row) for row in page.locator("#history tbody tr").evaluate_all(
        "(rows) => rows.map((row) => row.dataset.row)")]


def test_two_members_share_and_filter_the_history_and_a_viewer_cannot_run(celery_worker, live_server, team, spec_text,
                                                                          tmp_path, browser):
    llama, hybrid = tmp_path / "tiny-llama.json", tmp_path / "tiny-hybrid.json"
    llama.write_text(spec_text("tiny-llama"))
    hybrid.write_text(spec_text("tiny-hybrid"))
    alice = logged_in(browser, live_server, "alice")
    bob = logged_in(browser, live_server, "bob")

    alice_job = plan_through_the_page(alice, live_server, llama, "1f1b")
    bob_job = plan_through_the_page(bob, live_server, hybrid, "zb-v")

    # Bob's History holds both jobs, newest first; filtering by who made them keeps the filter in the address.
    bob.click("text=History")
    bob.click("#history-kinds >> text=jobs")
    expect(bob).to_have_url(re.compile(r"kind=jobs"))   # the jobs' page, not the one it left (under load, it lags)
    expect(bob.locator("#history tbody tr")).to_have_count(2)
    assert history_rows(bob) == [bob_job, alice_job]
    bob.fill("#id_user", "alice")
    bob.click("#apply-filters")
    expect(bob).to_have_url(re.compile(r"kind=jobs.*user=alice"))
    expect(bob.locator("#history tbody tr")).to_have_count(1)
    assert history_rows(bob) == [alice_job]
    bob.screenshot(path=str(SCREENS / "20-history-bob-filtered.png"), full_page=True)

    # Alice opens a shared address with another filter and finds Bob's job by its strategy.
    alice.goto(f"{live_server.url}/history/?kind=jobs&strategy=zb-v&status=succeeded")
    assert history_rows(alice) == [bob_job]
    expect(alice.locator("#id_status")).to_have_value("succeeded")
    alice.screenshot(path=str(SCREENS / "21-history-alice-filtered.png"), full_page=True)

    # Victor, a viewer, sees Alice's plan but is offered no Run button, and is refused if he posts anyway.
    victor = logged_in(browser, live_server, "victor")
    victor.goto(f"{live_server.url}/jobs/{alice_job}/")
    expect(victor.locator("#plan")).to_be_visible()
    expect(victor.locator("#run-on-cpu")).to_have_count(0)
    expect(victor.locator("#run-not-allowed")).to_contain_text("starting a run needs the member role")
    victor.screenshot(path=str(SCREENS / "22-viewer-no-run.png"), full_page=True)
    plan_id = Plan.objects.get(job_id=alice_job).pk
    api = victor.evaluate(POST_AS_PAGE, ["/api/runs/", json.dumps({"plan": plan_id}), True])
    assert api["status"] == 403
    assert json.loads(api["text"]) == {"errors": [{"field": "role", "reason": (
        "starting a run needs the member role or above in team 'pipeline-team'; you are a viewer")}]}
    form = victor.evaluate(POST_AS_PAGE, [f"/plans/{plan_id}/run/", "steps=1", False])
    assert form["status"] == 403 and "starting a run needs the member role" in form["text"]
    assert not Run.objects.exists()

    # A member may: Bob runs Alice's plan from the same page (the run itself is the other browser test's subject).
    bob.goto(f"{live_server.url}/jobs/{alice_job}/")
    expect(bob.locator("#run-on-cpu")).to_be_visible()


def test_an_invitation_link_brings_a_new_user_into_the_team_and_they_switch_to_it(live_server, team, browser,
                                                                                  django_user_model):
    dana = django_user_model.objects.create_user("dana", password="dana-pass-2026")
    team_create(name="dana-lab", owner=dana)
    alice = logged_in(browser, live_server, "alice")
    alice.click("text=Teams")
    alice.click("#team-list >> text=pipeline-team")
    alice.select_option("#invite-role", "viewer")
    alice.click("#invite button[type=submit]")
    link = alice.locator("[data-invitation-url]").inner_text()
    alice.screenshot(path=str(SCREENS / "23-team-invitation.png"), full_page=True)

    guest = logged_in(browser, live_server, "dana")
    expect(guest.locator(".subtitle").first).to_contain_text("Team dana-lab (owner)")
    guest.goto(link)
    guest.click("#accept-invitation")
    expect(guest.locator("[data-my-role]")).to_have_text("viewer")
    expect(guest.locator("#members")).to_contain_text("alice")
    guest.goto(f"{live_server.url}/")
    expect(guest.locator(".subtitle").first).to_contain_text("Team pipeline-team (viewer)")  # joining switched
    guest.select_option("#team-switch select", label="dana-lab")
    expect(guest.locator(".subtitle").first).to_contain_text("Team dana-lab (owner)")

    alice.goto(link)  # single use: the link is spent
    expect(alice.locator("#invitation-error")).to_have_text("this invitation has already been used")


def test_a_preset_planned_at_its_own_shape_then_the_dashboard_sorted_by_a_result(celery_worker, live_server, team,
                                                                                  browser):
    """A new user's walk: New plan, a preset picked (no upload), sequence length and micro-batch size typed on the
    pipeline form; the job plans that shape (its spec is named for it), then the dashboard sorts by iteration."""
    alice = logged_in(browser, live_server, "alice")
    jobs = []
    for seq_len in ("4096", "64"):
        alice.goto(f"{live_server.url}/upload/")
        alice.select_option("#id_preset", "tiny-llama")
        alice.select_option("#id_cluster_preset", "h100-sxm-1x8")
        alice.fill("#id_num_devices", "2")
        alice.fill("#id_num_microbatches", "4")
        alice.fill("#id_pipeline_seq_len", seq_len)
        alice.fill("#id_pipeline_micro_batch_size", "8")
        alice.select_option("#id_schedule", "1f1b")
        alice.click("#upload-form button[type=submit]")
        expect(alice.locator("[data-job-status]")).to_have_text("succeeded", timeout=90_000)
        jobs.append(int(re.search(r"/jobs/(\d+)/", alice.url).group(1)))
    expect(alice.locator(f"a[href*='/specs/']").first).to_contain_text("tiny-llama · seq 64 · mbs 8")
    alice.screenshot(path=str(SCREENS / "23-job-at-its-own-shape.png"), full_page=True)

    alice.goto(f"{live_server.url}/")
    alice.click("[data-sort=iteration]")
    expect(alice).to_have_url(re.compile(r"sort=iteration"))
    expect(alice.locator("[data-sort=iteration]")).to_have_text("Iteration ↑")
    links = alice.locator("table:has([data-sort]) tbody tr td:first-child a")
    shown = [int(href.rstrip("/").rsplit("/", 1)[1])
             for href in links.evaluate_all("(links) => links.map((a) => a.getAttribute('href'))")]
    iteration = {job: Plan.objects.filter(job_id=job).order_by("id").first().iteration_ms for job in jobs}
    assert iteration[jobs[1]] < iteration[jobs[0]], "64-token sequences take less time a step than 4,096-token ones"
    assert shown == sorted(jobs, key=iteration.get)
    alice.click("[data-sort=iteration]")
    expect(alice.locator("[data-sort=iteration]")).to_have_text("Iteration ↓")
    alice.screenshot(path=str(SCREENS / "24-dashboard-sorted.png"), full_page=True)
