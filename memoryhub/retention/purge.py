"""Purges on demand (`POST /api/v1/purge/`): a session, a person, or everything older than N
days — each with a dry run that counts exactly what the purge would remove, and one audit event.

What a purge removes and what survives it:
- scope "session": the session with its messages, state, summaries, plans and task contexts
  (sessions_app.services.session_delete, as DELETE /sessions/{id}/ does). Facts extracted from it
  survive (they are the person's, with the session id kept as provenance); purge the person, or
  DELETE /facts/{id}/, to remove them.
- scope "user": the person and everything kept about them (sessions, messages, state, summaries,
  memories and their versions, facts, notes, stored idempotent responses) — the erasure of
  DELETE /users/{id}/, by the same service, so its audit event is the same `erase`.
- scope "older_than": conversation history older than N days, exactly as retention with that
  age would take it (sessions idle that long, older messages, replaced summaries), for the
  tenant or one person. A live session's current summary stays: it is what the session still
  knows of its removed messages. Facts, memories and notes are not history and stay.
Search-index rows follow their rows (PostgreSQL indexes; the SQLite FTS delete triggers). The
stored idempotent responses of what a purge removes go too (the person's with them; a session's,
and those of messages a purge by age took, blanked: a replay answers 410, accounts.idempotency).
Every purge completes while the bot is still writing (the lock order of the services it runs).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from memoryhub.accounts.models import Actor, AuditAction, Tenant
from memoryhub.accounts.selectors import end_user_get_for_tenant
from memoryhub.accounts.services import audit_event_record, deletion_counts, end_user_erase
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.locks import DELETE_RERUN_SQLSTATES, run_rerunning
from sessions_app.models import Session
from sessions_app.prune import ConversationScope, conversations_prune
from sessions_app.services import session_delete


def _session_for(*, tenant: Tenant, session_id: uuid.UUID) -> Session:
    session = Session.objects.for_tenant(tenant).filter(pk=session_id).first()
    if session is None:
        raise ResourceNotFound("No such session.")
    return session


def purge_session(
    *, tenant: Tenant, session_id: uuid.UUID, dry_run: bool, actor: Actor
) -> dict[str, int]:
    session = _session_for(tenant=tenant, session_id=session_id)
    if dry_run:
        return deletion_counts(obj=session)
    return session_delete(session=session, actor=actor, action=AuditAction.PURGE)


def purge_user(*, tenant: Tenant, user_id: str, dry_run: bool, actor: Actor) -> dict[str, int]:
    end_user = end_user_get_for_tenant(tenant=tenant, external_id=user_id)
    if dry_run:
        return deletion_counts(obj=end_user)
    return end_user_erase(end_user=end_user, actor=actor)


def purge_older_than(
    *,
    tenant: Tenant,
    days: int,
    user_id: str | None,
    dry_run: bool,
    actor: Actor,
    now: dt.datetime | None = None,
) -> dict[str, int]:
    end_user = end_user_get_for_tenant(tenant=tenant, external_id=user_id) if user_id else None
    cutoff = (now or timezone.now()) - dt.timedelta(days=days)
    scope = ConversationScope(tenant=tenant, cutoff=cutoff, end_user=end_user)

    def purge() -> dict[str, int]:
        # One transaction: a purge asked for at once is all or nothing, unlike retention's
        # batches (which may stop and resume); its size is the caller's choice. Its locks are
        # retention's (sessions_app.prune); a deadlock with a writer is run again, whole.
        with transaction.atomic():
            counts = conversations_prune(scope=scope, dry_run=dry_run)
            result = {kind: count for kind, count in sorted(counts.items()) if count}
            if not dry_run:
                detail: dict[str, Any] = {"days": days, "cutoff": cutoff.isoformat()}
                if user_id:
                    detail["user_id"] = user_id
                audit_event_record(
                    tenant=tenant,
                    actor=actor,
                    action=AuditAction.PURGE,
                    object_type="older_than",
                    object_id=user_id or "",
                    counts=result,
                    detail=detail,
                )
        return result

    return run_rerunning(purge, sqlstates=DELETE_RERUN_SQLSTATES)
