"""Issue 8's "done when", in a real browser: a newcomer logs in, finds a conversation by a word
in it, reads it, previews its context, and erases its person after a confirmation that said
what would go. One screenshot per main page is kept as a test artifact."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from facts_app.services.facts import fact_create
from facts_app.services.memories import memory_save
from memoryhub.accounts.models import AuditEvent, EndUser
from sessions_app.models import Session
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get
from tests.e2e.helpers import log_in, screenshot

pytestmark = pytest.mark.slow

WORD = "aubergines"


@pytest.fixture
def conversations(owner):
    tenant = owner.memberships.get().tenant
    found, _ = session_create_or_get(tenant=tenant, user_id="telegram:42", agent_id="gardener")
    message_append_batch(
        tenant=tenant,
        session_id=found.pk,
        messages=[
            MessageInput(role="user", content=f"How deep should I plant {WORD}?"),
            MessageInput(
                role="assistant",
                content="",
                tool_calls=[{"id": "c1", "type": "function", "function": {"name": "lookup"}}],
            ),
            MessageInput(role="tool", content='{"depth_cm": 1}', tool_call_id="c1", name="lookup"),
            MessageInput(
                role="assistant", content="About one centimetre. <script>alert(1)</script>"
            ),
        ],
    )
    other, _ = session_create_or_get(tenant=tenant, user_id="telegram:7", agent_id="chat")
    message_append_batch(
        tenant=tenant,
        session_id=other.pk,
        messages=[MessageInput(role="user", content="What is the weather like?")],
    )
    end_user = found.end_user
    memory_save(tenant=tenant, end_user=end_user, key="name", content="Ana", pinned=True)
    fact_create(tenant=tenant, end_user=end_user, content=f"Ana grows {WORD}")
    return found


def test_find_read_preview_and_erase(page, owner, conversations):
    log_in(page)

    # Find the conversation by a word in it.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Sessions").click()
    screenshot(page, "sessions")
    page.locator("#session-filters input[name=q]").fill(WORD)
    page.locator("#session-filters-submit").click()
    rows = page.locator("[data-testid=session-row]")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("[data-testid=session-snippet]")).to_contain_text(WORD)

    # Read it: roles, the tool call and its result, the script shown as text.
    rows.first.locator("[data-testid=session-link]").click()
    transcript = page.locator("#transcript")
    expect(transcript.locator("[data-testid=message]")).to_have_count(4)
    expect(transcript.locator("[data-testid=tool-calls]")).to_contain_text("lookup")
    expect(transcript).to_contain_text("<script>alert(1)</script>")
    screenshot(page, "session")

    # Preview the context the bot would get.
    preview = page.locator("#context-preview")
    preview.scroll_into_view_if_needed()
    expect(preview.locator("#context-markdown")).to_contain_text("<memory>")
    expect(preview.locator("#context-markdown")).to_contain_text(f"Ana grows {WORD}")
    expect(preview.locator("#context-sections")).to_be_visible()

    # Erase the person after a confirmation that says what goes.
    page.goto("/people/telegram:42/")
    expect(page.locator("#memories-section")).to_contain_text("Ana")
    screenshot(page, "person")
    page.locator("#erase-link").click()
    counts = page.locator("[data-testid=erase-counts]")
    expect(counts).to_contain_text("Messages")
    expect(counts.locator("[data-kind=messages]")).to_contain_text("4")
    screenshot(page, "erase-confirmation")
    page.locator("#erase-confirm").click()
    expect(page.locator(".messages")).to_contain_text(re.compile("4 messages"))
    assert not EndUser.objects.filter(external_id="telegram:42").exists()
    assert Session.objects.count() == 1
    assert AuditEvent.objects.filter(action="erase", object_id="telegram:42").exists()


def test_the_other_main_pages(page, owner, conversations):
    log_in(page)
    for path, name in (
        ("/people/", "people"),
        ("/search/?q=" + WORD, "search"),
        ("/tenant/audit/", "audit"),
        ("/tenant/policy/", "policy"),
        ("/tenant/keys/", "keys"),
        ("/import/", "import"),
    ):
        response = page.goto(path)
        assert response is not None
        assert response.ok, f"{path}: {response.status}"
        expect(page.get_by_role("heading", level=1)).to_be_visible()
        screenshot(page, name)


def test_keyboard_reaches_the_navigation_and_the_search(page, owner, conversations):
    log_in(page)
    page.goto("/sessions/")
    page.keyboard.press("Tab")  # the skip link comes first
    expect(page.locator(".skip-link")).to_be_focused()
    page.locator("#session-filters input[name=q]").focus()
    page.keyboard.type(WORD)
    page.keyboard.press("Enter")
    expect(page.locator("[data-testid=session-row]")).to_have_count(1)
