"""Reads of conversation memory that are more than a `get`."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    Count,
    Func,
    IntegerField,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.db.models.functions import Coalesce
from django.utils.dateparse import parse_datetime

from memoryhub.accounts.models import Tenant
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.prepared import statements_prepared
from memoryhub.core.search import FullTextRanker, Ranker
from sessions_app.models import Message, Plan, Session, StateEntry, Summary, TaskContext


def session_list_for_tenant(*, tenant: Tenant) -> QuerySet[Session]:
    """The tenant's sessions with their end users and how many plans and task contexts each
    has (counted in the same query); the API narrows it with SessionFilter."""
    return (
        Session.objects.for_tenant(tenant)
        .select_related("end_user")
        .annotate(
            plan_count=_count_per_session(Plan), task_context_count=_count_per_session(TaskContext)
        )
    )


def _count_per_session(model: type[Plan] | type[TaskContext]) -> Coalesce:
    # A correlated subquery, not Count() over joins: two joined one-to-many tables would
    # multiply each other's rows (and the page's).
    rows = (
        model.objects.filter(session=OuterRef("pk"))
        .order_by()
        .values("session")
        .annotate(count=Count("pk"))
        .values("count")
    )
    return Coalesce(Subquery(rows, output_field=IntegerField()), 0)


def _session_pk(session_id: str | uuid.UUID) -> uuid.UUID:
    # A malformed id, a missing one and another tenant's all get the same answer.
    if isinstance(session_id, uuid.UUID):
        return session_id
    try:
        return uuid.UUID(session_id)
    except ValueError:
        raise ResourceNotFound("No such session.") from None


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


# The context call's reads are written as SQL, not the ORM: they run before nearly every model
# call a bot makes, and building them through the ORM cost several times their database time.

_CONTEXT_SESSION_SQL = """
SELECT "agent_id", "end_user_id",
  (SELECT "text" FROM "sessions_app_summary"
   WHERE "tenant_id" = %s AND "session_id" = "session"."id"
   ORDER BY "through_seq" DESC LIMIT 1),
  (SELECT "through_seq" FROM "sessions_app_summary"
   WHERE "tenant_id" = %s AND "session_id" = "session"."id"
   ORDER BY "through_seq" DESC LIMIT 1),
  (SELECT "recall_version" FROM "accounts_enduser"
   WHERE "id" = "session"."end_user_id" AND "tenant_id" = "session"."tenant_id"),
  (SELECT "vectors_version" FROM "accounts_enduser"
   WHERE "id" = "session"."end_user_id" AND "tenant_id" = "session"."tenant_id"),
  (SELECT COUNT(*) FROM "sessions_app_session" AS "other"
   WHERE "other"."end_user_id" = "session"."end_user_id"
   AND "other"."tenant_id" = "session"."tenant_id"),
  (SELECT COALESCE(SUM("other"."last_seq"), 0) FROM "sessions_app_session" AS "other"
   WHERE "other"."end_user_id" = "session"."end_user_id"
   AND "other"."tenant_id" = "session"."tenant_id")
FROM "sessions_app_session" AS "session"
WHERE "tenant_id" = %s AND "id" = %s
"""

# The same row on PostgreSQL, with LATERAL (which SQLite lacks): the person's sessions are read
# once for both their count and their seqs, not once per scalar subquery, and the summary and
# the person's row once each. At a person of 1,001 sessions 0.86-0.95 -> 0.62-0.66 ms (psql,
# prepared); the cost grows with the person's sessions, and every context call pays it.
_CONTEXT_SESSION_SQL_POSTGRESQL = """
SELECT "session"."agent_id", "session"."end_user_id", "summary"."text", "summary"."through_seq",
  "person"."recall_version", "person"."vectors_version", "others"."count", "others"."seqs"
FROM "sessions_app_session" AS "session"
LEFT JOIN LATERAL (
  SELECT "text", "through_seq" FROM "sessions_app_summary"
  WHERE "tenant_id" = %s AND "session_id" = "session"."id"
  ORDER BY "through_seq" DESC LIMIT 1
) AS "summary" ON TRUE
LEFT JOIN "accounts_enduser" AS "person"
  ON "person"."id" = "session"."end_user_id" AND "person"."tenant_id" = "session"."tenant_id"
