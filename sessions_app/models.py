"""Episodic and working memory: sessions, their messages and their key/value state."""

from __future__ import annotations

import hashlib
import uuid
from typing import ClassVar

from django.db import models
from uuid6 import uuid7

from memoryhub.accounts.models import EndUser, TenantOwnedModel

AGENT_ID_MAX_LENGTH = 128
EXTERNAL_KEY_MAX_LENGTH = 255
STATE_KEY_MAX_LENGTH = 255


def new_session_id() -> uuid.UUID:
    # UUIDv7 is time-ordered, so new sessions land at the end of the primary-key index.
    return uuid.UUID(int=uuid7().int)


class Session(TenantOwnedModel):
    id = models.UUIDField(primary_key=True, default=new_session_id, editable=False)
    end_user = models.ForeignKey(
        "accounts.EndUser",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="sessions",
    )
    agent_id = models.CharField(max_length=AGENT_ID_MAX_LENGTH, blank=True, default="")
    # NULL, not "", for "no key": the unique constraint must ignore sessions without one.
    external_key = models.CharField(  # noqa: DJ001
        max_length=EXTERNAL_KEY_MAX_LENGTH,
        null=True,
        blank=True,
        help_text="The bot's stable `channel:chat:thread` key; survives session id rotation.",
    )
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_active_at = models.DateTimeField(db_index=False)
    message_count = models.PositiveIntegerField(default=0)
    token_count = models.PositiveBigIntegerField(default=0)
    # The last seq handed out: the next append takes last_seq + 1 while holding this row's lock,
    # which keeps seqs gapless even after old messages are purged.
    last_seq = models.PositiveBigIntegerField(default=0)
    # Orders state entries for FIFO eviction; bumped under the same row lock.
    state_clock = models.PositiveBigIntegerField(default=0)
    # Tokens of the messages the current summary covers: token_count - summarized_tokens is the
    # unsummarized history, known to an append without summing over messages.
    summarized_tokens = models.PositiveBigIntegerField(default=0)
    # The last seq the current summary covers (its through_seq; 0 with none). A summary is only
    # due when something beyond the kept-recent messages is left to fold: without this, recent
    # messages that alone exceed the threshold would request summaries that fold nothing.
    summarized_seq = models.PositiveBigIntegerField(default=0)
    # Set when a summarization task is enqueued, cleared when it finishes: one pending task per
    # session. The beat sweep re-enqueues when it stays set for too long (a lost task).
    summary_requested_at = models.DateTimeField(null=True, blank=True)
    # Fact extraction's cursor: messages up to this seq have been read for facts. Advanced in
    # the transaction that stores the facts, so a redelivered task finds nothing left to do.
    extracted_seq = models.PositiveBigIntegerField(default=0)
    # One pending extraction task per session, as summary_requested_at is for summaries.
    extraction_requested_at = models.DateTimeField(null=True, blank=True)
    # One pending embedding task per session: set by the append's own UPDATE, cleared by the
    # task once every message has its vector.
    embedding_requested_at = models.DateTimeField(null=True, blank=True)
    # Imported history would otherwise meet the tenant's age-based retention the hour it lands;
    # an import can exempt what it brings in (memoryhub.transfer.retention), as a pinned memory is.
    pinned = models.BooleanField(
        default=False,
        help_text="Retention never removes a pinned session, nor its messages or summaries.",
    )
    # A store that held more keys than the policy's cap (basic-session's kv.json `cap`) keeps its
    # own, so the next new key does not evict what the import just brought in.
    state_cap = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Keys this session's state keeps; empty: the memory policy's state cap.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "external_key"],
                condition=models.Q(external_key__isnull=False),
                name="session_unique_tenant_external_key",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "-last_active_at", "-id"], name="session_tenant_active"),
            models.Index(
                fields=["tenant", "end_user", "-last_active_at"], name="session_user_active"
            ),
            models.Index(
                fields=["tenant", "agent_id", "-last_active_at"], name="session_agent_active"
            ),
            # The few sessions with a run requested, out of all: what the metrics' backlog
            # gauges and the beat sweeps (stale requests) look for, without scanning the rest.
            *(
                models.Index(
                    fields=[f"{kind}_requested_at"],
                    condition=models.Q(**{f"{kind}_requested_at__isnull": False}),
                    name=f"session_{kind}_requested",
                )
                for kind in ("summary", "extraction", "embedding")
            ),
        ]

    def __str__(self) -> str:
        return str(self.id)


class MessageRole(models.TextChoices):
    SYSTEM = "system", "System"
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"
    TOOL = "tool", "Tool"


