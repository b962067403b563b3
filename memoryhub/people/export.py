"""One person's memory as one JSON document (`GET /users/{id}/export/`).

Like memoryhub.context, this module reads both apps. The document is versioned
(`schema_version`) so a later importer can read it back; ids are kept as they are, so an import
into another tenant can remap them consistently (sessions by id, facts by id).
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from facts_app.models import Fact, Note, UserMemory, UserMemoryVersion
from memoryhub.accounts.models import EndUser
from sessions_app.models import Message, Session, StateEntry, Summary

EXPORT_FORMAT = "memoryhub.user-export"
EXPORT_SCHEMA_VERSION = 1


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def user_export_document(*, end_user: EndUser) -> dict[str, Any]:
    """Everything MemoryHub keeps about one person. Queries are per kind, not per row."""
    tenant_id = end_user.tenant_id
    sessions = list(
        Session.objects.filter(tenant_id=tenant_id, end_user=end_user).order_by("created_at")
    )
    session_ids = [session.pk for session in sessions]
    messages_by_session: dict[Any, list[dict[str, Any]]] = {pk: [] for pk in session_ids}
    for message in Message.objects.filter(tenant_id=tenant_id, session_id__in=session_ids).order_by(
        "session_id", "seq"
    ):
        messages_by_session[message.session_id].append(
            {
                "seq": message.seq,
                "role": message.role,
                "content": message.content,
                "name": message.name,
                "tool_call_id": message.tool_call_id,
                "tool_calls": message.tool_calls,
                "metadata": message.metadata,
                "token_count": message.token_count,
                "created_at": _iso(message.created_at),
            }
        )
    state_by_session: dict[Any, list[dict[str, Any]]] = {pk: [] for pk in session_ids}
    for entry in StateEntry.objects.filter(
        tenant_id=tenant_id, session_id__in=session_ids
    ).order_by("session_id", "position"):
        state_by_session[entry.session_id].append(
            {"key": entry.key, "value": entry.value, "updated_at": _iso(entry.updated_at)}
        )
    summaries_by_session: dict[Any, list[dict[str, Any]]] = {pk: [] for pk in session_ids}
    for summary in Summary.objects.filter(tenant_id=tenant_id, session_id__in=session_ids).order_by(
        "session_id", "through_seq"
    ):
        summaries_by_session[summary.session_id].append(
            {
                "text": summary.text,
                "through_seq": summary.through_seq,
                "token_count": summary.token_count,
                "model": summary.model,
                "created_at": _iso(summary.created_at),
            }
        )
    memories = list(
        UserMemory.objects.filter(tenant_id=tenant_id, end_user=end_user).order_by("key")
    )
    versions_by_memory: dict[int, list[dict[str, Any]]] = {memory.pk: [] for memory in memories}
    for version in UserMemoryVersion.objects.filter(
        tenant_id=tenant_id, memory__in=memories
    ).order_by("memory_id", "version"):
        versions_by_memory[version.memory_id].append(
            {
                "version": version.version,
                "content": version.content,
                "source_session_id": str(version.source_session_id or "") or None,
                "created_at": _iso(version.created_at),
            }
        )
    return {
        "format": EXPORT_FORMAT,
        "schema_version": EXPORT_SCHEMA_VERSION,
        "exported_at": timezone.now().isoformat(),
        "tenant": end_user.tenant.slug,
        "user": {
            "user_id": end_user.external_id,
            "display_name": end_user.display_name,
            "metadata": end_user.metadata,
            "created_at": _iso(end_user.created_at),
        },
        "sessions": [
            {
                "id": str(session.pk),
                "agent_id": session.agent_id,
                "external_key": session.external_key,
                "metadata": session.metadata,
                "created_at": _iso(session.created_at),
                "last_active_at": _iso(session.last_active_at),
                "messages": messages_by_session[session.pk],
                "state": state_by_session[session.pk],
                "summaries": summaries_by_session[session.pk],
            }
            for session in sessions
        ],
        "memories": [
            {
                "key": memory.key,
                "content": memory.content,
                "pinned": memory.pinned,
                "expires_at": _iso(memory.expires_at),
                "source_session_id": str(memory.source_session_id or "") or None,
                "version": memory.version,
                "created_at": _iso(memory.created_at),
                "updated_at": _iso(memory.updated_at),
                "versions": versions_by_memory[memory.pk],
            }
            for memory in memories
        ],
        "facts": [
            {
                "id": fact.pk,
                "content": fact.content,
                "tags": fact.tags,
                "metadata": fact.metadata,
                "source_session_id": str(fact.source_session_id or "") or None,
                "source_message_ids": fact.source_message_ids,
                "created_at": _iso(fact.created_at),
                "updated_at": _iso(fact.updated_at),
                "valid_until": _iso(fact.valid_until),
                "superseded_by": fact.superseded_by_id,
            }
            for fact in Fact.objects.filter(tenant_id=tenant_id, end_user=end_user).order_by("id")
        ],
        "notes": [
            {
                "kind": note.kind,
                "day": _iso(note.day),
                "version": note.version,
                "content": note.content,
                "created_at": _iso(note.created_at),
            }
            for note in Note.objects.filter(tenant_id=tenant_id, end_user=end_user).order_by(
                "kind", "day", "version"
            )
        ],
    }
