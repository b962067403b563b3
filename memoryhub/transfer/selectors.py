"""Reads of the transfer package that are more than a `get`: the import page's pending uploads."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.utils import timezone

from memoryhub.accounts.models import Tenant
from memoryhub.transfer.models import PENDING_UPLOAD_KEEP, PendingUpload, PendingUploadChunk

_TOKEN = re.compile(r"^[0-9a-f]{32}$")


def pending_upload_for_token(*, tenant: Tenant, token: str) -> PendingUpload | None:
    """The tenant's upload named by `token`, None when there is none: malformed, another
    tenant's, confirmed already, or older than a day (gone at the next upload's purge anyway)."""
    if not _TOKEN.match(token):
        return None
    cutoff = timezone.now() - PENDING_UPLOAD_KEEP
    return (
        PendingUpload.objects.for_tenant(tenant).filter(token=token, created_at__gte=cutoff).first()
    )


def pending_upload_chunks(*, upload: PendingUpload) -> Iterator[bytes]:
    """The upload's bytes in order, one chunk read at a time: a plain query per chunk rather
    than a server-side cursor, which a transaction-pooling PgBouncer would not keep."""
    chunk_ids = list(
        PendingUploadChunk.objects.filter(tenant_id=upload.tenant_id, upload=upload)
        .order_by("index")
        .values_list("pk", flat=True)
    )
    for chunk_id in chunk_ids:
        data = PendingUploadChunk.objects.values_list("data", flat=True).get(pk=chunk_id)
        # bytes on SQLite, a memoryview on PostgreSQL.
        yield bytes(data)


@contextmanager
def pending_upload_file(*, upload: PendingUpload, suffix: str) -> Iterator[Path]:
    """`with pending_upload_file(…) as path:` the upload as a file of this request's own (the
    readers take a path: SQLite stores need a real file; `suffix` tells a .jsonl.gz from a
    .jsonl), deleted when the block ends."""
    with tempfile.NamedTemporaryFile(prefix="memoryhub-upload-", suffix=suffix) as handle:
        for data in pending_upload_chunks(upload=upload):
            handle.write(data)
        handle.flush()
        yield Path(handle.name)
