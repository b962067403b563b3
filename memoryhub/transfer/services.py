"""Writes of the transfer package beside the import itself: the audit of an export, and the
import page's pending uploads."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from memoryhub.accounts.models import Actor, AuditAction, EndUser, Tenant, User
from memoryhub.accounts.services import audit_event_record
from memoryhub.core.rls import rls_system_scope
from memoryhub.transfer.models import PENDING_UPLOAD_KEEP, PendingUpload, PendingUploadChunk


def tenant_export_audit(
    *, tenant: Tenant, end_user: EndUser | None, actor: Actor, records: int
) -> None:
    """An export takes everything out: who did it is kept, like a purge."""
    audit_event_record(
        tenant=tenant,
        actor=actor,
        action=AuditAction.EXPORT,
        object_type="end_user" if end_user else "tenant",
        object_id=end_user.external_id if end_user else tenant.slug,
        counts={"records": records},
    )


def pending_uploads_forget_old() -> int:
    """Delete the pending uploads of every tenant kept longer than a day (nobody confirmed
    them); returns how many. Run at each upload, so no beat is needed for a page rarely used.

    A named system path: it reads no content, and an upload abandoned by a tenant that never
    uploads again must not stay forever. Its chunks go by one DELETE (nothing listens to their
    deletion, so Django does not load them)."""
    cutoff = timezone.now() - PENDING_UPLOAD_KEEP
    with rls_system_scope():
        _, per_model = PendingUpload.objects.filter(created_at__lt=cutoff).delete()
    return per_model.get(PendingUpload._meta.label, 0)


def pending_upload_store(
    *,
    tenant: Tenant,
    source: str,
    name: str,
    chunks: Iterable[bytes],
    created_by: User | None,
) -> PendingUpload:
    """Keep an uploaded file until its confirmation, which any web replica may serve: `chunks`
    (about a MiB each, so no row is huge) are written in order, in one transaction, so a
    half-stored file is never found. The token is random and tied to the tenant."""
    pending_uploads_forget_old()
    with transaction.atomic():
        upload = PendingUpload.objects.create(
            tenant=tenant,
            token=uuid.uuid4().hex,
            source=source,
            name=name[: PendingUpload._meta.get_field("name").max_length],
            size=0,
            created_by=created_by,
        )
        size = 0
        for index, data in enumerate(chunks):
            # One row at a time: a 512 MB upload is never all in memory.
            PendingUploadChunk.objects.create(tenant=tenant, upload=upload, index=index, data=data)
            size += len(data)
        upload.size = size
        upload.save(update_fields=["size"])
    return upload


def pending_upload_delete(*, upload: PendingUpload) -> bool:
    """Delete an upload and its chunks; False when it was already gone (another request took
    it first), so a confirmation that claims an upload by deleting it runs at most once."""
    _, per_model = PendingUpload.objects.filter(pk=upload.pk, tenant_id=upload.tenant_id).delete()
    return per_model.get(PendingUpload._meta.label, 0) > 0
