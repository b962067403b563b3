"""Issue 14 item 16 in a real browser: with the Content-Security-Policy on, the pages still work
(htmx partial loads, the dashboard's chart, the session page's and the tenant switcher's
scripts, the admin, the API docs) and the browser reports no violation on any of them."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from memoryhub.accounts.models import Membership, MembershipRole, Tenant
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get
from tests.e2e.helpers import log_in

pytestmark = pytest.mark.slow


@pytest.fixture
def violations(page: Any) -> list[str]:
    """What the browser's console says the policy blocked (Chromium logs every refusal)."""
    seen: list[str] = []
    page.on(
        "console",
        lambda message: (
            seen.append(f"{page.url}: {message.text}")
            if "Content Security Policy" in message.text
            else None
        ),
    )
    return seen


@pytest.fixture
def long_session(owner):
    tenant = owner.memberships.get().tenant
    session, _ = session_create_or_get(tenant=tenant, user_id="telegram:42", agent_id="gardener")
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[MessageInput(role="user", content=f"turn {n} about tomatoes") for n in range(60)],
    )
    return session


def test_the_main_pages_keep_to_the_policy(page, owner, long_session, violations):
    log_in(page)

    # The dashboard's chart (vendored Chart.js and our script, both files).
    expect(page.locator("#activity-chart")).to_have_attribute("data-ready", "true")

    # An htmx partial load: filtering sessions swaps the list without a reload.
    page.goto("/sessions/")
    page.locator("#session-filters input[name=q]").fill("tomatoes")
    page.locator("#session-filters-submit").click()
    expect(page.locator("[data-testid=session-row]")).to_have_count(1)
    page.locator("[data-testid=session-link]").first.click()

    # The session page's script starts the transcript at its newest message.
    box = page.locator("#transcript-scroll")
    expect(box).to_be_visible()
    # A function, not an expression: Playwright (1.65) polls an expression through eval() in
    # the page, which this page's policy rightly refuses.
    page.wait_for_function(
        "() => { const box = document.getElementById('transcript-scroll');"
        " return box.scrollTop > 0 || box.scrollHeight <= box.clientHeight; }"
    )
    assert box.evaluate("el => el.scrollHeight > el.clientHeight"), "too few messages to scroll"
    # The context preview arrives by htmx when scrolled into view.
    page.locator("#context-preview").scroll_into_view_if_needed()
    expect(page.locator("#context-preview #context-markdown")).to_contain_text("tomatoes")

    for path in (
        "/people/",
        "/people/telegram:42/",
        "/search/?q=tomatoes",
        "/tenant/audit/",
        "/tenant/policy/",
        "/tenant/keys/",
        "/import/",
    ):
        response = page.goto(path)
        assert response is not None
        assert response.ok, f"{path}: {response.status}"
        page.wait_for_load_state("networkidle")

    assert violations == []


def test_the_tenant_switcher_submits_on_change(page, owner, violations):
    second = Tenant.objects.create(slug="second", name="Second tenant")
    Membership.objects.create(user=owner, tenant=second, role=MembershipRole.OWNER)
    log_in(page)

    page.locator("#tenant-select").select_option("second")

    expect(page.get_by_role("heading", level=1)).to_have_text("Second tenant")
    assert violations == []


def test_the_admin_and_the_api_docs_keep_to_the_policy(page, owner, violations):
    owner.is_superuser = True
    owner.save(update_fields=["is_superuser"])
    log_in(page)

    for path in ("/admin/", "/admin/accounts/apikey/", "/admin/accounts/apikey/add/"):
        response = page.goto(path)
        assert response is not None
        assert response.ok, f"{path}: {response.status}"
        page.wait_for_load_state("networkidle")

    page.goto("/api/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("MemoryHub API")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible()

    assert violations == []
