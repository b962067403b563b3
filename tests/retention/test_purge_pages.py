"""The purge pages (memoryhub/retention/views.py): a tenant's history older than N days
(/tenant/purge/) and one session (/sessions/<id>/purge/), each a count first, then the delete.

Checks that cover these pages among others (log-in redirects, another tenant's 404) stay with
those pages: tests/accounts/test_tenant_pages.py, tests/sessions_app/test_sessions_pages.py.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone

from memoryhub.accounts.models import AuditEvent
from sessions_app.models import Message, Session, StateEntry, Summary
from sessions_app.services import (
    MessageInput,
    message_append_batch,
    session_create_or_get,
    state_set,
)

# --- purge history older than N days ----------------------------------------------------------


def conversation(tenant, *, user: str, days_old: float, messages: int = 3) -> Session:
    session, _ = session_create_or_get(tenant=tenant, user_id=user, agent_id="chat")
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[MessageInput(role="user", content=f"m{i}") for i in range(messages)],
    )
    moment = timezone.now() - dt.timedelta(days=days_old)
    Message.objects.filter(session=session).update(created_at=moment)
    Session.objects.filter(pk=session.pk).update(last_active_at=moment)
    return session


def test_purge_counts_first_then_removes_exactly_that_audited(editor, tenant, other_tenant):
    old = conversation(tenant, user="ana", days_old=40)
    recent = conversation(tenant, user="bob", days_old=1)
    theirs = conversation(other_tenant, user="spy", days_old=40)

    confirm = editor.get("/tenant/purge/", {"days": "30"})

    assert confirm.status_code == 200
    counted = confirm.context["counts"]
    assert counted["sessions"] == 1
    assert counted["messages"] == 3
    assert b'id="purge-submit"' in confirm.content
    assert b'id="purge-counts"' in confirm.content
    assert Session.objects.filter(pk=old.pk).exists()  # the count removed nothing
    as_of = confirm.context["as_of"]

    done = editor.post("/tenant/purge/", {"days": "30", "user_id": "", "as_of": as_of.isoformat()})

    assert done.status_code == 200
    assert done.context["counts"] == counted
    assert b'id="purge-done"' in done.content
    assert not Session.objects.filter(pk=old.pk).exists()
    assert Session.objects.filter(pk__in=[recent.pk, theirs.pk]).count() == 2
    event = AuditEvent.objects.get(tenant=tenant, action="purge")
    assert (event.object_type, event.actor_type, event.actor) == ("older_than", "staff", "member-1")
    assert event.counts == counted
    assert not AuditEvent.objects.filter(tenant=other_tenant).exists()


def test_purge_for_one_person(editor, tenant):
    conversation(tenant, user="ana", days_old=40)
    bob = conversation(tenant, user="bob", days_old=40)

    confirm = editor.get("/tenant/purge/", {"days": "30", "user_id": "ana"})
    editor.post(
        "/tenant/purge/",
        {"days": "30", "user_id": "ana", "as_of": confirm.context["as_of"].isoformat()},
    )

    assert confirm.context["counts"]["sessions"] == 1
    assert list(Session.objects.filter(tenant=tenant)) == [bob]


def test_a_viewer_sees_the_counts_but_cannot_purge_by_age(viewer, tenant):
    old = conversation(tenant, user="ana", days_old=40)

    confirm = viewer.get("/tenant/purge/", {"days": "30"})
    refused = viewer.post("/tenant/purge/", {"days": "30", "as_of": timezone.now().isoformat()})

    assert confirm.context["counts"]["sessions"] == 1
    assert b'id="purge-submit"' not in confirm.content
    assert refused.status_code == 403
    assert Session.objects.filter(pk=old.pk).exists()
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"days": "0"}, "days", "greater than or equal to 1"),
        ({"days": "soon"}, "days", "Enter a whole number"),
        ({"days": "30", "user_id": "nobody"}, "user_id", "No one with this id"),
        ({"days": "30", "user_id": "spy"}, "user_id", "No one with this id"),
    ],
)
def test_bad_purge_input_shows_inline_errors_and_removes_nothing(
    editor, tenant, other_tenant, params, field, message
):
    conversation(tenant, user="ana", days_old=40)
    conversation(other_tenant, user="spy", days_old=40)

    shown = editor.get("/tenant/purge/", params)
    posted = editor.post("/tenant/purge/", {**params, "as_of": timezone.now().isoformat()})

    for response in (shown, posted):
        assert response.status_code == 400
        assert message in " ".join(response.context["form"].errors[field])
        assert message.encode() in response.content
    assert Session.objects.count() == 2
    assert not AuditEvent.objects.exists()


def test_a_stale_or_forged_confirmation_removes_nothing(editor, tenant):
    conversation(tenant, user="ana", days_old=40)

    for as_of in (timezone.now() + dt.timedelta(days=365), timezone.now() - dt.timedelta(days=9)):
        response = editor.post("/tenant/purge/", {"days": "30", "as_of": as_of.isoformat()})
        assert response.status_code == 400
        assert b"out of date" in response.content
    assert Session.objects.count() == 1


# --- purge one session ------------------------------------------------------------------------


def _chat(tenant, user="whatsapp:+4912345", agent="chat", messages=(), **kwargs):
    session, _ = session_create_or_get(tenant=tenant, user_id=user, agent_id=agent, **kwargs)
    if messages:
        message_append_batch(tenant=tenant, session_id=session.pk, messages=list(messages))
    session.refresh_from_db()
    return session


def _say(*texts: str) -> list[MessageInput]:
    roles = ("user", "assistant")
    return [MessageInput(role=roles[i % 2], content=text) for i, text in enumerate(texts)]


def test_another_tenants_session_cannot_be_purged(editor, other_tenant):
    foreign = _chat(other_tenant, messages=_say("hello"))

    response = editor.post(f"/sessions/{foreign.pk}/purge/")

    assert response.status_code == 404
    assert Session.objects.filter(pk=foreign.pk).exists()


def _session_with_everything(tenant):
    session = _chat(tenant, messages=_say("hi", "hello", "bye"))
    state_set(tenant=tenant, session_id=session.pk, key="k", value=1)
    Summary.objects.create(tenant=tenant, session=session, text="s", through_seq=2, model="m")
    return session


def test_the_purge_page_shows_what_would_go_and_the_post_removes_exactly_that(
    member_client, tenant
):
    editor = member_client(tenant)
    session = _session_with_everything(tenant)
    keep = _chat(tenant, user="someone else", messages=_say("stay"))

    page = editor.get(f"/sessions/{session.pk}/purge/")

    counts = page.context["counts"]
    assert counts == {"messages": 3, "sessions": 1, "state_entries": 1, "summaries": 1}
    html = page.content.decode()
    assert 'id="purge-counts"' in html
    assert 'id="purge-submit"' in html
    assert '<tr data-kind="state_entries"><th scope="row">State entries</th><td>1</td></tr>' in html
    assert Session.objects.filter(pk=session.pk).exists()  # the dry run deleted nothing

    response = editor.post(f"/sessions/{session.pk}/purge/", follow=True)

    assert response.redirect_chain == [("/sessions/", 302)]
    assert "Purged session" in response.content.decode()
    assert "3 messages" in response.content.decode()
    assert not Session.objects.filter(pk=session.pk).exists()
    assert not Message.objects.filter(session_id=session.pk).exists()
    assert not StateEntry.objects.filter(session_id=session.pk).exists()
    assert Message.objects.filter(session=keep).count() == 1
    event = AuditEvent.objects.get(tenant=tenant, object_type="session")
    assert (event.actor_type, event.actor, event.action) == ("staff", "member-1", "purge")
    assert (event.object_id, event.counts) == (str(session.pk), counts)


def test_a_viewer_sees_the_counts_but_cannot_purge_a_session(viewer, tenant):
    session = _session_with_everything(tenant)

    page = viewer.get(f"/sessions/{session.pk}/purge/")
    response = viewer.post(f"/sessions/{session.pk}/purge/")

    assert page.status_code == 200
    assert 'id="purge-submit"' not in page.content.decode()
    assert 'id="purge-viewer-note"' in page.content.decode()
    assert response.status_code == 403
    assert Session.objects.filter(pk=session.pk).exists()
    assert not AuditEvent.objects.filter(tenant=tenant).exists()


def test_the_purge_form_needs_its_csrf_token(tenant, member_client):
    from memoryhub.accounts.models import User

    member_client(tenant)
    session = _session_with_everything(tenant)
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.get(username="member-1"))

    response = client.post(f"/sessions/{session.pk}/purge/")

    assert response.status_code == 403
    assert Session.objects.filter(pk=session.pk).exists()
    page = client.get(f"/sessions/{session.pk}/purge/").content.decode()
    assert 'name="csrfmiddlewaretoken"' in page
