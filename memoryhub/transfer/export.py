"""MemoryHub's own export: JSON Lines, one record per object, a header first.

    {"type": "header", "format": "memoryhub.export", "schema_version": 1, "tenant": ..., ...}
    {"type": "memory_policy", ...}        tenant exports only: the tenant's settings
    {"type": "end_user", ...}
    {"type": "session", "id": ...}         then that session's records, in this order:
    {"type": "state", "session_id": ...}   oldest first (the order FIFO eviction follows)
    {"type": "summary", "session_id": ...}
    {"type": "message", "session_id": ...} in seq order; last, so a reader can stream them
    {"type": "memory", ...}                with its earlier versions inside
    {"type": "fact", ...}                  provenance as the source session id and message seqs
    {"type": "note", ...}                  one record per note, its versions inside
    {"type": "plan", ...}                  by plan_id, with its person and session
    {"type": "task_context", ...}          by task_id, its sub-task ids inside

`manage.py export_memory` writes these lines; `GET /users/{id}/export/` returns the same records
for one person in one JSON document; `manage.py import_memory` reads both back. Every query
streams (`iterator()`), and the per-session records come from merging ordered streams, so an
export's memory does not grow with the tenant.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from facts_app.models import Fact, Note, UserMemory, UserMemoryVersion
from memoryhub.accounts.models import EndUser, MemoryPolicy, Tenant
from sessions_app.models import Message, Plan, Session, StateEntry, SubTask, Summary, TaskContext

EXPORT_FORMAT = "memoryhub.export"
EXPORT_SCHEMA_VERSION = 1
CHUNK = 2000

MEMORY_POLICY_FIELDS = (
    "agent_id",
    "memory_enabled",
    "summary_threshold_tokens",
    "summary_keep_recent",
    "extraction_enabled",
    "state_cap",
    "context_max_tokens",
    "context_max_messages",
    "context_max_memories",
    "retention_days",
    "daily_note_retention_days",
    "task_retention_days",
    "recall_enabled",
    "context_history_tokens",
)


def iso(value: dt.datetime | dt.date | None) -> str | None:
    return value.isoformat() if value is not None else None


def _by_session(queryset: QuerySet[Any], order: str) -> Iterator[Any]:
    return queryset.order_by("session_id", order).iterator(chunk_size=CHUNK)


class _Merged:
    """Child rows ordered by their parent's id, handed out parent by parent, while the parents
    are read in the same order: a merge join of two streams, one query each."""

    def __init__(self, rows: Iterator[Any], *, parent: str = "session_id") -> None:
        self._rows = rows
        self._parent = parent
        self._next: Any = next(rows, None)

    def _parent_of(self, row: Any) -> Any:
        return getattr(row, self._parent)

    def take(self, parent_id: Any) -> Iterator[Any]:
        # Both databases order UUIDs (and integers) as Python compares them; a child whose
        # parent was not read (none, with the same filter) is passed over.
        while self._next is not None and self._parent_of(self._next) < parent_id:
            self._next = next(self._rows, None)
        while self._next is not None and self._parent_of(self._next) == parent_id:
            yield self._next
            self._next = next(self._rows, None)


def export_records(*, tenant: Tenant, end_user: EndUser | None = None) -> Iterator[dict[str, Any]]:
    """Every record of the tenant, or of one person (without the tenant's settings and
    tenant-wide memories), header first."""
    yield {
        "type": "header",
        "format": EXPORT_FORMAT,
        "schema_version": EXPORT_SCHEMA_VERSION,
        "tenant": tenant.slug,
        "user_id": end_user.external_id if end_user else None,
        "exported_at": timezone.now().isoformat(),
    }
    if end_user is None:
        for policy in MemoryPolicy.objects.filter(tenant=tenant).order_by("agent_id"):
            yield {"type": "memory_policy", **{f: getattr(policy, f) for f in MEMORY_POLICY_FIELDS}}
    people = EndUser.objects.filter(tenant=tenant)
    if end_user is not None:
        people = people.filter(pk=end_user.pk)
    for person in people.order_by("external_id").iterator(chunk_size=CHUNK):
        yield {
            "type": "end_user",
            "user_id": person.external_id,
            "display_name": person.display_name,
            "metadata": person.metadata,
            "created_at": iso(person.created_at),
        }
    yield from _session_records(tenant=tenant, end_user=end_user)
    yield from _memory_records(tenant=tenant, end_user=end_user)
    yield from _fact_records(tenant=tenant, end_user=end_user)
    yield from _note_records(tenant=tenant, end_user=end_user)
    yield from _plan_records(tenant=tenant, end_user=end_user)
    yield from _task_context_records(tenant=tenant, end_user=end_user)


def _session_records(*, tenant: Tenant, end_user: EndUser | None) -> Iterator[dict[str, Any]]:
    sessions = Session.objects.filter(tenant=tenant).select_related("end_user")
    scope: dict[str, Any] = {"tenant": tenant}
    if end_user is not None:
        sessions = sessions.filter(end_user=end_user)
        scope["session__end_user"] = end_user
    states = _Merged(_by_session(StateEntry.objects.filter(**scope), "position"))
    summaries = _Merged(_by_session(Summary.objects.filter(**scope), "through_seq"))
    messages = _Merged(_by_session(Message.objects.filter(**scope), "seq"))
    for session in sessions.order_by("pk").iterator(chunk_size=CHUNK):
        yield {
            "type": "session",
            "id": str(session.pk),
            "user_id": session.end_user.external_id if session.end_user else None,
            "agent_id": session.agent_id,
            "external_key": session.external_key,
            "metadata": session.metadata,
            "created_at": iso(session.created_at),
            "last_active_at": iso(session.last_active_at),
            # Exempt from retention, and its own state cap (imported history, see transfer).
            "pinned": session.pinned,
            "state_cap": session.state_cap,
        }
        for entry in states.take(session.pk):
            yield {
                "type": "state",
                "session_id": str(session.pk),
                "key": entry.key,
                "value": entry.value,
                "updated_at": iso(entry.updated_at),
            }
        for summary in summaries.take(session.pk):
            yield {
                "type": "summary",
                "session_id": str(session.pk),
                "through_seq": summary.through_seq,
                "text": summary.text,
                "model": summary.model,
                "created_at": iso(summary.created_at),
            }
        for message in messages.take(session.pk):
            yield {
                "type": "message",
                "session_id": str(session.pk),
                "seq": message.seq,
                "role": message.role,
                "content": message.content,
                "name": message.name,
                "tool_call_id": message.tool_call_id,
                "tool_calls": message.tool_calls,
                "metadata": message.metadata,
                "token_count": message.token_count,
                "created_at": iso(message.created_at),
            }


def _memory_records(*, tenant: Tenant, end_user: EndUser | None) -> Iterator[dict[str, Any]]:
    memories = UserMemory.objects.filter(tenant=tenant).select_related("end_user")
    if end_user is not None:
        memories = memories.filter(end_user=end_user)
    versions = UserMemoryVersion.objects.filter(tenant=tenant)
    if end_user is not None:
        versions = versions.filter(memory__end_user=end_user)
    versions_of = _Merged(
        versions.order_by("memory_id", "version").iterator(chunk_size=CHUNK), parent="memory_id"
    )
    for memory in memories.order_by("pk").iterator(chunk_size=CHUNK):
        yield {
            "type": "memory",
            "id": memory.pk,
            "user_id": memory.end_user.external_id if memory.end_user else None,
            "key": memory.key,
            "content": memory.content,
            "pinned": memory.pinned,
            "expires_at": iso(memory.expires_at),
            "source_session_id": str(memory.source_session_id)
            if memory.source_session_id
            else None,
            "version": memory.version,
            "created_at": iso(memory.created_at),
            "updated_at": iso(memory.updated_at),
            "versions": [
                {
                    "version": version.version,
                    "content": version.content,
                    "created_at": iso(version.created_at),
                }
                for version in versions_of.take(memory.pk)
            ],
        }


def _fact_records(*, tenant: Tenant, end_user: EndUser | None) -> Iterator[dict[str, Any]]:
    facts = Fact.objects.filter(tenant=tenant).select_related("end_user")
    if end_user is not None:
        facts = facts.filter(end_user=end_user)
    rows = facts.order_by("pk").iterator(chunk_size=CHUNK)
    while chunk := list(itertools.islice(rows, CHUNK)):
        # Provenance is kept as message seqs (ids do not survive an import): one query a chunk.
        message_ids = {pk for fact in chunk for pk in fact.source_message_ids}
        seq_of = dict(
            Message.objects.filter(tenant=tenant, pk__in=message_ids).values_list("pk", "seq")
        )
        for fact in chunk:
            yield {
                "type": "fact",
                "id": fact.pk,
                "external_id": fact.external_id,
                "user_id": fact.end_user.external_id if fact.end_user else None,
                "content": fact.content,
                "tags": fact.tags,
                "metadata": fact.metadata,
                "source_session_id": (
                    str(fact.source_session_id) if fact.source_session_id else None
                ),
                "source_message_seqs": sorted(
                    seq_of[pk] for pk in fact.source_message_ids if pk in seq_of
                ),
                "created_at": iso(fact.created_at),
                "valid_until": iso(fact.valid_until),
                "superseded_by": fact.superseded_by_id,
            }


def _note_records(*, tenant: Tenant, end_user: EndUser | None) -> Iterator[dict[str, Any]]:
    notes = Note.objects.filter(tenant=tenant).select_related("end_user")
    if end_user is not None:
        notes = notes.filter(end_user=end_user)
    current: dict[str, Any] | None = None
    for note in notes.order_by("end_user__external_id", "kind", "day", "version").iterator(
        chunk_size=CHUNK
    ):
        identity = (note.end_user.external_id, note.kind, iso(note.day))
        if current is None or current["_identity"] != identity:
            if current is not None:
                yield _note_record(current)
            current = {
                "_identity": identity,
                "type": "note",
                "user_id": note.end_user.external_id,
                "kind": note.kind,
                "day": iso(note.day),
                "versions": [],
            }
        current["versions"].append({"content": note.content, "created_at": iso(note.created_at)})
    if current is not None:
        yield _note_record(current)


def _note_record(current: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in current.items() if key != "_identity"}


def _plan_records(*, tenant: Tenant, end_user: EndUser | None) -> Iterator[dict[str, Any]]:
    plans = Plan.objects.filter(tenant=tenant).select_related("end_user")
    if end_user is not None:
        plans = plans.filter(end_user=end_user)
    for plan in plans.order_by("pk").iterator(chunk_size=CHUNK):
        yield {
            "type": "plan",
            "plan_id": plan.plan_id,
            "user_id": plan.end_user.external_id,
            "session_id": str(plan.session_id) if plan.session_id else None,
            "goal_event": plan.goal_event,
            "goal_data": plan.goal_data,
            "status": plan.status,
            "state": plan.state,
            "created_at": iso(plan.created_at),
            "updated_at": iso(plan.updated_at),
        }


def _task_context_records(*, tenant: Tenant, end_user: EndUser | None) -> Iterator[dict[str, Any]]:
    tasks = TaskContext.objects.filter(tenant=tenant).select_related("plan")
    sub_tasks = SubTask.objects.filter(tenant=tenant)
    if end_user is not None:
        # A person's work: tasks of their plans or of their sessions.
        mine = Q(plan__end_user=end_user) | Q(session__end_user=end_user)
        tasks = tasks.filter(mine)
        sub_tasks = sub_tasks.filter(task__in=tasks.values("pk"))
    ids_of = _Merged(
        sub_tasks.order_by("task_id", "pk").iterator(chunk_size=CHUNK), parent="task_id"
    )
    for task in tasks.order_by("pk").iterator(chunk_size=CHUNK):
        yield {
            "type": "task_context",
            "task_id": task.task_id,
            "plan_id": task.plan.plan_id if task.plan else None,
            "session_id": str(task.session_id) if task.session_id else None,
            "event_type": task.event_type,
            "response_event": task.response_event,
            "response_topic": task.response_topic,
            "data": task.data,
            "state": task.state,
            "sub_tasks": [sub_task.subtask_id for sub_task in ids_of.take(task.pk)],
            "created_at": iso(task.created_at),
            "updated_at": iso(task.updated_at),
        }