class Message(TenantOwnedModel):
    # Unindexed alone: message_unique_session_seq leads with it (each append inserts into
    # every index of this table).
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    seq = models.PositiveBigIntegerField()
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    content = models.TextField(blank=True, default="")
    name = models.CharField(max_length=128, blank=True, default="")
    tool_call_id = models.CharField(max_length=128, blank=True, default="")
    tool_calls = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    token_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="message_unique_session_seq"),
            models.CheckConstraint(
                condition=models.Q(role__in=MessageRole.values), name="message_role_valid"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "created_at"], name="message_tenant_created")]
        ordering = ("session", "seq")

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.role}"


# What a hand-written INSERT of messages (an append's, an import's) lists, in its order: every
# concrete field but the id.
MESSAGE_INSERT_FIELDS = (
    "tenant",
    "session",
    "seq",
    "role",
    "content",
    "name",
    "tool_call_id",
    "tool_calls",
    "metadata",
    "token_count",
    "created_at",
)
_MESSAGE_COLUMN_OF = {field.name: field.column for field in Message._meta.concrete_fields}
MESSAGE_INSERT_COLUMNS: tuple[str, ...] = tuple(
    str(_MESSAGE_COLUMN_OF[name]) for name in MESSAGE_INSERT_FIELDS
)


class StateEntry(TenantOwnedModel):
    """One key of a session's working state; `working_memory` is a key like any other."""

    # Unindexed alone: state_unique_session_key leads with it.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="state_entries", db_index=False
    )
    key = models.CharField(max_length=STATE_KEY_MAX_LENGTH)
    value = models.JSONField(null=True)
    position = models.PositiveBigIntegerField(help_text="FIFO order: the lowest is evicted first")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "key"], name="state_unique_session_key"),
        ]
        indexes = [
            models.Index(fields=["session", "position"], name="state_session_position"),
            models.Index(fields=["tenant"], name="state_tenant"),
        ]
        ordering = ("session", "position")
        verbose_name_plural = "state entries"

    def __str__(self) -> str:
        return f"{self.session_id}:{self.key}"


SUMMARY_MODEL_MAX_LENGTH = 200


class Summary(TenantOwnedModel):
    """One incremental summary of a session's older messages; the highest through_seq is current.

    Unique on (session, through_seq): two workers folding the same range write one row.
    """

    OFFLINE_MODEL = "offline"
    MANUAL_MODEL = "manual"

    # Unindexed alone: summary_unique_session_through_seq leads with it.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="summaries", db_index=False
    )
    text = models.TextField(blank=True, default="")
    through_seq = models.PositiveBigIntegerField(help_text="The last message seq it covers.")
    token_count = models.PositiveIntegerField(default=0)
    model = models.CharField(
        max_length=SUMMARY_MODEL_MAX_LENGTH,
        help_text='The LLM that wrote it, "offline" (extractive fallback) or "manual" (PUT).',
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "through_seq"], name="summary_unique_session_through_seq"
            ),
        ]
        indexes = [models.Index(fields=["tenant"], name="summary_tenant")]
        ordering = ("session", "-through_seq")
        verbose_name_plural = "summaries"

    def __str__(self) -> str:
        return f"{self.session_id} through #{self.through_seq}"


# --- working state of asynchronous agents (seed 002): plans and task contexts -------------------

WORK_ID_MAX_LENGTH = 255
EVENT_NAME_MAX_LENGTH = 255
RESPONSE_TOPIC_MAX_LENGTH = 255
DEFAULT_RESPONSE_TOPIC = "action-results"


def work_etag(*, kind: str, pk: int, version: int) -> str:
    """A strong ETag for one version of a plan or task context: a hash of its primary key and
    version. Opaque, and new for a row deleted and created again under the same id, so an ETag
    read before the delete never matches the new row. (See sessions_app.preconditions.)"""
    digest = hashlib.sha256(f"{kind}:{pk}:{version}".encode()).hexdigest()[:24]
    return f'"{digest}"'


class PlanStatus(models.TextChoices):
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


# A finished plan stays finished: a retry is a new plan, so a late event for the old one cannot
# bring it back to life. Writing a status the plan already has is always allowed (a retry).
PLAN_STATUS_TRANSITIONS: dict[str, frozenset[str]] = {
    PlanStatus.RUNNING: frozenset(
        {PlanStatus.RUNNING, PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED}
    ),
    PlanStatus.COMPLETED: frozenset({PlanStatus.COMPLETED}),
    PlanStatus.FAILED: frozenset({PlanStatus.FAILED}),
    PlanStatus.CANCELLED: frozenset({PlanStatus.CANCELLED}),
}
FINISHED_PLAN_STATUSES = frozenset({PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED})


