"""The import page (upload, the dry run's counts, confirm) and the tenant export download."""

from __future__ import annotations

import json

from django.core.files.uploadedfile import SimpleUploadedFile

from memoryhub.accounts.models import AuditEvent
from memoryhub.transfer.export import export_records
from sessions_app.models import Message, Session
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get


def an_export(tenant) -> bytes:
    session, _ = session_create_or_get(tenant=tenant, user_id="u1", agent_id="chat")
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[MessageInput(role="user", content="<script>alert(1)</script>")],
    )
    lines = [json.dumps(record) for record in export_records(tenant=tenant)]
    return ("\n".join(lines) + "\n").encode()


def upload(client, content: bytes, name: str = "export.jsonl", fmt: str = "memoryhub"):
    return client.post(
        "/import/", {"file": SimpleUploadedFile(name, content), "format": fmt}, follow=False
    )


def test_upload_shows_what_would_come_then_confirm_imports_it(member_client, tenant, other_tenant):
    content = an_export(other_tenant)
    client = member_client(tenant)

    checked = upload(client, content)

    assert checked.status_code == 200
    assert Session.objects.filter(tenant=tenant).count() == 0  # nothing kept yet
    rows = {row[0]: row for row in checked.context["report"].rows()}
    assert rows["sessions"] == ("sessions", 1, 0, 0)
    token = checked.context["token"]
    done = client.post("/import/confirm/", {"token": token, "source": "memoryhub"})
    assert done.status_code == 200
    assert Session.objects.filter(tenant=tenant).count() == 1
    assert Message.objects.get(tenant=tenant).content == "<script>alert(1)</script>"
    event = AuditEvent.objects.get(tenant=tenant, object_type="import")
    assert event.counts["sessions"] == 1
    # The token is spent: confirming again imports nothing more.
    again = client.post("/import/confirm/", {"token": token, "source": "memoryhub"}, follow=True)
    assert b"upload the file again" in again.content
    assert Session.objects.filter(tenant=tenant).count() == 1


def test_skipped_records_are_listed_escaped(member_client, tenant):
    client = member_client(tenant)
    content = b'{"type": "header", "format": "memoryhub.export", "schema_version": 1}\n'
    content += b'{"type": "<script>x</script>"}\n'

    checked = upload(client, content)

    assert b"unknown record type" in checked.content
    assert b"<script>x</script>" not in checked.content
    assert b"&lt;script&gt;x&lt;/script&gt;" in checked.content


def test_a_token_of_another_tenant_finds_nothing(member_client, tenant, other_tenant):
    theirs = member_client(other_tenant)
    token = upload(theirs, an_export(other_tenant)).context["token"]
    mine = member_client(tenant)

    response = mine.post("/import/confirm/", {"token": token, "source": "memoryhub"}, follow=True)

    assert b"upload the file again" in response.content
    assert Session.objects.filter(tenant=tenant).count() == 0


def test_viewers_may_not_import_and_a_missing_file_is_an_inline_error(viewer, editor, tenant):
    assert viewer.get("/import/").status_code == 403
    assert upload(viewer, b"{}").status_code == 403
    response = editor.post("/import/", {"format": "memoryhub"})
    assert response.status_code == 200
    assert response.context["form"].errors["file"]


def test_the_export_download_streams_the_tenants_records(member_client, tenant, other_tenant):
    an_export(tenant)
    an_export(other_tenant)

    response = member_client(tenant, "viewer").get("/export/")

    assert response.status_code == 200
    assert response["Content-Disposition"].startswith(f'attachment; filename="{tenant.slug}-')
    records = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert records[0]["type"] == "header"
    assert records[0]["tenant"] == tenant.slug
    assert sum(record["type"] == "session" for record in records) == 1
    assert AuditEvent.objects.filter(tenant=tenant, action="export").count() == 1


def test_anonymous_visitors_are_sent_to_log_in(client, db):
    assert client.get("/import/").url.startswith("/login/")
    assert client.get("/export/").url.startswith("/login/")
