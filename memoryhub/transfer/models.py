"""What each imported record became, so that running the same import again adds nothing; and the
import page's uploads waiting for their confirmation."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import models

from memoryhub.accounts.models import TenantOwnedModel

# How long an upload waits for its confirmation before it is deleted unconfirmed.
PENDING_UPLOAD_KEEP = dt.timedelta(days=1)


class ImportedRecord(TenantOwnedModel):
    """`source_key` is a SHA-256 of the record's id in its source, not the id itself: source
    ids can name people (a memory's user and key), and this table outlives their erasure."""

    source = models.CharField(
        max_length=32, help_text='The import format: "memoryhub", "basic-session"…'
    )
    kind = models.CharField(max_length=32, help_text='"sessions", "facts", …')
    source_key = models.CharField(max_length=64, help_text="SHA-256 of the id in its source.")
    object_id = models.CharField(max_length=64, help_text="The row it became.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "source", "kind", "source_key"], name="importedrecord_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.source}:{self.kind}:{self.source_key[:12]} -> {self.object_id}"


class PendingUpload(TenantOwnedModel):
    """A file uploaded on the import page, kept until it is confirmed (a day at most).

    In the database, not on a disk: the confirmation may reach another web replica, on another
    machine. The bytes are in PendingUploadChunk rows, so no single row holds a whole file.
    """

    token = models.CharField(
        max_length=32, unique=True, help_text="Random hex the confirmation names the upload by."
    )
    source = models.CharField(max_length=32, help_text="The import format chosen at upload.")
    name = models.CharField(max_length=255, help_text="The uploaded file's own name.")
    size = models.PositiveBigIntegerField(help_text="Bytes.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        indexes = [models.Index(fields=["tenant"], name="pendingupload_tenant")]

    def __str__(self) -> str:
        return f"{self.name} ({self.source}, {self.size} bytes)"


class PendingUploadChunk(TenantOwnedModel):
    """One piece (about a MiB) of a pending upload, in order of `index`. It repeats its upload's
    tenant: row-level security narrows every tenant table by its own tenant_id."""

    upload = models.ForeignKey(PendingUpload, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["upload", "index"], name="pendinguploadchunk_unique")
        ]
        indexes = [models.Index(fields=["tenant"], name="pendinguploadchunk_tenant")]

    def __str__(self) -> str:
        return f"{self.upload_id}#{self.index}"
