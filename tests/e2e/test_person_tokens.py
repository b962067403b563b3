"""The person page's credentials section in a real browser: it loads with htmx, mints a token
(shown once), lists it and revokes it after the browser's confirmation."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from memoryhub.accounts.models import EndUser
from memoryhub.credentials.models import PersonToken
from tests.e2e.helpers import log_in, screenshot

pytestmark = pytest.mark.slow


def test_mint_list_and_revoke_a_persons_token(page, owner):
    tenant = owner.memberships.get().tenant
    end_user = EndUser.objects.create(tenant=tenant, external_id="telegram:42")
    log_in(page)
    page.goto("/people/telegram:42/")
    section = page.locator("#tokens-section")
    expect(section).to_contain_text("No active tokens.")
    section.get_by_label("Lifetime (minutes)").fill("5")
    section.get_by_test_id("token-mint").click()
    expect(page.get_by_test_id("token-minted")).to_be_visible()
    expect(page.get_by_test_id("token-secret")).to_contain_text("eyJ")
    expect(page.get_by_test_id("token-row")).to_have_count(1)
    screenshot(page, "person-tokens")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("token-revoke").click()
    expect(page.get_by_test_id("token-revoked")).to_be_visible()
    expect(page.get_by_test_id("token-row")).to_have_count(0)
    token = PersonToken.objects.get(end_user=end_user)
    assert token.revoked_at is not None
