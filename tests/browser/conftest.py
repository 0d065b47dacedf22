"""What every browser test shares: the product's web server, Debian's Chromium, launched by Playwright as this
machine allows it, and the folder the screenshots go to (for a person to look at)."""

from pathlib import Path

import pytest
from django.db import connections
from django.test.utils import override_settings
from playwright.sync_api import expect, sync_playwright

from tests.conftest import TEST_QUEUE, start_web_server, stop_worker

CHROMIUM = "/usr/bin/chromium"
# As root, with no network but the package registries: no sandbox, no GPU, no background connections.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SCREENS = Path("/tmp/team/screens")
VIEWPORT = {"width": 1360, "height": 900}
# How long an ``expect`` waits for the page to reach the state it names (Playwright's default: 5 s). These tests
# assert states, not durations, on a 2-core host whose other pytest worker keeps both cores busy: a job page that
# polls every 0.5 s and reloads once its job has finished once took longer than 5 s to show "cancelled" (2026-11-28).
expect.set_options(timeout=30_000)


@pytest.fixture
def page(browser):
    """A page of the test's browser at the tests' viewport."""
    return browser.new_page(viewport=VIEWPORT)


def log_in(page, live_server, username: str = "bob"):
    """Sign ``page`` in as one of the test people (``tests.conftest.people``: password ``<name>-pass-2026``) and wait
    for the dashboard; returns the page."""
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", f"{username}-pass-2026")
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Dashboard")
    return page


def logged_in(browser, live_server, username: str = "bob"):
    """A page of its own (a browser context: its own cookies) signed in as ``username``."""
    return log_in(browser.new_context(viewport=VIEWPORT).new_page(), live_server, username)


class ProductServer:
    """What pytest-django's ``live_server`` offers the tests (``url``), served by the product's own web process."""

    def __init__(self, url: str):
        self.url = url
        self._live_server_modified_settings = override_settings()  # pytest-django's helper enables it: nothing


@pytest.fixture(scope="session")
def live_server(django_db_setup, tmp_path_factory):
    """The pages as users get them: gunicorn started as ``make run`` starts it (adaptis_web/processes.py), not
    Django's test server, against the test database and this session's queue. The name stays pytest-django's, so
    each test that uses it gets a transactional database whose rows the server sees."""
    server = start_web_server(tmp_path_factory.mktemp("web") / "web.log", queue=TEST_QUEUE)
    yield ProductServer(server.url)
    stop_worker(server.process)


@pytest.fixture
def browser(monkeypatch):
    """A Chromium of the test's own, closed after it."""
    # Playwright's sync API keeps an event loop on this thread; the test's own ORM calls are still synchronous
    # code, which Django would otherwise refuse next to a running loop.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SCREENS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
        connections.close_all()  # the ORM calls beside Playwright opened them; PostgreSQL must drop its test DB