CROSS JOIN LATERAL (
  SELECT COUNT(*) AS "count", COALESCE(SUM("other"."last_seq"), 0) AS "seqs"
  FROM "sessions_app_session" AS "other"
  WHERE "other"."end_user_id" = "session"."end_user_id"
  AND "other"."tenant_id" = "session"."tenant_id"
) AS "others"
WHERE "session"."tenant_id" = %s AND "session"."id" = %s
"""


@dataclass(frozen=True)
class SessionForContext:
    id: uuid.UUID
    agent_id: str
    end_user_id: int | None
    # The current summary (what summary_current returns), None when there is none.
    summary_text: str | None
    summary_through_seq: int | None
    # The person's recall version token (sessions_app.recall.Token's four numbers, as its
    # recall_token reads them), so that the relevant history's recall needs no read of its own;
    # None without a person.
    person_versions: tuple[int, int, int, int] | None = None


def session_get_for_context(*, tenant: Tenant, session_id: str | uuid.UUID) -> SessionForContext:
    """The tenant's session (as `session_get_for_tenant` finds it, or ResourceNotFound) with its
    current summary (`summary_current`) and its person's recall version token, in one query:
    the summary is two scalar subqueries on the one session row, each a probe of the unique
    (session, through_seq) index; the token four more, over the person's row and sessions."""
    pk = _session_pk(session_id)
    connection = connections[router.db_for_read(Session)]
    db_pk = Session._meta.pk.get_db_prep_value(pk, connection)  # SQLite keeps UUIDs as hex
    # Prepared (memoryhub.core.prepared): its plan is the same whatever the values, since every
    # subquery hangs off the one session row found by primary key; planning it was 0.3 of its
    # 0.5 ms, before every context call.
    with statements_prepared(using=connection.alias), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_CONTEXT_SESSION_SQL_POSTGRESQL, [tenant.pk, tenant.pk, db_pk])
        else:
            cursor.execute(_CONTEXT_SESSION_SQL, [tenant.pk, tenant.pk, tenant.pk, db_pk])
        row = cursor.fetchone()
    if row is None:
        raise ResourceNotFound("No such session.")
    agent_id, end_user_id, summary_text, summary_through_seq, *versions = row
    return SessionForContext(
        id=pk,
        agent_id=agent_id,
        end_user_id=end_user_id,
        summary_text=summary_text,
        summary_through_seq=summary_through_seq,
        person_versions=(
            None
            if end_user_id is None or None in versions
            else (int(versions[0]), int(versions[1]), int(versions[2]), int(versions[3]))
        ),
    )


_CONTEXT_MESSAGES_SQL = """
SELECT "seq", "role", "content", "name", "tool_call_id", "tool_calls", "token_count"
FROM "sessions_app_message"
WHERE "tenant_id" = %s AND "session_id" = %s
ORDER BY "seq" DESC
LIMIT {limit}
"""


class MessageRow(NamedTuple):
    seq: int
    role: str
    content: str
    name: str
    tool_call_id: str
    tool_calls: Any
    token_count: int


@dataclass(frozen=True)
class MessageTail:
    messages: list[MessageRow]  # oldest first
    has_more: bool  # older messages exist


