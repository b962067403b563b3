"""Semantic memory: explicit memories a person asked for (UserMemory), facts learned along the way
(Fact, searchable), and notes (a long-term document and daily notes, append-only)."""

from __future__ import annotations

from typing import ClassVar

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from memoryhub.accounts.models import TenantOwnedModel

MEMORY_KEY_MAX_LENGTH = 64
MEMORY_KEY_PATTERN = r"^[a-z][a-z0-9_]*$"
RESERVED_MEMORY_KEY_PREFIXES = ("system_", "internal_")
FACT_EXTERNAL_ID_MAX_LENGTH = 255


class UserMemory(TenantOwnedModel):
    """Something a person asked the bot to remember, under a key (seed 001).

    `end_user` NULL means tenant-wide: every user's context sees it, and writing it needs the
    `global-memory` scope. Saving an existing key keeps the old text as a UserMemoryVersion.
    """

    end_user = models.ForeignKey(
        "accounts.EndUser", null=True, blank=True, on_delete=models.CASCADE, related_name="memories"
    )
    key = models.CharField(
        max_length=MEMORY_KEY_MAX_LENGTH, validators=[RegexValidator(MEMORY_KEY_PATTERN)]
    )
    content = models.TextField()
    pinned = models.BooleanField(default=False, help_text="Never removed by retention.")
    expires_at = models.DateTimeField(null=True, blank=True)
    # An id, not a foreign key: facts_app does not depend on sessions_app (DESIGN.md §2), and the
    # memory belongs to the person, so it outlives the conversation it came from.
    source_session_id = models.UUIDField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "end_user", "key"],
                condition=Q(end_user__isnull=False),
                name="usermemory_unique_user_key",
            ),
            models.UniqueConstraint(
                fields=["tenant", "key"],
                condition=Q(end_user__isnull=True),
                name="usermemory_unique_tenant_key",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "expires_at"], name="usermemory_expires")]
        verbose_name_plural = "user memories"

    def __str__(self) -> str:
        return self.key


class UserMemoryVersion(TenantOwnedModel):
    """An earlier text of a UserMemory, kept when it was overwritten."""

    memory = models.ForeignKey(UserMemory, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    content = models.TextField()
    source_session_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(help_text="When this text was first saved.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["memory", "version"], name="usermemoryversion_unique_version"
            )
        ]
        indexes = [models.Index(fields=["tenant"], name="usermemoryversion_tenant")]
        ordering = ("memory", "-version")

    def __str__(self) -> str:
        return f"{self.memory_id} v{self.version}"


class Fact(TenantOwnedModel):
    """A piece of knowledge, posted or extracted (seed 004), with its provenance.

    `search_text` (content + tags + the person's id) is what full-text search indexes: a GIN
    expression index on PostgreSQL, an FTS5 table kept by triggers on SQLite (migration 0002).
    `content_hash` (of the normalised text) makes a repeated post return the existing fact.
    """

    end_user = models.ForeignKey(
        "accounts.EndUser", null=True, blank=True, on_delete=models.CASCADE, related_name="facts"
    )
    content = models.TextField()
    content_hash = models.CharField(max_length=64)
    # NULL, not "": the unique constraint below must only bind facts that have an id.
    external_id = models.CharField(  # noqa: DJ001
        max_length=FACT_EXTERNAL_ID_MAX_LENGTH,
        null=True,
        blank=True,
        help_text="The caller's own id for the fact (an import, a backfill): unique per tenant.",
    )
    search_text = models.TextField(editable=False, default="")
    tags = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    source_session_id = models.UUIDField(null=True, blank=True)
    source_message_ids = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    valid_until = models.DateTimeField(null=True, blank=True)
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="supersedes"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "end_user", "content_hash"],
                condition=Q(end_user__isnull=False),
                name="fact_unique_user_content",
            ),
            models.UniqueConstraint(
                fields=["tenant", "content_hash"],
                condition=Q(end_user__isnull=True),
                name="fact_unique_tenant_content",
            ),
            # Also the index the get-or-create by id looks up through.
            models.UniqueConstraint(
                fields=["tenant", "external_id"],
                condition=Q(external_id__isnull=False),
                name="fact_unique_tenant_external_id",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "end_user", "-created_at"], name="fact_user_created"),
            models.Index(fields=["tenant", "-created_at"], name="fact_tenant_created"),
        ]

    def __str__(self) -> str:
        return self.content[:60]


class NoteKind(models.TextChoices):
    LONG_TERM = "long_term", "Long-term"
    DAILY = "daily", "Daily"


class Note(TenantOwnedModel):
    """One version of a person's long-term note or of one day's note (seed 003).

    Append-only: a save writes a new row with the next version; the highest version is current;
    clearing writes an empty version. Nothing here is updated in place.
    """

    end_user = models.ForeignKey("accounts.EndUser", on_delete=models.CASCADE, related_name="notes")
    kind = models.CharField(max_length=16, choices=NoteKind.choices)
    day = models.DateField(null=True, blank=True, help_text="Daily notes only.")
    version = models.PositiveIntegerField()
    content = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "end_user", "version"],
                condition=Q(kind="long_term"),
                name="note_unique_long_term_version",
            ),
            models.UniqueConstraint(
                fields=["tenant", "end_user", "day", "version"],
                condition=Q(kind="daily"),
                name="note_unique_daily_version",
            ),
            models.CheckConstraint(
                condition=(
                    Q(kind="long_term", day__isnull=True) | Q(kind="daily", day__isnull=False)
                ),
                name="note_day_only_for_daily",
            ),
        ]
        indexes = [
            models.Index(
                fields=["tenant", "end_user", "kind", "day", "-version"], name="note_current"
            ),
            models.Index(fields=["tenant", "kind", "day"], name="note_kind_day"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.day or ''} v{self.version}".strip()


class VectorRow(TenantOwnedModel):
    """An embedding of one row, computed by a worker after the write (never on its path).

    `model` names the embedder that made it: a vector of another model counts as missing, so a
    model change re-embeds. Derived data: deleted with its row (CASCADE), recomputable at any
    time, and not a kind of its own in deletion counts and audit events.
    """

    derived_data: ClassVar[bool] = True

    model = models.CharField(max_length=100)
    vector = models.BinaryField(help_text="float32, little-endian, L2-normalised")
    created_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        indexes = [models.Index(fields=["tenant"], name="%(class)s_tenant")]


class FactVector(VectorRow):
    """A fact's embedding (of its content)."""

    fact = models.OneToOneField(
        Fact, on_delete=models.CASCADE, primary_key=True, related_name="vector"
    )

    def __str__(self) -> str:
        return f"{self.fact_id} {self.model}"


class UserMemoryVector(VectorRow):
    """A memory's embedding (of "<key>: <content>"); an edit of the text deletes it."""

    memory = models.OneToOneField(
        UserMemory, on_delete=models.CASCADE, primary_key=True, related_name="vector"
    )

    def __str__(self) -> str:
        return f"{self.memory_id} {self.model}"


class NoteVector(VectorRow):
    """A note version's embedding. Only current versions are embedded: a note changes by a new
    version, whose vector replaces the old one's."""

    note = models.OneToOneField(
        Note, on_delete=models.CASCADE, primary_key=True, related_name="vector"
    )

    def __str__(self) -> str:
        return f"{self.note_id} {self.model}"
