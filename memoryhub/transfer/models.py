"""What each imported record became, so that running the same import again adds nothing."""

from __future__ import annotations

from django.db import models

from memoryhub.accounts.models import TenantOwnedModel


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
