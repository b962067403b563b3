"""Tenancy: who owns memory (Tenant), who may look at it (Membership), who it is about (EndUser),
how bots authenticate (ApiKey) and what was done to it (AuditEvent)."""

from __future__ import annotations

import unicodedata
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.core.validators import RegexValidator
from django.db import models
from rest_framework_api_key.models import AbstractAPIKey, BaseAPIKeyManager

if TYPE_CHECKING:
    from memoryhub.accounts.binding import PersonBinding


# Abstract bases every tenant-owned table uses: the tenant column and the one narrowing method.
class TenantQuerySet(models.QuerySet[Any]):
    def for_tenant(self, tenant: Tenant) -> Self:
        """The only way API and page code narrows rows: everything else starts from here.

        A tenant bound to one person (a person-bound credential, accounts.binding) narrows
        the person-owned models to that person too."""
        rows = self.filter(tenant=tenant)
        if tenant.person is None:
            return rows
        from memoryhub.accounts.binding import person_scope

        scope = person_scope(self.model, tenant.person)
        return rows if scope is None else rows.filter(scope)


class TenantOwnedModel(models.Model):
    # No index of its own: every tenant-owned table has an index or unique constraint that
    # leads with tenant_id (memoryhub.E010 checks it), which serves the key's lookups and
    # cascades as well; a second copy would be one more index every insert and update keeps.
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False
    )

    objects = TenantQuerySet.as_manager()

    class Meta:
        abstract = True


class User(AbstractUser):
    """Staff and people who use the web UI. Bots never log in as users; they use API keys."""