def message_tail_for_context(*, tenant: Tenant, session_id: uuid.UUID, last: int) -> MessageTail:
    """The last `last` messages of a session the caller has already found, in seq order: what
    `message_page_for_tenant(last=...)` returns, minus what the context does not use (no
    Message objects, no join for last_seq, no second query for an empty page)."""
    connection = connections[router.db_for_read(Message)]
    sql, params = message_tail_query(
        connection=connection, tenant_id=tenant.pk, session_id=session_id, last=last
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return message_tail_from_rows(rows, last=last)


def message_tail_query(
    *, connection: BaseDatabaseWrapper, tenant_id: int, session_id: uuid.UUID, last: int
) -> tuple[str, list[Any]]:
    """message_tail_for_context's statement and its parameters (the context's gather reads it
    inside a statement of its own too: memoryhub.context.selectors): one row more than `last`,
    newest first, to tell whether older ones exist.

    The limit is written into the statement, not passed: prepared (the context's read), a
    statement with the limit as a parameter gets a generic plan that sorts the whole session
    (it cannot know the limit is small): 105 ms instead of 1.4 at 100,000 messages."""
    db_session_id = Session._meta.pk.get_db_prep_value(session_id, connection)
    return _CONTEXT_MESSAGES_SQL.format(limit=int(max(last, 0) + 1)), [tenant_id, db_session_id]


def message_tail_from_rows(rows: Iterable[Sequence[Any]], *, last: int) -> MessageTail:
    """The rows of message_tail_query's statement (newest first) as message_tail_for_context
    returns them."""
    newest_first = [
        MessageRow(
            seq,
            role,
            content,
            name,
            tool_call_id,
            # Both databases hand JSON back as text to a plain cursor (Django's psycopg setup
            # loads jsonb as text too); the field has no custom decoder.
            None if tool_calls is None else json.loads(tool_calls),
            token_count,
        )
        for seq, role, content, name, tool_call_id, tool_calls, token_count in rows
    ]
    return MessageTail(messages=newest_first[:last][::-1], has_more=len(newest_first) > last)


class MessageRecord(NamedTuple):
    """A stored message as the API shows it (sessions_app.api.serializers.message_data reads
    it as it reads a Message): read from the cursor, without building a model instance."""

    id: int
    session_id: uuid.UUID
    seq: int
    role: str
    content: str
    name: str
    tool_call_id: str
    tool_calls: Any
    metadata: Any
    token_count: int
    created_at: dt.datetime


# A history turn's fields (the context's relevant history), as `.values()` would name them.
TURN_FIELDS = ("id", "session_id", "seq", "name", "role", "content", "created_at")


def message_neighbours_for_context(
    *, tenant: Tenant, places: Sequence[tuple[uuid.UUID, int]]
) -> dict[tuple[uuid.UUID, int], dict[str, Any]]:
    """The messages before and after each (session, seq) place, by place, as dicts of
    TURN_FIELDS: one query for a few places (the rows of their sessions at their seqs +-1, the
    few extra ones dropped here), written as SQL: the context reads it before nearly every
    model call a bot makes, where the ORM built it anew each time."""
    if not places:
        return {}
    wanted = {(session, seq + step) for session, seq in places for step in (-1, 1)}
    sessions = sorted({session for session, _ in wanted})
    seqs = sorted({seq for _, seq in wanted})
    connection = connections[router.db_for_read(Message)]
    prep = Session._meta.pk.get_db_prep_value
    sql = (
        'SELECT "id", "session_id", "seq", "name", "role", "content", "created_at" '  # noqa: S608
        'FROM "sessions_app_message" WHERE "tenant_id" = %s '
        f'AND "session_id" IN ({", ".join(["%s"] * len(sessions))}) '
        f'AND "seq" IN ({", ".join(["%s"] * len(seqs))})'
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [tenant.pk, *(prep(s, connection) for s in sessions), *seqs])
        rows = cursor.fetchall()
    found: dict[tuple[uuid.UUID, int], dict[str, Any]] = {}
    for message_id, session_id, seq, name, role, content, created_at in rows:
        session = session_id if isinstance(session_id, uuid.UUID) else uuid.UUID(session_id)
        if (session, seq) in wanted:
            found[(session, seq)] = {
                "id": message_id,
                "session_id": session,
                "seq": seq,
                "name": name,
                "role": role,
                "content": content,
                "created_at": _datetime_column(created_at),
            }
    return found


@dataclass(frozen=True)
class MessagePage:
    messages: list[MessageRecord]
    has_more: bool
    last_seq: int


# The page's rows carry their session's last_seq through the join; the join also applies the
# session's own row-level policy, as the ORM's join did. Built once: the last N, or after a seq.
_MESSAGE_PAGE_SQL = """
SELECT m."id", m."seq", m."role", m."content", m."name", m."tool_call_id", m."tool_calls",
  m."metadata", m."token_count", m."created_at", s."last_seq"
FROM "sessions_app_message" AS m
INNER JOIN "sessions_app_session" AS s ON (s."id" = m."session_id")
WHERE m."tenant_id" = %s AND m."session_id" = %s{after}
ORDER BY m."seq" {order}
LIMIT %s
"""
_SEQ_MAX = 2**63 - 1  # PositiveBigIntegerField's largest value, on either database
_MESSAGE_PAGE_LAST_SQL = _MESSAGE_PAGE_SQL.format(after="", order="DESC")
_MESSAGE_PAGE_AFTER_SQL = _MESSAGE_PAGE_SQL.format(after=' AND m."seq" > %s', order="ASC")


def _json_column(value: Any) -> Any:
    # Both databases hand JSON back as text to a plain cursor (Django's psycopg setup loads
    # jsonb as text too); the fields have no custom decoder.
    return None if value is None else json.loads(value)


def _datetime_column(value: dt.datetime | str) -> dt.datetime:
    # PostgreSQL hands back an aware datetime; SQLite the text Django stored (UTC, naive).
    parsed = value if isinstance(value, dt.datetime) else parse_datetime(value)
    if parsed is None:
        raise ValueError(f"Not a stored datetime: {value!r}")
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


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
    second query, to tell an empty session from a missing (or foreign) one. The statement is
    written as SQL and its rows read as records (no Message instances): building it through
    the ORM and converting its rows cost several times the database's time.
    """
    pk = _session_pk(session_id)
    connection = connections[router.db_for_read(Message)]
    db_pk = Session._meta.pk.get_db_prep_value(pk, connection)  # SQLite keeps UUIDs as hex
    if after_seq is not None:
        size = limit
        sql = _MESSAGE_PAGE_AFTER_SQL
        # Past the column's range nothing follows (the ORM's lookup knew; the driver refuses).
        params: list[Any] = [tenant.pk, db_pk, min(after_seq, _SEQ_MAX), size + 1]
    else:
        size = last if last is not None else 20
        sql = _MESSAGE_PAGE_LAST_SQL
        params = [tenant.pk, db_pk, size + 1]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    has_more = len(rows) > size
    found = rows[:size]
    if after_seq is None:
        found.reverse()
    messages = [
        MessageRecord(
            message_id,
            pk,
            seq,
            role,
            content,
            name,
            tool_call_id,
            _json_column(tool_calls),
            _json_column(metadata),
            token_count,
            _datetime_column(created_at),
        )
        for (
            message_id,
            seq,
            role,
            content,
            name,
            tool_call_id,
            tool_calls,
            metadata,
            token_count,
            created_at,
            _last_seq,
        ) in found
    ]
    if found:
        last_seq = int(found[0][-1])
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
    speaker: str | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    ranker: Ranker = MESSAGE_RANKER,
) -> list[MessageHit]:
    """The database's full-text search over a tenant's messages ("when did we talk about X"),
    best match first: the lexical search for callers with no one person (sessions_app.recall
    ranks one person's history better). `speaker` keeps that participant's turns only.

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
    if speaker is not None:
        candidates = candidates.filter(Q(name=speaker) | Q(name="", role=speaker))
    if since is not None:
        candidates = candidates.filter(created_at__gte=since)
    if until is not None:
        candidates = candidates.filter(created_at__lte=until)
    scored = ranker.rank(query=query, candidates=candidates, limit=top_k)
    by_id = Message.objects.for_tenant(tenant).in_bulk([item.id for item in scored])
    return [
        MessageHit(message=by_id[item.id], score=item.score) for item in scored if item.id in by_id
    ]


# --- what a session stores (seed 000's list_files) ----------------------------------------------


class OctetLength(Func):
    """The size of a text or JSON column in bytes (UTF-8), computed by the database."""

    template = "length(CAST(%(expressions)s AS BLOB))"  # SQLite
    output_field = IntegerField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return self.as_sql(
            compiler,
            connection,
            template="octet_length((%(expressions)s)::text)",
            **extra_context,
        )


@dataclass(frozen=True)
class StoredKind:
    kind: str
    count: int
    bytes: int
    last_changed_at: dt.datetime | None
    tokens: int | None = None


def session_storage(*, session: Session) -> list[StoredKind]:
    """What a session stores, per kind: how many rows, their size in bytes (message content,
    state values, summary text, plan and task state and data), and the latest change.

    One aggregate query per kind, whatever the session holds; each reads the session's rows
    along an index on the session (the size needs every row's text, so its cost grows with
    the session, bounded by retention and the transcript cap)."""

    def aggregate(queryset: QuerySet[Any], *, size: Any, changed: str) -> dict[str, Any]:
        return queryset.order_by().aggregate(
            rows=Count("pk"), size=Coalesce(Sum(size), 0), changed=Max(changed)
        )

    messages = aggregate(
        Message.objects.filter(tenant_id=session.tenant_id, session=session),
        size=OctetLength("content"),
        changed="created_at",
    )
    state = aggregate(
        StateEntry.objects.filter(tenant_id=session.tenant_id, session=session),
        size=OctetLength("value"),
        changed="updated_at",
    )
    summaries = aggregate(
        Summary.objects.filter(tenant_id=session.tenant_id, session=session),
        size=OctetLength("text"),
        changed="created_at",
    )
    plans = aggregate(
        Plan.objects.filter(tenant_id=session.tenant_id, session=session),
        size=OctetLength("state") + OctetLength("goal_data"),
        changed="updated_at",
    )
    tasks = aggregate(
        TaskContext.objects.filter(tenant_id=session.tenant_id, session=session),
        size=OctetLength("state") + OctetLength("data"),
        changed="updated_at",
    )
    return [
        StoredKind(
            kind="messages",
            count=messages["rows"],
            bytes=messages["size"],
            last_changed_at=messages["changed"],
            tokens=session.token_count,
        ),
        *(
            StoredKind(
                kind=kind, count=row["rows"], bytes=row["size"], last_changed_at=row["changed"]
            )
            for kind, row in (
                ("state", state),
                ("summaries", summaries),
                ("plans", plans),
                ("task_contexts", tasks),
            )
        ),
    ]
