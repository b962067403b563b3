"""Redaction by memory policy (issue 17): off by default, mask or refuse on write through the
API, recall-time masking in the context and search answers, the audit entry, the policy page
switches and the badge on the session page."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from facts_app.models import Fact, Note, UserMemory
from memoryhub.accounts.models import AuditAction, AuditEvent, MemoryPolicy, RedactionMode
from sessions_app.models import Message, Summary
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get
from tests.helpers import error_code

USER = "whatsapp:+4912345"
KEY = "mh_AbCdEf12.abcdefghijklmnopqrstuvwxyz012345"
SECRET_TEXT = f"my api key is {KEY}, mail jane@example.org"


def messages_url(session) -> str:
    return f"/api/v1/sessions/{session.pk}/messages/"


def policy(tenant, mode: str, agent_id: str = "", **classes: bool) -> MemoryPolicy:
    return MemoryPolicy.objects.create(
        tenant=tenant, agent_id=agent_id, redaction_mode=mode, **classes
    )


# --- off: the default --------------------------------------------------------------------------


def test_off_by_default_stores_the_text_as_sent(api, session):
    response = api.post(messages_url(session), {"role": "user", "content": SECRET_TEXT})

    assert response.status_code == 201, response.content
    assert Message.objects.get().content == SECRET_TEXT
    assert not AuditEvent.objects.filter(action=AuditAction.REDACT).exists()


def test_off_costs_no_query_beyond_the_cached_policies(tenant, session):
    from sessions_app.services import messages_redacted

    inputs = [MessageInput(role="user", content=SECRET_TEXT)]
    with CaptureQueriesContext(connection) as queries:
        # Twice: the first read fills the per-process policy cache.
        messages_redacted(tenant=tenant, session_id=session.pk, messages=inputs)
        assert messages_redacted(tenant=tenant, session_id=session.pk, messages=inputs) is inputs
    assert len(queries) <= 1


# --- mask ---------------------------------------------------------------------------------------


def test_mask_stores_placeholders_and_audits_classes_and_counts(api, tenant, session):
    policy(tenant, RedactionMode.MASK, redact_email=True)

    response = api.post(messages_url(session), {"role": "user", "content": SECRET_TEXT})

    assert response.status_code == 201, response.content
    stored = Message.objects.get()
    assert stored.content == "my api key is [redacted:secret], mail [redacted:email]"
    assert response.json()["content"] == stored.content
    event = AuditEvent.objects.get(action=AuditAction.REDACT)
    assert event.object_type == "message"
    assert event.object_id == str(session.pk)
    assert event.counts == {"secret": 1, "email": 1}
    assert event.detail["fields"] == {"content": {"secret": 1, "email": 1}}
    assert KEY not in str(event.detail)
    assert "jane" not in str(event.detail)


def test_mask_leaves_classes_not_chosen(api, tenant, session):
    policy(tenant, RedactionMode.MASK)  # secrets only

    api.post(messages_url(session), {"role": "user", "content": SECRET_TEXT})

    assert Message.objects.get().content == "my api key is [redacted:secret], mail jane@example.org"


def test_mask_covers_tool_call_arguments_and_recounts_tokens(api, tenant, session):
    policy(tenant, RedactionMode.MASK, redact_card=True)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "pay", "arguments": '{"card": "4111 1111 1111 1111"}'},
    }
    response = api.post(
        messages_url(session),
        {"role": "assistant", "content": "", "tool_calls": [call]},
        format="json",
    )

    assert response.status_code == 201, response.content
    stored = Message.objects.get()
    assert stored.tool_calls[0]["function"]["arguments"] == '{"card": "[redacted:card]"}'
    assert stored.tool_calls[0]["id"] == "call_1"


def test_an_agent_override_redacts_only_that_agents_sessions(api, tenant):
    policy(tenant, RedactionMode.MASK, agent_id="support")
    support, _ = session_create_or_get(tenant=tenant, user_id=USER, agent_id="support")
    chat, _ = session_create_or_get(tenant=tenant, user_id=USER, agent_id="chat")

    api.post(messages_url(support), {"role": "user", "content": SECRET_TEXT})
    api.post(messages_url(chat), {"role": "user", "content": SECRET_TEXT})

    assert Message.objects.get(session=support).content.startswith("my api key is [redacted")
    assert Message.objects.get(session=chat).content == SECRET_TEXT


def test_mask_applies_to_memories_facts_notes_and_summaries(api, tenant, session):
    policy(tenant, RedactionMode.MASK, redact_email=True, redact_iban=True)
    text = "Pays rent to GB82WEST12345698765432, writes to jane@example.org"
    masked = "Pays rent to [redacted:iban], writes to [redacted:email]"

    memory = api.put(f"/api/v1/users/{USER}/memories/rent/", {"content": text}, format="json")
    fact = api.post("/api/v1/facts/", {"user_id": USER, "content": text}, format="json")
    note = api.put(f"/api/v1/users/{USER}/notes/long-term/", {"content": text}, format="json")
    daily = api.post(f"/api/v1/users/{USER}/notes/daily/", {"content": text}, format="json")
    message_append_batch(
        tenant=tenant, session_id=session.pk, messages=[MessageInput(role="user", content="hi")]
    )
    summary = api.put(f"/api/v1/sessions/{session.pk}/summary/", {"text": text}, format="json")

    for response in (memory, fact, note, daily, summary):
        assert response.status_code in (200, 201), response.content
    assert UserMemory.objects.get().content == masked
    assert Fact.objects.get().content == masked
    assert {note.content for note in Note.objects.all()} == {masked}
    assert Summary.objects.get().text == masked
    kinds = set(
        AuditEvent.objects.filter(action=AuditAction.REDACT).values_list("object_type", flat=True)
    )
    assert kinds == {"memory", "fact", "note", "summary"}


# --- refuse -------------------------------------------------------------------------------------


def test_refuse_answers_422_naming_field_and_class_never_the_secret(api, tenant, session):
    policy(tenant, RedactionMode.REFUSE, redact_email=True)

    response = api.post(messages_url(session), {"role": "user", "content": SECRET_TEXT})

    assert response.status_code == 422, response.content
    body = response.json()["error"]
    assert body["code"] == "redacted_content_refused"
    assert body["classes"] == ["email", "secret"]
    assert body["fields"]["content"][0]["code"] == "redacted_content_refused"
    assert KEY not in response.content.decode()
    assert "jane@" not in response.content.decode()
    assert not Message.objects.exists()


def test_refuse_names_the_message_of_a_batch(api, tenant, session):
    policy(tenant, RedactionMode.REFUSE)
    batch = {
        "messages": [
            {"role": "user", "content": "hello"},
            {"role": "user", "content": f"key {KEY}"},
        ]
    }

    response = api.post(messages_url(session), batch, format="json")

    assert response.status_code == 422, response.content
    assert list(response.json()["error"]["fields"]) == ["messages.1.content"]
    assert not Message.objects.exists()


def test_refuse_passes_ordinary_text(api, tenant, session):
    policy(tenant, RedactionMode.REFUSE, redact_email=True, redact_phone=True, redact_card=True)

    response = api.post(
        messages_url(session),
        {"role": "user", "content": "Order #123456789 on 2024-01-15 cost $1,299.99 (v1.2.3)."},
    )

    assert response.status_code == 201, response.content


@pytest.mark.parametrize(
    ("method", "path", "payload"),
    [
        ("put", f"/api/v1/users/{USER}/memories/k/", {"content": f"key {KEY}"}),
        ("post", "/api/v1/facts/", {"user_id": USER, "content": f"key {KEY}"}),
        ("put", f"/api/v1/users/{USER}/notes/long-term/", {"content": f"key {KEY}"}),
        ("post", f"/api/v1/users/{USER}/notes/daily/", {"content": f"key {KEY}"}),
    ],
)
def test_refuse_applies_to_memories_facts_and_notes(api, tenant, method, path, payload):
    policy(tenant, RedactionMode.REFUSE)

    response = getattr(api, method)(path, payload, format="json")

    assert response.status_code == 422, response.content
    assert error_code(response) == "redacted_content_refused"
    assert not UserMemory.objects.exists()
    assert not Fact.objects.exists()
    assert not Note.objects.exists()


def test_an_outsider_cannot_learn_anything_by_a_refusal(outsider_api, tenant, session):
    policy(tenant, RedactionMode.REFUSE)

    response = outsider_api.post(messages_url(session), {"role": "user", "content": KEY})

    assert response.status_code == 404


# --- recall: data stored before the policy was switched on -------------------------------------


@pytest.fixture
def stored_before(tenant, session):
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[
            MessageInput(role="user", content=f"remember my key {KEY} and jane@example.org"),
            MessageInput(role="assistant", content="Noted the key."),
        ],
    )
    from facts_app.services.facts import fact_create
    from memoryhub.accounts.services import end_user_get_or_create

    person = end_user_get_or_create(tenant=tenant, external_id=USER)
    fact_create(tenant=tenant, end_user=person, content=f"Their key is {KEY}")
    return session


def test_the_context_masks_what_was_stored_before(api, tenant, stored_before):
    before = api.get(f"/api/v1/sessions/{stored_before.pk}/context/?q=key")
    policy(tenant, RedactionMode.MASK, redact_email=True)
    after = api.get(f"/api/v1/sessions/{stored_before.pk}/context/?q=key")

    assert KEY in before.content.decode()
    assert after.status_code == 200, after.content
    text = after.content.decode()
    assert KEY not in text
    assert "jane@example.org" not in text
    assert "[redacted:secret]" in text
    assert "[redacted:email]" in text
    # Nothing stored changed, and nothing was audited: only the answer is masked.
    assert KEY in Message.objects.order_by("seq").first().content
    assert not AuditEvent.objects.filter(action=AuditAction.REDACT).exists()


def test_the_search_answers_mask_what_was_stored_before(api, tenant, stored_before):
    policy(tenant, RedactionMode.MASK, agent_id="chat")  # any agent's policy covers searches

    facts = api.get("/api/v1/facts/search/", {"q": "key", "user_id": USER})
    messages = api.get("/api/v1/messages/search/", {"q": "key", "user_id": USER})

    assert facts.status_code == 200
    assert messages.status_code == 200
    assert [row["fact"]["content"] for row in facts.json()["results"]] == [
        "Their key is [redacted:secret]"
    ]
    contents = [row["message"]["content"] for row in messages.json()["results"]]
    assert contents
    assert all(KEY not in content for content in contents)
    assert any("[redacted:secret]" in content for content in contents)


# --- the pages ----------------------------------------------------------------------------------

POLICY_FORM = {
    "memory_enabled": "on",
    "extraction_enabled": "on",
    "summary_threshold_tokens": "6000",
    "summary_keep_recent": "8",
    "state_cap": "100",
    "context_max_tokens": "3000",
    "context_max_messages": "15",
    "context_max_memories": "40",
    "retention_days": "60",
    "daily_note_retention_days": "",
    "task_retention_days": "14",
}


def test_the_policy_page_shows_the_redaction_switches(viewer, tenant):
    html = viewer.get("/tenant/policy/").content.decode()

    assert 'name="redaction_mode"' in html
    for name in ("redact_email", "redact_phone", "redact_card", "redact_iban"):
        assert f'name="{name}"' in html


def test_an_editor_switches_redaction_on_and_it_is_audited(editor, tenant):
    response = editor.post(
        "/tenant/policy/", {**POLICY_FORM, "redaction_mode": "refuse", "redact_email": "on"}
    )

    assert response.status_code == 302, response.content
    saved = MemoryPolicy.objects.get(tenant=tenant, agent_id="")
    assert saved.redaction_mode == RedactionMode.REFUSE
    assert saved.redaction_classes == ["secret", "email"]
    event = AuditEvent.objects.filter(object_type="memory_policy").latest("created_at")
    assert event.detail["changes"]["redaction_mode"] == "refuse"


def test_a_form_without_the_redaction_fields_keeps_the_mode(editor, tenant):
    policy(tenant, RedactionMode.MASK)

    response = editor.post("/tenant/policy/", POLICY_FORM)

    assert response.status_code == 302, response.content
    assert MemoryPolicy.objects.get(tenant=tenant, agent_id="").redaction_mode == "mask"


def test_an_unknown_mode_is_an_inline_error(editor, tenant):
    response = editor.post("/tenant/policy/", {**POLICY_FORM, "redaction_mode": "shred"})

    assert response.status_code == 400
    assert "redaction_mode" in response.context["form"].errors


def test_an_agent_override_has_the_switches_too(editor, tenant):
    response = editor.post(
        "/tenant/policy/agents/new/",
        {**POLICY_FORM, "agent_id": "support", "redaction_mode": "mask", "redact_phone": "on"},
    )

    assert response.status_code == 302, response.content
    override = MemoryPolicy.objects.get(tenant=tenant, agent_id="support")
    assert override.redaction_classes == ["secret", "phone"]


def test_the_session_page_badges_redacted_messages(editor, tenant, session):
    policy(tenant, RedactionMode.MASK, redact_email=True)
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[
            MessageInput(role="user", content="mail a@example.org or b@example.org"),
            MessageInput(role="assistant", content="Will do."),
        ],
    )

    html = editor.get(f"/sessions/{session.pk}/").content.decode()

    assert html.count('data-testid="redacted-badge"') == 1
    assert "redacted: email (2)" in html
