"""Reads of conversation memory that are more than a `get`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db.models import F, QuerySet

from memoryhub.accounts.models import Tenant
from memoryhub.core.exceptions import ResourceNotFound
from memoryhub.core.search import FullTextRanker, Ranker
from sessions_app.models import Message, Session, StateEntry, Summary


def session_list_for_tenant(*, tenant: Tenant) -> QuerySet[Session]:
    """The tenant's sessions with their end users; the API narrows it with SessionFilter."""
    return Session.objects.for_tenant(tenant).select_related("end_user")


def _session_pk(session_id: str | uuid.UUID) -> uuid.UUID:
    # A malformed id, a missing one and another tenant's all get the same answer.
    if isinstance(session_id, uuid.UUID):
        return session_id
    try:
        return uuid.UUID(session_id)
    except ValueError:
        raise ResourceNotFound("No such session.") from None


def session_owner_id(*, tenant: Tenant, session_id: uuid.UUID) -> int | None:
    """The end user a session belongs to (None for a session without one)."""
    return (
        Session.objects.for_tenant(tenant)
        .filter(pk=session_id)
        .values_list("end_user_id", flat=True)
        .first()
    )


def _session_or_404(sessions: QuerySet[Session], session_id: str | uuid.UUID) -> Session:
    found = list(sessions.filter(pk=_session_pk(session_id))[:1])
    if not found:
        raise ResourceNotFound("No such session.")
    return found[0]


def session_get_for_tenant(*, tenant: Tenant, session_id: str | uuid.UUID) -> Session:
    """The tenant's session with its end user, or ResourceNotFound."""
    return _session_or_404(
        Session.objects.for_tenant(tenant).select_related("end_user"), session_id
    )


@dataclass(frozen=True)
class MessagePage:
    messages: list[Message]
    has_more: bool
    last_seq: int


def message_page_for_tenant(
    *,
    tenant: Tenant,
    session_id: str | uuid.UUID,
    last: int | None = None,
    after_seq: int | None = None,
    limit: int = 50,
) -> MessagePage:
    """The last `last` messages, or up to `limit` after `after_seq`, in seq order.

    `has_more` says whether older messages exist (with `last`) or newer ones follow (with
    `after_seq`). This read comes before nearly every model call a bot makes, so it is one
    query: the rows carry their session's last_seq through a join. Only an empty page needs a
    second query, to tell an empty session from a missing (or foreign) one.
    """
    pk = _session_pk(session_id)
    rows = Message.objects.filter(tenant=tenant, session_id=pk).annotate(
        session_last_seq=F("session__last_seq")
    )
    if after_seq is not None:
        found = list(rows.filter(seq__gt=after_seq).order_by("seq")[: limit + 1])
        has_more = len(found) > limit
        messages = found[:limit]
    else:
        count = last if last is not None else 20
        newest_first = list(rows.order_by("-seq")[: count + 1])
        has_more = len(newest_first) > count
        messages = list(reversed(newest_first[:count]))
    if messages:
        last_seq = messages[0].session_last_seq
    else:
        head = _session_or_404(Session.objects.for_tenant(tenant).only("last_seq"), pk)
        last_seq = head.last_seq
    return MessagePage(messages=messages, has_more=has_more, last_seq=last_seq)


def state_list_for_session(*, session: Session) -> QuerySet[StateEntry]:
    return StateEntry.objects.filter(tenant_id=session.tenant_id, session=session).order_by(
        "position"
    )


def state_get_for_session(*, session: Session, key: str) -> StateEntry:
    entry = StateEntry.objects.filter(tenant_id=session.tenant_id, session=session, key=key).first()
    if entry is None:
        raise ResourceNotFound("No such state key.")
    return entry


def summary_current(*, tenant_id: int, session_id: uuid.UUID) -> Summary | None:
    """The session's newest summary (highest through_seq), or None: one probe of the unique
    (session, through_seq) index."""
    return (
        Summary.objects.filter(tenant_id=tenant_id, session_id=session_id)
        .order_by("-through_seq")
        .first()
    )


MESSAGE_RANKER: Ranker = FullTextRanker(column="content", fts_table="sessions_app_message_fts")


@dataclass(frozen=True)
class MessageHit:
    message: Message
    score: float


def message_search(
    *,
    tenant: Tenant,
    query: str,
    user_id: str | None = None,
    session_id: uuid.UUID | None = None,
    role: str | None = None,
    top_k: int = 10,
    ranker: Ranker = MESSAGE_RANKER,
) -> list[MessageHit]:
    """Seed 000's cross-session search: "when did we talk about X", best match first.

    Raises EmptySearchQuery for a query with no searchable words.
    """
    candidates = Message.objects.for_tenant(tenant)
    if user_id is not None:
        candidates = candidates.filter(
            session__end_user__tenant=tenant, session__end_user__external_id=user_id
        )
    if session_id is not None:
        candidates = candidates.filter(session_id=session_id)
    if role is not None:
        candidates = candidates.filter(role=role)
    scored = ranker.rank(query=query, candidates=candidates, limit=top_k)
    by_id = Message.objects.for_tenant(tenant).in_bulk([item.id for item in scored])
    return [
        MessageHit(message=by_id[item.id], score=item.score) for item in scored if item.id in by_id
    ]
