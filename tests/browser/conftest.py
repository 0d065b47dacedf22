"""What every browser test shares: Debian's Chromium, launched by Playwright as this machine allows it, and the
folder the screenshots go to (for a person to look at)."""

from pathlib import Path

import pytest
from django.db import connections
from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
# As root, with no network but the package registries: no sandbox, no GPU, no background connections.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SCREENS = Path("/tmp/team/screens")
VIEWPORT = {"width": 1360, "height": 900}


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
