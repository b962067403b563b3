"""The person page's credentials section: mint (shown once), list, revoke; editors only;
another tenant's person is a 404."""

from __future__ import annotations

import re

import pytest

from memoryhub.accounts.models import AuditEvent, EndUser
from memoryhub.credentials.models import PersonToken
from tests.helpers import client_for

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def alice(tenant):
    return EndUser.objects.create(tenant=tenant, external_id="tg:alice")


def test_the_person_page_loads_the_section(editor, alice):
    page = editor.get("/people/tg:alice/")
    assert page.status_code == 200
    assert 'hx-get="/people/tg:alice/tokens/"' in page.content.decode()
    section = editor.get("/people/tg:alice/tokens/", **HTMX)
    assert section.status_code == 200
    assert "No active tokens." in section.content.decode()


def test_an_editor_mints_a_working_token_shown_once_and_revokes_it(editor, alice, tenant):
    minted = editor.post(
        "/people/tg:alice/tokens/new/", {"ttl_minutes": 10, "scopes": ["read"]}, **HTMX
    )
    assert minted.status_code == 200
    html = minted.content.decode()
    token = re.search(r'data-testid="token-secret">([^<]+)<', html).group(1)
    assert client_for(token).get("/api/v1/users/").status_code == 200
    row = PersonToken.objects.get(end_user=alice)
    assert row.scopes == ["read"]
    assert AuditEvent.objects.filter(tenant=tenant, object_id=row.jti, actor_type="staff").exists()
    listed = editor.get("/people/tg:alice/tokens/", **HTMX).content.decode()
    assert row.jti in listed
    assert token not in listed
    revoked = editor.post(f"/people/tg:alice/tokens/{row.jti}/revoke/", **HTMX)
    assert revoked.status_code == 200
    assert "No active tokens." in revoked.content.decode()
    assert client_for(token).get("/api/v1/users/").status_code == 401


def test_a_viewer_sees_but_cannot_mint(viewer, alice):
    assert viewer.get("/people/tg:alice/tokens/", **HTMX).status_code == 200
    assert viewer.post("/people/tg:alice/tokens/new/", {"ttl_minutes": 5}).status_code == 403
    assert not PersonToken.objects.exists()


def test_another_tenants_person_is_404(member_client, other_tenant, alice):
    outsider = member_client(other_tenant)
    assert outsider.get("/people/tg:alice/tokens/", **HTMX).status_code == 404
    response = outsider.post("/people/tg:alice/tokens/new/", {"ttl_minutes": 5, "scopes": ["read"]})
    assert response.status_code == 404
    assert not PersonToken.objects.exists()


def test_a_too_long_lifetime_is_a_form_error(editor, alice, settings):
    settings.MEMORYHUB_PERSON_TOKEN_MAX_TTL_SECONDS = 600
    response = editor.post(
        "/people/tg:alice/tokens/new/", {"ttl_minutes": 11, "scopes": ["read"]}, **HTMX
    )
    assert response.status_code == 200
    assert "At most 10 minutes." in response.content.decode()
    assert not PersonToken.objects.exists()
