"""The import page (upload, the dry run's counts, confirm) and the tenant export download."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import tempfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryhub.accounts.models import AuditEvent
from memoryhub.transfer.export import export_records
from memoryhub.transfer.models import PendingUpload, PendingUploadChunk
from memoryhub.transfer.selectors import pending_upload_chunks
from memoryhub.transfer.services import pending_upload_delete
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
    # Nor did the attempt spend it: its owner can still confirm it.
    assert PendingUpload.objects.get(token=token).tenant == other_tenant
    done = theirs.post("/import/confirm/", {"token": token, "source": "memoryhub"})
    assert done.status_code == 200
    assert not PendingUpload.objects.exists()


# --- pending uploads live in the database, not on a replica's disk ---------------------------


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Where tempfile puts this test's temporary files (to see that none outlives a request)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_an_upload_is_confirmed_by_a_replica_that_never_saw_its_disk(
    member_client, tenant, other_tenant, settings, tmp_path, private_tmp
):
    settings.CELERY_DATA_DIR = tmp_path / "replica-a" / "celery"
    content = an_export(other_tenant)
    client = member_client(tenant)

    token = upload(client, content).context["token"]

    # Nothing of it is on the disk: not in the old uploads folder, not left in the temp dir.
    assert not (tmp_path / "replica-a").exists()
    assert list(private_tmp.iterdir()) == []
    pending = PendingUpload.objects.get(token=token)
    assert (pending.tenant, pending.source, pending.name) == (tenant, "memoryhub", "export.jsonl")
    assert pending.size == len(content)
    assert pending.created_by.username.startswith("member-")
    assert b"".join(pending_upload_chunks(upload=pending)) == content
    # Another replica: another data folder (and, below, the form's echo of the format ignored).
    settings.CELERY_DATA_DIR = tmp_path / "replica-b" / "celery"
    done = client.post("/import/confirm/", {"token": token, "source": "bub"})

    assert done.status_code == 200
    assert done.context["source"] == "memoryhub"
    assert Message.objects.get(tenant=tenant).content == "<script>alert(1)</script>"
    assert not PendingUpload.objects.exists()
    assert not PendingUploadChunk.objects.exists()
    assert list(private_tmp.iterdir()) == []
    assert AuditEvent.objects.get(tenant=tenant, object_type="import").counts["sessions"] == 1


def test_a_many_chunk_gzipped_upload_comes_back_byte_for_byte(
    member_client, tenant, other_tenant, monkeypatch
):
    monkeypatch.setattr("memoryhub.web.transfer.UPLOAD_CHUNK_BYTES", 7)
    content = gzip.compress(an_export(other_tenant))
    client = member_client(tenant)

    checked = upload(client, content, name="Export.JSONL.GZ")

    assert checked.status_code == 200
    assert dict((row[0], row[1]) for row in checked.context["report"].rows())["sessions"] == 1
    pending = PendingUpload.objects.get(token=checked.context["token"])
    chunks = list(pending.chunks.order_by("index").values_list("index", "data"))
    assert [index for index, _ in chunks] == list(range(-(-len(content) // 7)))
    assert all(len(bytes(data)) == 7 for _, data in chunks[:-1])
    assert b"".join(pending_upload_chunks(upload=pending)) == content
    assert set(pending.chunks.values_list("tenant", flat=True)) == {tenant.pk}

    # Read back through the suffix: a gzip stream the reader would refuse as plain JSON Lines.
    done = client.post("/import/confirm/", {"token": pending.token})

    assert done.status_code == 200
    assert Session.objects.filter(tenant=tenant).count() == 1
    assert not PendingUploadChunk.objects.exists()


def test_an_upload_older_than_a_day_is_gone_and_purged_at_the_next_upload(
    member_client, tenant, other_tenant
):
    client = member_client(tenant)
    stale = upload(client, an_export(other_tenant)).context["token"]
    theirs = upload(member_client(other_tenant), an_export(other_tenant)).context["token"]
    fresh = upload(client, an_export(other_tenant)).context["token"]
    day_ago = timezone.now() - dt.timedelta(days=1, minutes=1)
    PendingUpload.objects.filter(token__in=[stale, theirs]).update(created_at=day_ago)

    expired = client.post("/import/confirm/", {"token": stale}, follow=True)

    assert b"upload the file again" in expired.content
    assert Session.objects.filter(tenant=tenant).count() == 0

    upload(client, an_export(other_tenant))

    # Every tenant's stale uploads go (their chunks with them); a fresh one stays.
    tokens = set(PendingUpload.objects.values_list("token", flat=True))
    assert stale not in tokens
    assert theirs not in tokens
    assert fresh in tokens
    assert len(tokens) == 2
    assert set(PendingUploadChunk.objects.values_list("upload__token", flat=True)) == tokens


def test_a_failed_import_leaves_no_upload_behind(member_client, tenant, other_tenant, monkeypatch):
    client = member_client(tenant)
    token = upload(client, an_export(other_tenant)).context["token"]

    def broken(**kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr("memoryhub.web.transfer.import_items", broken)
    with pytest.raises(RuntimeError):
        client.post("/import/confirm/", {"token": token})

    assert not PendingUpload.objects.exists()
    assert not PendingUploadChunk.objects.exists()


@pytest.mark.parametrize("token", ["", "nope", "0" * 31, "G" * 32, "0" * 32])
def test_a_malformed_or_unknown_token_is_gone(member_client, tenant, token):
    response = member_client(tenant).post("/import/confirm/", {"token": token}, follow=True)

    assert response.status_code == 200
    assert b"upload the file again" in response.content


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


def test_deleting_an_upload_never_reads_its_bytes(member_client, tenant, other_tenant, monkeypatch):
    monkeypatch.setattr("memoryhub.web.transfer.UPLOAD_CHUNK_BYTES", 64)
    upload(member_client(tenant), an_export(other_tenant))
    pending = PendingUpload.objects.get()
    assert pending.chunks.count() > 1

    with CaptureQueriesContext(connection) as queries:
        assert pending_upload_delete(upload=pending)

    # One DELETE of the chunks by their upload: a 512 MB upload is not loaded to be deleted.
    assert not [query["sql"] for query in queries if '"data"' in query["sql"]]
    assert not PendingUploadChunk.objects.exists()
    assert not pending_upload_delete(upload=pending)  # gone already: nothing to claim
