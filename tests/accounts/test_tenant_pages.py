"""The tenant pages: audit log, memory policy with agent overrides, API keys. (Purge by age:
tests/retention/test_purge_pages.py.)"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memoryhub.accounts.models import Actor, ApiKey, AuditEvent, MemoryPolicy
from memoryhub.accounts.services import api_key_create, audit_event_record

SCRIPT = "<script>alert(1)</script>"
ESCAPED = b"&lt;script&gt;alert(1)&lt;/script&gt;"


def record(tenant, *, actor="ana", action="purge", object_id="", days_ago=0, **more):
    event = audit_event_record(
        tenant=tenant,
        actor=Actor.staff(actor),
        action=action,
        object_type=more.pop("object_type", "session"),
        object_id=object_id,
        **more,
    )
    if days_ago:
        AuditEvent.objects.filter(pk=event.pk).update(
            created_at=timezone.now() - dt.timedelta(days=days_ago)
        )
    return event


# --- login and tenancy, every page ------------------------------------------------------------

PAGES = ["/tenant/audit/", "/tenant/policy/", "/tenant/keys/", "/tenant/purge/"]


@pytest.mark.parametrize("url", PAGES)
def test_a_visitor_is_sent_to_log_in(client, db, url):
    response = client.get(url)

    assert response.status_code == 302
    assert response.url == f"/login/?next={url}"


@pytest.mark.parametrize("url", PAGES)
def test_every_page_renders_for_editors_and_viewers(editor, viewer, url):
    for who in (editor, viewer):
        response = who.get(url)
        assert response.status_code == 200
        assert response.content.count(b"<h1>") == 1


# --- audit log --------------------------------------------------------------------------------


def test_the_audit_log_lists_the_tenants_events_newest_first(viewer, tenant, other_tenant):
    record(tenant, actor="ana", object_id="old", days_ago=2)
    record(tenant, actor="bob", action="erase", object_id="new")
    record(other_tenant, actor="spy", object_id="theirs")

    response = viewer.get("/tenant/audit/")

    events = list(response.context["page"].object_list)
    assert [event.object_id for event in events] == ["new", "old"]
    assert b"theirs" not in response.content
    assert b'id="audit-table"' in response.content
    assert b"<button" not in response.content.split(b'id="audit-table"')[1]


def test_the_audit_log_filters_by_actor_action_and_dates(viewer, tenant):
    record(tenant, actor="ana", action="purge", object_id="a-purge", days_ago=5)
    record(tenant, actor="bob", action="erase", object_id="b-erase", days_ago=1)
    record(tenant, actor="Anabel", action="key_create", object_id="k")

    def ids(**params):
        page = viewer.get("/tenant/audit/", params).context["page"]
        return sorted(event.object_id for event in page.object_list)

    today = timezone.localdate()
    assert ids(actor="ANA") == ["a-purge", "k"]
    assert ids(action="erase") == ["b-erase"]
    assert ids(since=str(today - dt.timedelta(days=2))) == ["b-erase", "k"]
    assert ids(until=str(today - dt.timedelta(days=1))) == ["a-purge", "b-erase"]
    assert ids(
        since=str(today - dt.timedelta(days=1)), until=str(today - dt.timedelta(days=1))
    ) == ["b-erase"]


def test_bad_audit_filters_are_shown_at_the_field(viewer, tenant):
    record(tenant)

    response = viewer.get("/tenant/audit/", {"action": "explode", "since": "not a date"})

    form = response.context["form"]
    assert "action" in form.errors
    assert "since" in form.errors
    assert b"Select a valid choice" in response.content
    assert b"Enter a valid date" in response.content
    assert list(response.context["page"].object_list) == []


def test_the_audit_log_is_paginated_with_htmx_and_without(
    viewer, tenant, django_assert_max_num_queries
):
    for n in range(3):
        record(tenant, object_id=f"e{n}")
    with django_assert_max_num_queries(12) as few:
        viewer.get("/tenant/audit/")
    for n in range(3, 60):
        record(tenant, object_id=f"e{n}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        first = viewer.get("/tenant/audit/", {"actor": "ana"})
    second = viewer.get("/tenant/audit/", {"actor": "ana", "page": "2"}, HTTP_HX_REQUEST="true")

    assert len(first.context["page"].object_list) == 50
    assert b'href="?actor=ana&amp;page=2"' in first.content
    assert len(second.context["page"].object_list) == 10
    assert second.content.lstrip().startswith(b'<div id="audit-panel">')
    assert b"<html" not in second.content


def test_audit_content_is_escaped(viewer, tenant):
    record(tenant, object_id=SCRIPT, detail={"user_id": SCRIPT}, actor=SCRIPT)

    response = viewer.get("/tenant/audit/")

    assert ESCAPED in response.content
    assert SCRIPT.encode() not in response.content


# --- memory policy ----------------------------------------------------------------------------

POLICY = {
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


def test_the_policy_page_shows_the_defaults_until_saved(viewer, tenant):
    response = viewer.get("/tenant/policy/")

    assert b'id="policy-defaults-note"' in response.content
    form = response.context["form"]
    assert form["context_max_tokens"].value() == 4000
    assert form["retention_days"].value() == 90
    assert MemoryPolicy.objects.filter(tenant=tenant).count() == 0


def test_a_viewer_reads_the_policy_but_cannot_change_it(viewer, tenant):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="sales", retention_days=7)

    page = viewer.get("/tenant/policy/")
    refused = viewer.post("/tenant/policy/", POLICY)

    html = page.content.decode()
    assert 'id="policy-save"' not in html
    assert 'id="override-add"' not in html
    assert 'data-testid="override-delete"' not in html
    assert "disabled" in html.split('id="policy-form"')[1].split("</form>")[0]
    assert "sales" in html
    assert refused.status_code == 403
    assert MemoryPolicy.objects.filter(tenant=tenant, agent_id="").count() == 0
    assert viewer.get("/tenant/policy/agents/new/").status_code == 403
    override = MemoryPolicy.objects.get(agent_id="sales")
    assert viewer.get(f"/tenant/policy/agents/{override.pk}/").status_code == 200
    assert (
        viewer.post(
            f"/tenant/policy/agents/{override.pk}/", {**POLICY, "agent_id": "x"}
        ).status_code
        == 403
    )
    assert viewer.post(f"/tenant/policy/agents/{override.pk}/delete/").status_code == 403
    assert MemoryPolicy.objects.get(pk=override.pk).agent_id == "sales"


def test_saving_creates_the_tenant_policy_then_updates_it_audited(editor, tenant):
    created = editor.post("/tenant/policy/", POLICY)

    assert created.status_code == 302
    policy = MemoryPolicy.objects.get(tenant=tenant, agent_id="")
    assert (policy.context_max_tokens, policy.retention_days) == (3000, 60)
    assert policy.daily_note_retention_days is None
    event = AuditEvent.objects.get(tenant=tenant, object_type="memory_policy")
    assert (event.action, event.actor_type, event.actor) == ("create", "staff", "member-1")
    assert event.detail["changes"]["context_max_tokens"] == 3000

    editor.post("/tenant/policy/", {**POLICY, "retention_days": "", "memory_enabled": ""})

    policy.refresh_from_db()
    assert (policy.retention_days, policy.memory_enabled) == (None, False)
    update = AuditEvent.objects.filter(object_type="memory_policy").order_by("-created_at").first()
    assert update.action == "update"
    assert update.detail["changes"] == {"memory_enabled": False, "retention_days": None}
    assert MemoryPolicy.objects.filter(tenant=tenant).count() == 1


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("context_max_tokens", "100", "greater than or equal to 200"),
        ("state_cap", "20000", "less than or equal to 10000"),
        ("retention_days", "0", "greater than or equal to 1"),
        ("summary_threshold_tokens", "lots", "Enter a whole number"),
    ],
)
def test_bad_policy_input_shows_inline_errors_and_changes_nothing(
    editor, tenant, field, value, message
):
    response = editor.post("/tenant/policy/", {**POLICY, field: value})

    assert response.status_code == 400
    assert message in " ".join(response.context["form"].errors[field])
    assert message.encode() in response.content
    assert not MemoryPolicy.objects.filter(tenant=tenant).exists()
    assert not AuditEvent.objects.filter(tenant=tenant).exists()


def test_agent_overrides_are_added_edited_and_deleted_with_audit(editor, tenant):
    added = editor.post("/tenant/policy/agents/new/", {**POLICY, "agent_id": "sales"})
    assert added.status_code == 302
    override = MemoryPolicy.objects.get(tenant=tenant, agent_id="sales")
    assert override.context_max_tokens == 3000

    duplicate = editor.post("/tenant/policy/agents/new/", {**POLICY, "agent_id": "sales"})
    assert duplicate.status_code == 400
    assert b"already has an override" in duplicate.content
    blank = editor.post("/tenant/policy/agents/new/", {**POLICY, "agent_id": "  "})
    assert "agent_id" in blank.context["form"].errors

    edited = editor.post(
        f"/tenant/policy/agents/{override.pk}/", {**POLICY, "agent_id": "sales", "state_cap": "5"}
    )
    assert edited.status_code == 302
    override.refresh_from_db()
    assert override.state_cap == 5

    confirm = editor.get(f"/tenant/policy/agents/{override.pk}/delete/")
    assert confirm.context["count_rows"] == [("memory policies", 1)]
    assert b'id="override-delete-submit"' in confirm.content
    deleted = editor.post(f"/tenant/policy/agents/{override.pk}/delete/")
    assert deleted.status_code == 302
    assert not MemoryPolicy.objects.filter(pk=override.pk).exists()

    actions = list(
        AuditEvent.objects.filter(tenant=tenant, object_type="memory_policy")
        .order_by("created_at")
        .values_list("action", "object_id")
    )
    assert actions == [("create", "sales"), ("update", "sales"), ("delete", "sales")]
    assert AuditEvent.objects.get(action="delete").counts == {"memory_policies": 1}


def test_the_new_override_form_starts_from_the_tenant_policy(editor, tenant):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="", context_max_tokens=1234)

    form = editor.get("/tenant/policy/agents/new/").context["form"]

    assert form["context_max_tokens"].value() == 1234


def test_another_tenants_override_is_a_404(editor, other_tenant):
    theirs = MemoryPolicy.objects.create(tenant=other_tenant, agent_id="spy")
    default = MemoryPolicy.objects.create(tenant=other_tenant, agent_id="")

    for pk in (theirs.pk, default.pk, 999_999):
        assert editor.get(f"/tenant/policy/agents/{pk}/").status_code == 404
        assert editor.get(f"/tenant/policy/agents/{pk}/delete/").status_code == 404
        assert editor.post(f"/tenant/policy/agents/{pk}/delete/").status_code == 404
    assert MemoryPolicy.objects.filter(tenant=other_tenant).count() == 2


def test_agent_ids_are_escaped(editor, tenant):
    MemoryPolicy.objects.create(tenant=tenant, agent_id=SCRIPT)

    response = editor.get("/tenant/policy/")

    assert ESCAPED in response.content
    assert SCRIPT.encode() not in response.content


def test_the_policy_page_lists_overrides_in_constant_queries(
    editor, tenant, django_assert_max_num_queries
):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="a0")
    with django_assert_max_num_queries(12) as few:
        editor.get("/tenant/policy/")
    for n in range(1, 30):
        MemoryPolicy.objects.create(tenant=tenant, agent_id=f"a{n}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        response = editor.get("/tenant/policy/")
    assert response.content.count(b'data-testid="override-row"') == 30


def test_the_policy_page_links_to_the_purge_count(editor, tenant):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="", retention_days=45)

    response = editor.get("/tenant/policy/")

    assert b'id="purge-form"' in response.content
    assert response.context["purge_form"]["days"].value() == 45


# --- API keys ---------------------------------------------------------------------------------


def test_the_keys_page_lists_the_tenants_keys_only(viewer, tenant, other_tenant):
    mine, _ = api_key_create(tenant=tenant, name="whatsapp bot", scopes=["read"])
    api_key_create(tenant=other_tenant, name="outsider bot")

    response = viewer.get("/tenant/keys/")

    html = response.content.decode()
    assert "whatsapp bot" in html
    assert f"mh_{mine.prefix}" in html
    assert "outsider bot" not in html
    assert 'id="key-create-form"' not in html
    assert 'data-testid="key-revoke"' not in html
    assert mine.hashed_key not in html


def test_creating_a_key_shows_its_secret_once(editor, tenant):
    response = editor.post(
        "/tenant/keys/",
        {
            "name": "tui bot",
            "scopes": ["read", "purge"],
            "expires_on": str(timezone.localdate() + dt.timedelta(days=30)),
        },
    )

    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    secret = response.context["secret"]
    assert secret.startswith("mh_")
    assert f'value="{secret}"'.encode() in response.content
    key = ApiKey.objects.get(tenant=tenant, name="tui bot")
    assert key.scopes == ["purge", "read"]
    assert key.expiry_date is not None
    assert key.is_valid(secret.removeprefix("mh_"))
    event = AuditEvent.objects.get(tenant=tenant, action="key_create")
    assert (event.actor, event.object_id) == ("member-1", key.prefix)
    again = editor.get("/tenant/keys/")
    assert secret.encode() not in again.content
    assert secret not in str(dict(editor.session))


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"name": "", "scopes": ["read"]}, "name", "required"),
        ({"name": "bot", "scopes": []}, "scopes", "required"),
        ({"name": "bot", "scopes": ["root"]}, "scopes", "Select a valid choice"),
        (
            {"name": "bot", "scopes": ["read"], "expires_on": "2001-01-01"},
            "expires_on",
            "after today",
        ),
        ({"name": "x" * 51, "scopes": ["read"]}, "name", "at most 50"),
    ],
)
def test_bad_key_input_shows_inline_errors_and_creates_nothing(
    editor, tenant, data, field, message
):
    response = editor.post("/tenant/keys/", data)

    assert response.status_code == 400
    assert message in " ".join(response.context["form"].errors[field])
    assert b"errorlist" in response.content
    assert "secret" not in response.context
    assert not ApiKey.objects.filter(tenant=tenant).exists()
    assert not AuditEvent.objects.exists()


def test_a_viewer_cannot_create_or_revoke_keys(viewer, tenant):
    key, _ = api_key_create(tenant=tenant, name="bot")

    assert viewer.post("/tenant/keys/", {"name": "mine", "scopes": ["read"]}).status_code == 403
    assert viewer.get(f"/tenant/keys/{key.prefix}/revoke/").status_code == 403
    assert viewer.post(f"/tenant/keys/{key.prefix}/revoke/").status_code == 403
    key.refresh_from_db()
    assert not key.revoked
    assert ApiKey.objects.count() == 1


def test_revoking_a_key_confirms_then_revokes_audited(editor, tenant):
    key, _ = api_key_create(tenant=tenant, name="bot")

    confirm = editor.get(f"/tenant/keys/{key.prefix}/revoke/")
    assert b'id="key-revoke-submit"' in confirm.content
    key.refresh_from_db()
    assert not key.revoked

    done = editor.post(f"/tenant/keys/{key.prefix}/revoke/")
    again = editor.post(f"/tenant/keys/{key.prefix}/revoke/")

    assert done.status_code == again.status_code == 302
    key.refresh_from_db()
    assert key.revoked
    events = AuditEvent.objects.filter(tenant=tenant, action="key_revoke")
    assert [(event.actor, event.object_id) for event in events] == [("member-1", key.prefix)]
    listing = editor.get("/tenant/keys/").content.decode()
    assert "revoked" in listing
    assert 'data-testid="key-revoke"' not in listing


def test_another_tenants_key_is_a_404(editor, other_tenant):
    theirs, _ = api_key_create(tenant=other_tenant, name="spy")

    assert editor.get(f"/tenant/keys/{theirs.prefix}/revoke/").status_code == 404
    assert editor.post(f"/tenant/keys/{theirs.prefix}/revoke/").status_code == 404
    assert editor.get("/tenant/keys/nosuch/revoke/").status_code == 404
    theirs.refresh_from_db()
    assert not theirs.revoked


def test_key_names_are_escaped(editor, tenant):
    api_key_create(tenant=tenant, name=SCRIPT)

    response = editor.get("/tenant/keys/")

    assert ESCAPED in response.content
    assert SCRIPT.encode() not in response.content


def test_the_keys_page_is_paginated_in_constant_queries(
    editor, tenant, django_assert_max_num_queries
):
    api_key_create(tenant=tenant, name="k0")
    with django_assert_max_num_queries(12) as few:
        editor.get("/tenant/keys/")
    for n in range(1, 55):
        api_key_create(tenant=tenant, name=f"k{n}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        response = editor.get("/tenant/keys/")
    second = editor.get("/tenant/keys/", {"page": "2"}, HTTP_HX_REQUEST="true")

    assert response.content.count(b'data-testid="key-row"') == 50
    assert second.content.count(b'data-testid="key-row"') == 5
    assert second.content.lstrip().startswith(b'<div id="keys-panel">')
