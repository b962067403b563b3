"""A newcomer logs in and sees the dashboard with its chart (drawn by the vendored Chart.js)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from sessions_app.services import MessageInput, message_append_batch, session_create_or_get
from tests.e2e.helpers import log_in, screenshot

pytestmark = pytest.mark.slow


def test_log_in_and_see_the_dashboard_chart(page, owner):
    tenant = owner.memberships.get().tenant
    session, _ = session_create_or_get(tenant=tenant, user_id="telegram:1", agent_id="chat")
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[MessageInput(role="user", content="hello"), MessageInput(role="assistant")],
    )

    page.goto("/")
    expect(page).to_have_url("/login/?next=/")  # not logged in yet
    log_in(page)

    expect(page.get_by_role("heading", level=1)).to_have_text("Demo tenant")
    expect(page.locator(".counts")).to_contain_text("Messages")
    expect(page.locator("#activity-chart")).to_have_attribute("data-ready", "true")
    screenshot(page, "dashboard")


def test_a_wrong_password_stays_on_the_login_page(page, owner):
    log_in_page = page.goto("/login/")
    assert log_in_page is not None
    assert log_in_page.ok
    page.get_by_label("Username").fill("owner")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Log in").click()

    expect(page.get_by_role("alert")).to_contain_text("correct username and password")
    screenshot(page, "login")


def test_the_dashboard_reads_well_at_phone_width(page, owner):
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page)

    expect(page.get_by_role("navigation", name="Main")).to_be_visible()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow}px wider than a phone"
    screenshot(page, "dashboard-phone")
