"""Browser tests: Playwright (Python) driving Debian's chromium against a live test server.

Never a downloaded browser build: the executable is the system's /usr/bin/chromium (apt package
`chromium`; `.ci/run` installs it when missing). Without it these tests are skipped, and the run
says so at the end with the command that runs them. Screenshots of the main pages are kept in
test-artifacts/screenshots/ (TEST_ARTIFACTS_DIR overrides the folder).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from memoryhub.accounts.models import Membership, MembershipRole, Tenant, User
from tests.e2e.helpers import PASSWORD, SKIP_REASON

# Playwright's sync API runs an event loop in the test's thread; the ORM calls the tests make
# around it are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if CHROMIUM:
        return
    if os.environ.get("MEMORYHUB_REQUIRE_BROWSER"):
        raise pytest.UsageError("MEMORYHUB_REQUIRE_BROWSER is set but chromium is not installed.")
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Per module, not per session: Playwright's sync API keeps an event loop running in this
    # thread while it is open, and later tests that call asyncio.run (the MCP and SDK tests)
    # would find it there.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def owner(transactional_db: None) -> User:
    """The demo's shape: a staff user who owns a tenant."""
    tenant = Tenant.objects.create(slug="demo", name="Demo tenant")
    user = User.objects.create_user(username="owner", password=PASSWORD, is_staff=True)
    Membership.objects.create(user=user, tenant=tenant, role=MembershipRole.OWNER)
    return user


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