class Tenant(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    # Not a column: set on a per-request copy when a person-bound credential authenticates
    # (accounts.binding.tenant_bound); for_tenant() then narrows to the person too.
    person: PersonBinding | None = None

    class Meta:
        ordering = ("slug",)

    def __str__(self) -> str:
        return self.slug


class MembershipRole(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class Membership(models.Model):
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(
        max_length=16, choices=MembershipRole.choices, default=MembershipRole.MEMBER
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"


END_USER_ID_MAX_LENGTH = 255


def end_user_id_is_storable(external_id: str) -> bool:
    """PostgreSQL text cannot hold NUL and the column has a maximum length: such an id names no
    one, and must never reach the database as a query parameter (that would be a 500)."""
    return 0 < len(external_id) <= END_USER_ID_MAX_LENGTH and "\x00" not in external_id


def end_user_id_is_writable(external_id: str) -> bool:
    """What a new person's id may be: storable, and free of control characters (a newline or a
    tab in an id breaks every line-oriented tool that shows it). Ids stored before this rule
    are still found and shown."""
    return end_user_id_is_storable(external_id) and not any(
        unicodedata.category(char) == "Cc" for char in external_id
    )


class EndUser(TenantOwnedModel):
    """A person a bot talks to, by the bot's own id string (`whatsapp:+4912…`, `tui:local`)."""

    external_id = models.CharField(max_length=END_USER_ID_MAX_LENGTH)
    display_name = models.CharField(max_length=200, blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # What the in-process search indexes compare to know they are stale. `recall_version` is
    # bumped by every edit, delete, purge or erasure of what recall indexes of this person
    # (an index must never show removed text: it is rebuilt before use); `vectors_version` by
    # new vectors (an index may be used once more and refreshed after the response). Appends
    # are seen through the sessions' counters instead, so the append path writes nothing here.
    recall_version = models.PositiveBigIntegerField(default=0, editable=False)
    vectors_version = models.PositiveBigIntegerField(default=0, editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "external_id"], name="enduser_unique_tenant_external_id"
            )
        ]

    def __str__(self) -> str:
        return self.external_id


class ApiKeyScope(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write"
    PURGE = "purge", "Purge"
    GLOBAL_MEMORY = "global-memory", "Global memory"
    # Mint person-bound tokens (memoryhub.credentials); a token itself never carries it.
    MINT = "mint", "Mint person tokens"


DEFAULT_API_KEY_SCOPES: list[str] = [ApiKeyScope.READ, ApiKeyScope.WRITE]

# Keys are shown as `mh_<prefix>.<secret>`: the `mh_` lets secret scanners and people recognise one.
API_KEY_DISPLAY_PREFIX = "mh_"


class ApiKeyManager(BaseAPIKeyManager):
    pass


class ApiKey(AbstractAPIKey):
    """A tenant's API key. djangorestframework-api-key generates it and stores a SHA-512 hash;
    the secret exists only in the response that created it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    scopes = models.JSONField(default=list)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    objects: ClassVar[ApiKeyManager] = ApiKeyManager()  # type: ignore[assignment]

    class Meta(AbstractAPIKey.Meta):
        verbose_name = "API key"
        verbose_name_plural = "API keys"

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


class AuditAction(models.TextChoices):
    CREATE = "create", "Create"
    UPDATE = "update", "Update"
    DELETE = "delete", "Delete"
    PURGE = "purge", "Purge"
    EXPORT = "export", "Export"
    ERASE = "erase", "Erase"
    KEY_CREATE = "key_create", "API key created"
    KEY_REVOKE = "key_revoke", "API key revoked"
    # Secrets or personal data masked or refused on a write (accounts.redaction): classes and
    # counts only, never the text.
    REDACT = "redact", "Content redacted"


class ActorType(models.TextChoices):
    API_KEY = "api_key", "API key"
    STAFF = "staff", "Staff user"
    SYSTEM = "system", "System task"


@dataclass(frozen=True)
class Actor:
    """Who did a write, for the audit log (AuditEvent.actor_type and .actor). Build one with the
    constructors, so a kind of actor is always named the same way in the log."""

    type: ActorType
    name: str

    @classmethod
    def staff(cls, username: str) -> Actor:
        """A person signed in to the pages or the admin."""
        return cls(type=ActorType.STAFF, name=username)

    @classmethod
    def api_key(cls, prefix: str) -> Actor:
        """A bot, by its key's prefix (never the secret)."""
        return cls(type=ActorType.API_KEY, name=f"api_key:{prefix}")

    @classmethod
    def command(cls, name: str) -> Actor:
        """A management command: someone with a shell on the server, so staff."""
        return cls(type=ActorType.STAFF, name=f"manage.py {name}")

    @classmethod
    def system(cls, name: str) -> Actor:
        """Nobody in particular: a scheduled task or a setup script, by its name."""
        return cls(type=ActorType.SYSTEM, name=name)


class AuditEvent(models.Model):
    """Append-only: nothing in the code updates or deletes these rows."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Kept on tenant deletion would orphan rows; audit lives and dies with its tenant.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="audit_events")
    actor_type = models.CharField(max_length=16, choices=ActorType.choices)
    actor = models.CharField(max_length=200, help_text="API key prefix, username or task name")
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    object_type = models.CharField(max_length=64)
    # Wide enough for every id the API accepts: a person id (255) with a memory key (64), a plan id.
    object_id = models.CharField(max_length=1024, blank=True, default="")
    counts = models.JSONField(default=dict, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [models.Index(fields=["tenant", "-created_at"], name="audit_tenant_created")]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.object_type}"


class IdempotencyRecord(TenantOwnedModel):
    """The first response to a write sent with an `Idempotency-Key`, replayed on retries."""

    key = models.CharField(max_length=255, validators=[RegexValidator(r"^[\x21-\x7e]+$")])
    # The person the stored response is about: it may quote their messages or notes, so erasing
    # the person must take it too.
    end_user = models.ForeignKey(
        EndUser, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    # The session the write went to: deleting or purging it blanks the stored response (an id,
    # not a foreign key: the kernel knows no sessions; see accounts.idempotency).
    session_id = models.UUIDField(null=True, blank=True)
    scope = models.CharField(max_length=255, help_text="method and route the key was used on")
    request_hash = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "scope", "key"], name="idempotency_unique_tenant_scope_key"
            )
        ]
        indexes = [
            models.Index(fields=["created_at"], name="idempotency_created"),
            models.Index(fields=["tenant", "session_id"], name="idempotency_tenant_session"),
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.key} ({self.response_status})"


# Seed 000's transcript_cap: the value the policy page suggests when the cap is turned on.
TRANSCRIPT_CAP_SEED_DEFAULT = 500
TRANSCRIPT_CAP_MAX = 1_000_000


class RedactionMode(models.TextChoices):
    OFF = "off", "Off"
    MASK = "mask", "Mask: store the text with placeholders"
    REFUSE = "refuse", "Refuse the write (422)"


def default_summary_threshold_tokens() -> int:
    return int(settings.SUMMARY_THRESHOLD_TOKENS)


def default_summary_keep_recent() -> int:
    return int(settings.SUMMARY_KEEP_RECENT)


def default_state_cap() -> int:
    return int(settings.MEMORYHUB_LIMITS["STATE_CAP"])


class MemoryPolicy(models.Model):
    """How a tenant's memory behaves, editable in the admin and on the memory policy page.

    A row with an empty `agent_id` is the tenant's policy; a row with an agent id overrides it,
    whole, for that agent. With no row at all the built-in defaults apply (seed 001's numbers,
    overridable by the MEMORYHUB_* settings). Reads go through a short per-process cache
    (accounts.selectors.memory_policy_for), so an edit reaches every process within seconds.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memory_policies")
    agent_id = models.CharField(
        max_length=128, blank=True, default="", help_text="Empty: the tenant's default policy."
    )
    memory_enabled = models.BooleanField(
        default=True,
        help_text=(
            "Off: messages and state are accepted but not stored, nothing is summarized or "
            "extracted, and the context is empty (seed 004: off never errors)."
        ),
    )
    summary_threshold_tokens = models.PositiveIntegerField(
        default=default_summary_threshold_tokens,
        help_text="Summarize once a session's unsummarized history passes this many tokens.",
    )
    summary_keep_recent = models.PositiveIntegerField(
        default=default_summary_keep_recent,
        help_text="The newest messages a summary leaves out (they stay verbatim in the context).",
    )
    extraction_enabled = models.BooleanField(
        default=True,
        help_text="Extract facts from conversations. Only runs when an LLM is configured.",
    )
    state_cap = models.PositiveIntegerField(
        default=default_state_cap, help_text="Keys per session state; the oldest go first."
    )
    transcript_max_messages = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=None,
        help_text=(
            "Transcript cap (seed 000): keep at most this many messages per session, the oldest "
            f"going first (seed 000 uses {TRANSCRIPT_CAP_SEED_DEFAULT}). Applied by the hourly "
            "retention run, beside retention by age. Empty or 0: no cap."
        ),
    )
    enable_user_memories = models.BooleanField(
        default=True,
        help_text=(
            "Explicit per-person memories (seed 001): off, writes are accepted but not stored "
            "and the context leaves them out. Tenant-wide memories are not affected."
        ),
    )
    enable_summarization = models.BooleanField(
        default=True,
        help_text="Summarize long conversations in the background (the threshold below).",
    )
    include_summary_on_truncation = models.BooleanField(
        default=True,
        help_text="Put the session's summary in the context when older messages were cut.",
    )
    context_max_tokens = models.PositiveIntegerField(
        default=4000, help_text="Default budget of GET /sessions/{id}/context/ (200-200,000)."
    )
    context_max_messages = models.PositiveIntegerField(default=20)
    context_max_memories = models.PositiveIntegerField(default=50)
    recall_enabled = models.BooleanField(
        default=True,
        help_text=(
            "Relevant history in the context: the person's earlier turns that match the "
            "question, from other sessions and this session's older part."
        ),
    )
    context_history_tokens = models.PositiveIntegerField(
        default=1500,
        help_text="The relevant-history section's share of the context budget, in tokens.",
    )
    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=90,
        help_text=(
            "Retention: sessions idle this many days go (with their messages, state and "
            "summaries), and older messages of live sessions. Empty keeps them forever."
        ),
    )
    daily_note_retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=30,
        help_text="Retention of daily notes, by their day (tenant policy only). Empty: forever.",
    )
    task_retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=30,
        help_text=(
            "Retention of finished plans and task contexts, by their last change (tenant policy "
            "only). Empty: forever."
        ),
    )
    # --- Redaction (issue 17; accounts.redaction): opt-in, off by default. Secrets are always
    # in when it is on; the personal-data classes are chosen one by one.
    redaction_mode = models.CharField(
        max_length=8,
        choices=RedactionMode.choices,
        default=RedactionMode.OFF,
        help_text=(
            "Secrets (API keys, tokens, passwords in URLs, private keys) and the personal data "
            "chosen below, in messages, summaries, memories, facts and notes: masked as "
            "[redacted:<kind>] or the write refused. Also masks recall of older data."
        ),
    )
    redact_email = models.BooleanField(default=False, help_text="Redact e-mail addresses.")
    redact_phone = models.BooleanField(default=False, help_text="Redact phone numbers.")
    redact_card = models.BooleanField(
        default=False, help_text="Redact payment card numbers (Luhn-checked)."
    )
    redact_iban = models.BooleanField(default=False, help_text="Redact IBANs (checksum-checked).")
    # --- end of redaction
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "agent_id"], name="memorypolicy_unique_agent"
            ),
            models.CheckConstraint(
                condition=models.Q(context_max_tokens__gte=200, context_max_tokens__lte=200_000),
                name="memorypolicy_context_tokens_range",
            ),
            models.CheckConstraint(
                condition=models.Q(summary_threshold_tokens__gte=1),
                name="memorypolicy_summary_threshold_min",
            ),
            models.CheckConstraint(
                condition=models.Q(summary_keep_recent__lte=500),
                name="memorypolicy_keep_recent_max",
            ),
            models.CheckConstraint(
                condition=models.Q(state_cap__gte=1, state_cap__lte=10_000),
                name="memorypolicy_state_cap_range",
            ),
            models.CheckConstraint(
                condition=models.Q(context_max_messages__lte=500, context_max_memories__lte=500),
                name="memorypolicy_context_counts_max",
            ),
            models.CheckConstraint(
                condition=models.Q(retention_days__isnull=True) | models.Q(retention_days__gte=1),
                name="memorypolicy_retention_days_min",
            ),
            models.CheckConstraint(
                condition=models.Q(daily_note_retention_days__isnull=True)
                | models.Q(daily_note_retention_days__gte=1),
                name="memorypolicy_note_retention_days_min",
            ),
            models.CheckConstraint(
                condition=models.Q(task_retention_days__isnull=True)
                | models.Q(task_retention_days__gte=1),
                name="memorypolicy_task_retention_days_min",
            ),
            models.CheckConstraint(
                condition=models.Q(transcript_max_messages__isnull=True)
                | models.Q(transcript_max_messages__lte=TRANSCRIPT_CAP_MAX),
                name="memorypolicy_transcript_cap_max",
            ),
        ]
        verbose_name_plural = "memory policies"

    def __str__(self) -> str:
        return f"{self.tenant} / {self.agent_id or '(default)'}"

    @property
    def redaction_classes(self) -> list[str]:
        """What redaction looks for under this policy: [] when it is off."""
        if self.redaction_mode == RedactionMode.OFF:
            return []
        chosen = [
            ("email", self.redact_email),
            ("phone", self.redact_phone),
            ("card", self.redact_card),
            ("iban", self.redact_iban),
        ]
        return ["secret", *(kind for kind, on in chosen if on)]

    @property
    def transcript_cap(self) -> int | None:
        """The transcript cap in force: None when off (empty or 0)."""
        return self.transcript_max_messages or None
