"""Reads of conversation memory that are more than a `get`."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from memoryhub.accounts.models import Tenant
from memoryhub.core.errors import ResourceNotFound
from sessions_app.models import Message, Session, StateEntry


def session_list_for_tenant(*, tenant: Tenant) -> QuerySet[Session]:
    """The tenant's sessions with their end users; the API narrows it with SessionFilter."""
    return Session.objects.for_tenant(tenant).select_related("end_user")


def session_get_for_tenant(*, tenant: Tenant, session_id: str | uuid.UUID) -> Session:
    """The tenant's session, or 404 — for a missing id, a malformed one and another tenant's."""
    try:
        pk = session_id if isinstance(session_id, uuid.UUID) else uuid.UUID(session_id)
    except ValueError:
        raise ResourceNotFound("No such session.") from None
    session = Session.objects.for_tenant(tenant).select_related("end_user").filter(pk=pk).first()
    if session is None:
        raise ResourceNotFound("No such session.")
    return session


def message_list_last(*, session: Session, count: int) -> tuple[list[Message], bool]:
    """The last `count` messages in seq order, and whether older ones exist."""
    newest_first = list(
        Message.objects.filter(tenant_id=session.tenant_id, session=session).order_by("-seq")[
            : count + 1
        ]
    )
    has_more = len(newest_first) > count
    return list(reversed(newest_first[:count])), has_more


def message_list_after(
    *, session: Session, after_seq: int, limit: int
) -> tuple[list[Message], bool]:
    """Messages with seq > `after_seq` in order, at most `limit`, and whether more follow."""
    rows = list(
        Message.objects.filter(
            tenant_id=session.tenant_id, session=session, seq__gt=after_seq
        ).order_by("seq")[: limit + 1]
    )
    return rows[:limit], len(rows) > limit


def state_list_for_session(*, session: Session) -> QuerySet[StateEntry]:
    return StateEntry.objects.filter(tenant_id=session.tenant_id, session=session).order_by(
        "position"
    )


def state_get_for_session(*, session: Session, key: str) -> StateEntry:
    entry = StateEntry.objects.filter(tenant_id=session.tenant_id, session=session, key=key).first()
    if entry is None:
        raise ResourceNotFound("No such state key.")
    return entry
