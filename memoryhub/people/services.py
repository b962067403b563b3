"""Erasure and export of one person's data, both audited."""

from __future__ import annotations

from collections import Counter
from typing import Any

from memoryhub.accounts.models import AuditAction, EndUser
from memoryhub.accounts.services import audit_event_record, audited_delete
from memoryhub.people.export import user_export_document


def end_user_erase(*, end_user: EndUser, actor_type: str, actor: str) -> dict[str, int]:
    """Delete the person and everything that hangs off them, in one transaction.

    Every table that references a person does so with ON DELETE CASCADE (sessions -> messages,
    state, summaries; memories -> versions; facts; notes; stored idempotent responses), so
    Django's collector finds all of it and counts it per kind. The SQLite FTS rows go with
    their facts and messages through the delete triggers; on PostgreSQL the indexes follow.
    """
    return audited_delete(
        obj=end_user,
        tenant=end_user.tenant,
        actor_type=actor_type,
        actor=actor,
        action=AuditAction.ERASE,
        object_type="end_user",
        object_id=end_user.external_id,
    )


def end_user_export(*, end_user: EndUser, actor_type: str, actor: str) -> dict[str, Any]:
    document = user_export_document(end_user=end_user)
    audit_event_record(
        tenant=end_user.tenant,
        actor_type=actor_type,
        actor=actor,
        action=AuditAction.EXPORT,
        object_type="end_user",
        object_id=end_user.external_id,
        counts=dict(Counter(record["type"] for record in document["records"])),
    )
    return document
