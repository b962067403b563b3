import re

import pytest
from django.contrib import admin
from django.urls import reverse

from memoryhub.accounts.models import ApiKey, AuditAction, AuditEvent, User
from sessions_app import services
from sessions_app.services import MessageInput
from tests.helpers import client_for


@pytest.fixture
def staff_client(client, db):
    user = User.objects.create_superuser(username="root", password="pw-for-tests-only")
    client.force_login(user)
    return client


@pytest.fixture
def populated(tenant, make_key):
    session, _ = services.session_create_or_get(tenant=tenant, user_id="u1", external_key="k")
    services.message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[
            MessageInput(role="user", content="hello"),
            MessageInput(role="assistant", content="hi"),
        ],
    )
    services.state_set(
        tenant=tenant, session_id=session.pk, key="working_memory", value={"a": 1}, cap=200
    )
    make_key(tenant)
    return session


def test_every_model_is_registered_with_a_working_changelist(staff_client, populated):
    for model in admin.site._registry:
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        response = staff_client.get(url, {"q": "x"})
        assert response.status_code == 200, url


def test_a_session_page_shows_its_messages_and_state_inline(staff_client, populated):
    response = staff_client.get(reverse("admin:sessions_app_session_change", args=[populated.pk]))

    assert response.status_code == 200
    assert b"hello" in response.content
    assert b"working_memory" in response.content


def test_the_revoke_action_revokes_keys_and_audits(staff_client, populated, tenant):
    api_key = ApiKey.objects.get(tenant=tenant)

    staff_client.post(
        reverse("admin:accounts_apikey_changelist"),
        {"action": "revoke_keys", "_selected_action": [api_key.pk]},
    )

    assert ApiKey.objects.get(pk=api_key.pk).revoked
    assert AuditEvent.objects.filter(action=AuditAction.KEY_REVOKE, actor="root").exists()


def test_staff_create_a_key_in_the_admin_see_it_once_and_it_works(staff_client, tenant):
    response = staff_client.post(
        reverse("admin:accounts_apikey_add"),
        {"tenant": tenant.pk, "name": "support bot", "scopes": ["read"]},
        follow=True,
    )

    shown = [str(m) for m in response.context["messages"]]
    secret = re.search(r"(mh_\S+)", shown[0]).group(1)
    api_key = ApiKey.objects.get(tenant=tenant, name="support bot")
    assert api_key.scopes == ["read"]
    assert api_key.created_by.username == "root"
    assert AuditEvent.objects.filter(action=AuditAction.KEY_CREATE, actor="root").exists()
    client = client_for(secret)
    assert client.get("/api/v1/sessions/").status_code == 200
    assert client.post("/api/v1/sessions/", {}, format="json").status_code == 403


def test_audit_events_are_read_only(staff_client, populated, tenant):
    event = AuditEvent.objects.filter(tenant=tenant).first()

    response = staff_client.post(
        reverse("admin:accounts_auditevent_delete", args=[event.pk]), {"post": "yes"}
    )

    assert response.status_code == 403
    assert AuditEvent.objects.filter(pk=event.pk).exists()