class Plan(TenantOwnedModel):
    """A planner's state machine for one goal, kept between the events that drive it.

    `version` is bumped by every write; it is the ETag, so a planner that read version 4 cannot
    overwrite version 5 unknowingly (If-Match → 412).
    """

    plan_id = models.CharField(max_length=WORK_ID_MAX_LENGTH)
    end_user = models.ForeignKey("accounts.EndUser", on_delete=models.CASCADE, related_name="plans")
    # A plan worked on in a conversation is part of it: it goes with the session (purge,
    # retention, erasure), as its messages and state do.
    session = models.ForeignKey(
        Session, null=True, blank=True, on_delete=models.CASCADE, related_name="plans"
    )
    goal_event = models.CharField(max_length=EVENT_NAME_MAX_LENGTH)
    goal_data = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=PlanStatus.choices, default=PlanStatus.RUNNING)
    state = models.JSONField(default=dict, blank=True)
    version = models.PositiveBigIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "plan_id"], name="plan_unique_tenant_plan_id"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=PlanStatus.values), name="plan_status_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "-created_at", "-id"], name="plan_tenant_created"),
            models.Index(
                fields=["tenant", "status", "-created_at", "-id"], name="plan_tenant_status"
            ),
            models.Index(fields=["tenant", "end_user", "status"], name="plan_user_status"),
            # Retention: finished plans by their last change.
            models.Index(fields=["tenant", "status", "updated_at"], name="plan_status_updated"),
        ]

    def __str__(self) -> str:
        return self.plan_id

    @property
    def etag(self) -> str:
        return work_etag(kind="plan", pk=self.pk, version=self.version)


class TaskContext(TenantOwnedModel):
    """What a worker parks while sub-agents work for it, found again by task or sub-task id.

    Its sub-tasks are rows (SubTask), not a JSON list: finding the parent of a sub-task is one
    probe of a unique index on both databases, and two result handlers each removing their own
    sub-task change different rows instead of rewriting one list.
    """

    task_id = models.CharField(max_length=WORK_ID_MAX_LENGTH)
    # The task is part of its plan and of its session: it goes with either.
    plan = models.ForeignKey(
        Plan, null=True, blank=True, on_delete=models.CASCADE, related_name="task_contexts"
    )
    session = models.ForeignKey(
        Session, null=True, blank=True, on_delete=models.CASCADE, related_name="task_contexts"
    )
    event_type = models.CharField(max_length=EVENT_NAME_MAX_LENGTH)
    response_event = models.CharField(max_length=EVENT_NAME_MAX_LENGTH, blank=True, default="")
    response_topic = models.CharField(
        max_length=RESPONSE_TOPIC_MAX_LENGTH, default=DEFAULT_RESPONSE_TOPIC
    )
    data = models.JSONField(default=dict, blank=True)
    state = models.JSONField(default=dict, blank=True)
    version = models.PositiveBigIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "task_id"], name="taskcontext_unique_tenant_task_id"
            ),
        ]
        indexes = [
            models.Index(
                fields=["tenant", "-created_at", "-id"], name="taskcontext_tenant_created"
            ),
            # Retention: task contexts by their last change.
            models.Index(fields=["tenant", "updated_at"], name="taskcontext_tenant_updated"),
        ]

    def __str__(self) -> str:
        return self.task_id

    @property
    def etag(self) -> str:
        return work_etag(kind="task", pk=self.pk, version=self.version)


class SubTask(TenantOwnedModel):
    """One delegated sub-task a task context waits for. A sub-task id belongs to one task at a
    time in a tenant: its unique index is also the by-sub-task lookup."""

    task = models.ForeignKey(TaskContext, on_delete=models.CASCADE, related_name="sub_tasks")
    subtask_id = models.CharField(max_length=WORK_ID_MAX_LENGTH)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "subtask_id"], name="subtask_unique_tenant_subtask_id"
            ),
        ]
        # Insertion order: the order the worker delegated them in.
        ordering = ("task", "id")

    def __str__(self) -> str:
        return self.subtask_id


class MessageVector(TenantOwnedModel):
    """A message's embedding, computed by a worker after the append (never on its path).

    `model` names the embedder that made it: a vector of another model counts as missing, so a
    model change re-embeds. `end_user` repeats the session's person so that loading one
    person's vectors is one index range.
    """

    # Recomputable from its message: not a kind of its own in deletion counts (accounts).
    derived_data: ClassVar[bool] = True

    message = models.OneToOneField(
        Message, on_delete=models.CASCADE, primary_key=True, related_name="vector"
    )
    end_user = models.ForeignKey(
        "accounts.EndUser", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    model = models.CharField(max_length=100)
    vector = models.BinaryField(help_text="float32, little-endian, L2-normalised")
    created_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "end_user"], name="messagevector_person")]

    def __str__(self) -> str:
        return f"{self.message_id} {self.model}"


# The conversation tables' columns the planner picks their indexes by (tenant, session, person):
# what memoryhub.core.statistics.keys_analyze brings up to date, hourly (sessions_app.tasks) and
# after a large import (transfer.sink, with the tables an import fills besides).
CONVERSATION_KEYS: dict[type[models.Model], tuple[str, ...]] = {
    Message: ("tenant", "session"),
    Session: ("tenant", "end_user"),
    MessageVector: ("tenant", "end_user"),
    EndUser: ("tenant",),
}
