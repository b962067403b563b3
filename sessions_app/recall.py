"""Recall over a person's messages: the hybrid search of memoryhub.core.recall, fed from the
database and cached per process.

The database is the source of truth and does the filtering (tenant, person); the ranking runs
here, over an in-process index of the person's messages (with their vectors, where the worker
has made them; with pgvector, for a person of RECALL_PGVECTOR_FROM_MESSAGES messages or more, the
database finds the nearest vectors instead, and the index holds none: sessions_app/pgvector.py).
The index is a cache: before each use one query reads the
person's version token — their `recall_version` (bumped by edits, deletes and purges), their
`vectors_version` (new vectors) and
their sessions' count and summed `last_seq` (moved by every append, which so writes nothing
extra) — and a different token brings it up to date: extended with the new messages and vectors
when nothing was removed or edited (`_index_extended`: only those are read and analysed), built
again from the whole history otherwise.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any, Literal, NamedTuple, cast

from django.conf import settings
from django.db import connection, connections, models, router
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from memoryhub.accounts.models import EndUser, Tenant, end_user_id_is_storable
from memoryhub.accounts.selectors import end_user_get_for_tenant
from memoryhub.core.after_response import after_response
from memoryhub.core.errors import InvalidInput, ResourceNotFound
from memoryhub.core.prepared import statements_prepared
from memoryhub.core.recall import Hit, RecallDoc, RecallIndex, Signals, rank
from memoryhub.core.recall.analyzer import query_terms
from memoryhub.core.recall.cache import IndexCache
from memoryhub.core.recall.index import epoch_seconds
from memoryhub.core.rows import column_converters, compiled_timestamps, row_converted
from memoryhub.core.search import EmptySearchQuery
from memoryhub.llm.embeddings import (
    Embedder,
    embed_query_ahead,
    embed_query_or_none,
    get_embedder,
    matrix_from_bytes,
)
from sessions_app.models import Message, MessageRole, MessageVector, Session
from sessions_app.pgvector import nearest_messages, pgvector_serves
from sessions_app.selectors import MessageRecord, message_search, session_get_for_tenant

Mode = Literal["hybrid", "lexical", "semantic"]
MODES: tuple[Mode, ...] = ("hybrid", "lexical", "semantic")


class HistoryTooLarge(Exception):
    """The person's history is over RECALL_INDEX_MAX_MESSAGES, or its index is larger than the
    whole cache (RECALL_CACHE_MAX_BYTES): no in-process index is used."""


class Token(NamedTuple):
    """What an index was built from: a different token means it may be stale."""

    removals: int  # EndUser.recall_version: edits, deletes, purges (never served stale)
    vectors: int  # EndUser.vectors_version: new vectors
    sessions: int  # how many sessions the person has
    appended: int  # the sum of their sessions' last_seq: moved by every append

    def only_gained_on(self, older: Token, *, appends_too: bool) -> bool:
        """Whether an index built at `older` lacks only new vectors (and, with `appends_too`,
        new messages): nothing it holds was removed or changed."""
        return (
            self.removals == older.removals
            and self.sessions == older.sessions
            and self.vectors >= older.vectors
            and (
                self.appended == older.appended or (appends_too and self.appended > older.appended)
            )
        )


# With pgvector, the dense side sees the person's nearest messages and the ones rank asks for
# besides (its best lexical matches and a sample: hybrid.DENSE_LEXICAL_ROWS); the others count
# as not embedded. With the nearest alone (up to 1,000 until rank asked), LoCoMo's five dev
# conversations as one person (2,760 messages, bench/recall_partial_cosines.py --one-person)
# kept 76-87 % of the exact top 10 with the nearest 100-1,000; with rank's asking 95.0 / 95.3 /
# 95.7 / 96.2 % with the nearest 100 / 200 / 500 / 1,000. So 200: the statement returns ~760
# rows instead of 1,000, and a search costs what it did (10,000 messages on pgvector: 15-18 ms
# in-process either way). Semantic hits need far fewer.
DENSE_CANDIDATES = 200


@cache
def index_cache() -> IndexCache:
    return IndexCache(max_bytes=int(settings.RECALL_CACHE_MAX_BYTES))


def passage_text(*, speaker: str, content: str) -> str:
    """What is embedded for a message: the study's "<speaker>: <text>"."""
    return f"{speaker}: {content}" if speaker else content


def message_passage(*, name: str, role: str, content: str) -> str:
    """`passage_text` of a message's columns: what the embedding worker embeds for it."""
    return passage_text(speaker=speaker_of(name=name, role=role), content=content)


def speaker_of(*, name: str, role: str) -> str:
    return name or role


def _token_sql(*, by_external_id: bool) -> str:
    enduser = EndUser._meta.db_table
    session = Session._meta.db_table
    quote = connection.ops.quote_name
    person = "e.external_id" if by_external_id else "e.id"
    if connection.vendor == "postgresql":
        # LATERAL (SQLite has none): one aggregate over the person's sessions, without the sort
        # PostgreSQL put under the GROUP BY. 0.70 -> 0.50 ms at a person of 1,001 sessions
        # (psql, prepared); every search pays it, and it grows with the sessions.
        return (
            "SELECT e.id, e.recall_version, e.vectors_version, a.count, a.seqs "  # noqa: S608
            f"FROM {quote(enduser)} e CROSS JOIN LATERAL (SELECT COUNT(s.id) AS count, "
            f"COALESCE(SUM(s.last_seq), 0) AS seqs FROM {quote(session)} s "
            "WHERE s.end_user_id = e.id AND s.tenant_id = e.tenant_id) a "
            f"WHERE {person} = %s AND e.tenant_id = %s"
        )
    return (
        "SELECT e.id, e.recall_version, e.vectors_version, COUNT(s.id), "  # noqa: S608
        f"COALESCE(SUM(s.last_seq), 0) FROM {quote(enduser)} e LEFT JOIN {quote(session)} s "
        "ON s.end_user_id = e.id AND s.tenant_id = e.tenant_id "
        f"WHERE {person} = %s AND e.tenant_id = %s "
        "GROUP BY e.id, e.recall_version, e.vectors_version"
    )


def recall_token(*, tenant_id: int, end_user_id: int) -> Token | None:
    """The person's version token, or None when the person is gone (erased)."""
    # Prepared (memoryhub.core.prepared): a person's row by key, then their sessions by person,
    # one plan for any person; PostgreSQL's parse and plan were most of its time.
    with statements_prepared(), connection.cursor() as cursor:
        cursor.execute(_token_sql(by_external_id=False), [end_user_id, tenant_id])
        row = cursor.fetchone()
    return None if row is None else Token(*(int(value) for value in row[1:]))


def _person_and_token(*, tenant: Tenant, external_id: str) -> tuple[EndUser, Token]:
    """The tenant's person with this id and their version token, in one query: a search by
    user_id otherwise read the person (through the ORM) and then their token. Raises
    ResourceNotFound as end_user_get_for_tenant does. Only for a tenant not bound to a person
    (the binding narrows the lookup: callers take end_user_get_for_tenant then)."""
    if not end_user_id_is_storable(external_id):
        raise ResourceNotFound("No such user.")
    with statements_prepared(), connection.cursor() as cursor:  # as recall_token's
        cursor.execute(_token_sql(by_external_id=True), [external_id, tenant.pk])
        row = cursor.fetchone()
    if row is None:
        raise ResourceNotFound("No such user.")
    # Recall reads only the person's pk (and its tenant): no second query for the whole row.
    person = EndUser(pk=int(row[0]), tenant=tenant, external_id=external_id)
    return person, Token(*(int(value) for value in row[1:]))


def _model_name() -> str | None:
    embedder = get_embedder()
    return None if embedder is None else embedder.model_name


def _database_embedder() -> Embedder | None:
    """The embedder, when pgvector holds its vectors: a person's index with none of them then
    asks the database for their cosines."""
    embedder = get_embedder()
    if embedder is None or not pgvector_serves(dimensions=embedder.dimensions):
        return None
    return embedder


def messages_embedded_count(*, end_user: EndUser) -> int:
    """The person's messages that have a vector of the current model (0 with embeddings off)."""
    model = _model_name()
    if model is None:
        return 0
    return MessageVector.objects.filter(
        tenant_id=end_user.tenant_id, end_user=end_user, model=model
    ).count()


_DOC_COLUMNS = ("id", "session_id", "seq", "content", "name", "role", "created_at", "token_count")

# An index is extended (only the new messages read and analysed) when at most this many of the
# person's sessions gained messages, and at most this many of its messages had no vector yet
# (read again by id): past either, the whole history is read, as for a first build.
EXTEND_MAX_SESSIONS = 64
EXTEND_MAX_MISSING_VECTORS = 1000
# A window index (RECALL_HISTORY_WINDOW_MESSAGES) extended past this many times its size is
# cut again from the person's newest messages.
WINDOW_REGROWTH = 1.25


def _vectors_in_index(*, person_messages: int, holding: bool = False) -> bool:
    """Whether a person's index of this many messages holds their vectors: with an embedder,
    unless pgvector holds them and the person has RECALL_PGVECTOR_FROM_MESSAGES or more. An
    index already `holding` vectors keeps them as it grows (past the line too: until a whole
    build)."""
    if _model_name() is None:
        return False
    return (
        holding
        or person_messages < settings.RECALL_PGVECTOR_FROM_MESSAGES
        or _database_embedder() is None
    )


def _vectors_by_message(
    *,
    tenant_id: int,
    end_user_id: int,
    message_ids: Sequence[int] | None = None,
    since: dt.datetime | None = None,
) -> dict[int, Any]:
    """The person's vectors of the current model by message id (of those messages, if given;
    of the messages made at or after `since`, if given)."""
    embedder = get_embedder()
    assert embedder is not None
    stored = MessageVector.objects.filter(
        tenant_id=tenant_id, end_user_id=end_user_id, model=embedder.model_name
    )
    if message_ids is not None:
        stored = stored.filter(message_id__in=message_ids)
    if since is not None:
        stored = stored.filter(message__created_at__gte=since)
    pairs = list(stored.values_list("message_id", "vector"))
    if not pairs:
        return {}
    matrix = matrix_from_bytes([blob for _, blob in pairs], dimensions=embedder.dimensions)
    return {message_id: matrix[i] for i, (message_id, _) in enumerate(pairs)}


def _docs_from_rows(
    *, rows: Sequence[tuple[Any, ...]], vectors: Mapping[int, Any]
) -> list[RecallDoc]:
    """RecallDocs of rows read as _DOC_COLUMNS, each with its vector if `vectors` has one."""
    return [
        RecallDoc(
            id=message_id,
            session_key=session_id,
            position=seq,
            text=content,
            speaker=speaker_of(name=name, role=role),
            created_at=created_at,
            token_count=token_count,
            vector=vectors.get(message_id),
        )
        for message_id, session_id, seq, content, name, role, created_at, token_count in rows
    ]


def _docs_for_person(
    *, tenant_id: int, end_user_id: int, newest: int | None = None
) -> list[RecallDoc]:
    """The person's messages oldest first (by created_at, then id), with their vectors when
    the index holds them; with `newest`, only the newest that many."""
    messages = Message.objects.filter(tenant_id=tenant_id, session__end_user_id=end_user_id)
    since: dt.datetime | None = None
    if newest is not None:
        # The window's oldest message: (created_at, id) of the newest-th from the end.
        cut = (
            messages.order_by("-created_at", "-id")
            .values_list("created_at", "id")[newest - 1 : newest]
            .first()
        )
        if cut is not None:
            since = cut[0]
            messages = messages.filter(
                models.Q(created_at__gt=cut[0]) | models.Q(created_at=cut[0], id__gte=cut[1])
            )
    rows = list(messages.order_by("created_at", "id").values_list(*_DOC_COLUMNS))
    vectors = (
        _vectors_by_message(tenant_id=tenant_id, end_user_id=end_user_id, since=since)
        if _vectors_in_index(person_messages=len(rows))
        else {}
    )
    return _docs_from_rows(rows=rows, vectors=vectors)


def _index_extended(
    *, base: RecallIndex, tenant_id: int, end_user_id: int, window: bool = False
) -> RecallIndex | None:
    """`base` with the messages appended since it was built and the vectors made since, read
    by session and seq and by id: the same index as a build from the whole history (the
    caller has checked that nothing was removed or edited since: the removals token). None
    when that cannot be had cheaply or exactly (a session gone, too many sessions moved or
    vectors missing, or new messages older than the newest indexed one, as an import of
    history brings): the caller builds from the whole history then.

    With `window` (an index of the person's newest messages only), only the sessions active
    since the window's oldest message are looked at, and only their messages made since."""
    known = base.session_last_positions()
    person_sessions = Session.objects.filter(tenant_id=tenant_id, end_user_id=end_user_id)
    since: dt.datetime | None = None
    if window and len(base):
        # A millisecond early: the epoch went through a float (a message of that millisecond
        # not in the window is then found older than the newest indexed: a whole build).
        since = dt.datetime.fromtimestamp(float(base.created_epoch[0]), tz=dt.UTC)
        since -= dt.timedelta(milliseconds=1)
        person_sessions = person_sessions.filter(last_active_at__gte=since)
    sessions = dict(person_sessions.values_list("id", "last_seq"))
    if not known.keys() <= sessions.keys():
        return None
    moved = [(sid, known.get(sid, 0)) for sid, last in sessions.items() if last > known.get(sid, 0)]
    if len(moved) > EXTEND_MAX_SESSIONS:
        return None
    rows: list[tuple[Any, ...]] = []
    if moved:
        after = models.Q()
        for session_id, last in moved:
            after |= models.Q(session_id=session_id, seq__gt=last)
        new = Message.objects.filter(after, tenant_id=tenant_id)
        if since is not None:
            new = new.filter(created_at__gte=since)
        rows = list(new.order_by("created_at", "id").values_list(*_DOC_COLUMNS))
    if rows and len(base):
        # A build orders the history by (created_at, id): new rows that sort before the newest
        # indexed one (imported history, a clock step back) would land elsewhere in it.
        newest = (float(base.created_epoch[-1]), base.ids[-1])
        first = rows[0]
        if (epoch_seconds(first[6]), first[0]) < newest:
            return None
    vectors: dict[int, Any] = {}
    old_vectors: dict[Hashable, Any] = {}  # message id -> vector, for messages already in base
    if _vectors_in_index(person_messages=len(base) + len(rows), holding=base.has_vectors):
        # The messages index's ids are Message pks (ints).
        missing = [cast(int, message_id) for message_id in base.ids_without_vector()]
        if len(missing) > EXTEND_MAX_MISSING_VECTORS:
            return None
        wanted = missing + [int(row[0]) for row in rows]
        if wanted:
            vectors = _vectors_by_message(
                tenant_id=tenant_id, end_user_id=end_user_id, message_ids=wanted
            )
        old_vectors = {
            message_id: vectors[message_id] for message_id in missing if message_id in vectors
        }
    if not rows and not old_vectors:
        return base
    return base.extended(_docs_from_rows(rows=rows, vectors=vectors), vectors=old_vectors)


def person_index(
    *,
    tenant_id: int,
    end_user_id: int,
    accept_newer_appends: bool = False,
    newest_window: bool = False,
    token: Token | None = None,
) -> RecallIndex | None:
    """The person's index; None when the person is gone (erased).

    Built before use when anything it holds was removed or edited, and when messages were
    appended (their words must be found at once). New vectors alone do not hold a request up:
    the cached index is used once more and brought up to date after the response. With
    `accept_newer_appends` (the context's relevant history, which never shows the newest turns
    of its own session anyway) appends are treated the same way. With `newest_window` (the
    context), a person over RECALL_INDEX_MAX_MESSAGES gets the index of their newest
    RECALL_HISTORY_WINDOW_MESSAGES messages instead of HistoryTooLarge. `token`: the person's
    token when the caller has just read it (with the person: _person_and_token).
    """
    index, _ = _person_index_holding(
        tenant_id=tenant_id,
        end_user_id=end_user_id,
        accept_newer_appends=accept_newer_appends,
        newest_window=newest_window,
        token=token,
    )
    return index


def _person_index_holding(
    *,
    tenant_id: int,
    end_user_id: int,
    accept_newer_appends: bool = False,
    newest_window: bool = False,
    token: Token | None = None,
) -> tuple[RecallIndex | None, bool]:
    """`person_index`'s index, and whether it holds every message appended up to `token` (or
    the token read here): False only for a cached index taken once more with
    `accept_newer_appends` while newer appends wait for its refresh. (A window of the newest
    messages holds every session's last one too.)"""
    cache_ = index_cache()
    if token is None:
        token = recall_token(tenant_id=tenant_id, end_user_id=end_user_id)
    if token is None:
        for windowed in (False, True):
            cache_.discard(
                _index_key(tenant_id=tenant_id, end_user_id=end_user_id, window=windowed)
            )
        return None, False
    # Building an index reads the whole history inside the request: for a person with a million
    # messages that outlasted gunicorn's timeout, the worker was killed and the next request
    # began again. Past the bound, callers take the database's search, or (the context) an
    # index of the newest messages only.
    window = token.appended > settings.RECALL_INDEX_MAX_MESSAGES
    if window and not newest_window:
        raise HistoryTooLarge(
            f"{token.appended} messages: over RECALL_INDEX_MAX_MESSAGES "
            f"({settings.RECALL_INDEX_MAX_MESSAGES})"
        )
    if window:
        # The history outgrew the bound: an index of all of it, built before, is of no more use
        # (the history only grows until something is removed).
        cache_.discard(_index_key(tenant_id=tenant_id, end_user_id=end_user_id, window=False))
    key = _index_key(tenant_id=tenant_id, end_user_id=end_user_id, window=window)
    # An index larger than the whole cache is never kept: without this, every search of the
    # person (every context call) read and built their whole history again. Until something
    # is removed, the history only grows, so it stays too large. The context then takes the
    # newest window too.
    if not window and newest_window and _known_too_large(key=key, token=token):
        window = True
        key = _index_key(tenant_id=tenant_id, end_user_id=end_user_id, window=window)
    if _known_too_large(key=key, token=token):
        raise _too_large_for_cache(token)
    cached = cache_.peek(key)
    if cached is not None and cached[0] != token:
        older = cached[0]
        assert isinstance(older, Token)
        if token.only_gained_on(older, appends_too=accept_newer_appends):

            def refresh() -> None:
                # Builds, never defers again: through person_index, new vectors would be
                # deferred once more, and after the response "later" is now (endless recursion;
                # the index never caught up with its vectors in that process).
                fresh = recall_token(tenant_id=tenant_id, end_user_id=end_user_id)
                if fresh is None:
                    cache_.discard(key)
                    return
                if not window and fresh.appended > settings.RECALL_INDEX_MAX_MESSAGES:
                    return  # crossed the bound meanwhile: the next use decides
                with contextlib.suppress(HistoryTooLarge):  # remembered: the next use refuses
                    _index_build(
                        key=key,
                        token=fresh,
                        tenant_id=tenant_id,
                        end_user_id=end_user_id,
                        window=window,
                    )

            after_response(refresh)
            return cached[1], older.appended == token.appended
    built = _index_build(
        key=key, token=token, tenant_id=tenant_id, end_user_id=end_user_id, window=window
    )
    return built, True


def _known_too_large(*, key: Hashable, token: Token) -> bool:
    """Whether the index under `key` was found larger than the whole cache at a token that
    this one only adds to."""
    too_large_at = index_cache().oversize(key)
    return (
        isinstance(too_large_at, Token)
        and token.removals == too_large_at.removals
        and token.appended >= too_large_at.appended
    )


def _index_key(*, tenant_id: int, end_user_id: int, window: bool) -> Hashable:
    return ("messages-window" if window else "messages", tenant_id, end_user_id)


def _index_build(
    *, key: Hashable, token: Token, tenant_id: int, end_user_id: int, window: bool = False
) -> RecallIndex:
    cache_ = index_cache()
    newest = int(settings.RECALL_HISTORY_WINDOW_MESSAGES) if window else None

    def build() -> RecallIndex:
        # Asked here, under the cache's lock for this person: the newest copy, which another
        # thread may have just built.
        cached = cache_.peek(key)
        if cached is not None:
            older = cached[0]
            assert isinstance(older, Token)
            if older.removals == token.removals:
                extended = _index_extended(
                    base=cached[1], tenant_id=tenant_id, end_user_id=end_user_id, window=window
                )
                # A window grown by a quarter by appends is cut again from the newest.
                if extended is not None and (
                    newest is None or len(extended) <= newest * WINDOW_REGROWTH
                ):
                    return extended
        return RecallIndex.build(
            _docs_for_person(tenant_id=tenant_id, end_user_id=end_user_id, newest=newest)
        )

    index = cache_.get_or_build(key, token=token, build=build)
    if cache_.oversize(key) == token:
        # Refused from the first search on, as every later one is (person_index), not served
        # once and refused after.
        raise _too_large_for_cache(token)
    return index


def _too_large_for_cache(token: Token) -> HistoryTooLarge:
    return HistoryTooLarge(
        f"{token.appended} messages: their index is larger than RECALL_CACHE_MAX_BYTES "
        f"({settings.RECALL_CACHE_MAX_BYTES})"
    )


class RecalledMessage(MessageRecord):
    """A hit's whole row as a record, not a model instance: building ~10-60 Message instances
    through the ORM cost more than ranking the person's history. It reads as a Message does for
    the API (message_data), the MCP tools and the search page (`pk`, `get_role_display`)."""

    __slots__ = ()

    @property
    def pk(self) -> int:
        return self.id

    def get_role_display(self) -> str:
        return _ROLE_LABELS.get(self.role, self.role)


_ROLE_LABELS: dict[str, str] = {value: str(label) for value, label in MessageRole.choices}


@dataclass(frozen=True)
class MessageRecall:
    # A RecalledMessage for whole rows; a Message holding only the fields asked for (`fields`),
    # or from the database's search (a tenant-wide search).
    message: Message | RecalledMessage
    hit: Hit


@dataclass(frozen=True)
class RecallResult:
    mode: Mode  # the mode that ran: hybrid without any vector yet runs as lexical
    hits: list[MessageRecall]
    # With `neighbours_of`: the messages just before and after those hits (as the index knew
    # them when it was built) by id, read with the hits, and the ids of the hits they are of.
    neighbours: Mapping[Hashable, Message | RecalledMessage] = field(default_factory=dict)
    neighbours_of: frozenset[Hashable] = frozenset()
    # Those of `neighbours_of` that are their session's last message: the index holds every
    # message appended up to the person's token and no next one of theirs.
    last_of_session: frozenset[Hashable] = frozenset()


_RECORD_FIELDS = MessageRecord._fields


@cache
def _hit_reader(
    vendor: str, names: tuple[str, ...]
) -> tuple[str, tuple[Any, ...], tuple[str, ...]]:
    """The statement reading hit rows by id, the columns (for their converters) and the
    attribute names."""
    meta = Message._meta
    fields = [_concrete_field(name) for name in names]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    # PostgreSQL: one statement text whatever the number of ids (psycopg caches its parse).
    ids = "= ANY(%s)" if vendor == "postgresql" else "IN ({ids})"
    sql = (
        f"SELECT {columns} FROM {quote(meta.db_table)} "  # noqa: S608
        f"WHERE {quote('tenant_id')} = %s AND {quote('id')} {ids}"
    )
    cols = tuple(field.get_col(meta.db_table) for field in fields)
    return sql, cols, tuple(field.attname for field in fields)


def _hit_rows(
    *, tenant_id: int, ids: Sequence[Hashable], fields: Sequence[str] | None
) -> dict[Hashable, Message | RecalledMessage]:
    """The hits' rows by id, in one statement written once (in_bulk compiled a queryset and
    built a model instance per row). Whole rows come as RecalledMessage; with `fields`, Message
    instances holding only those fields (the others deferred), as `.only()` loads them."""
    if not ids:
        return {}
    alias = router.db_for_read(Message)
    db = connections[alias]
    names = (
        _RECORD_FIELDS
        if fields is None
        else _in_model_order({"id", *(_attname(name) for name in fields)})
    )
    sql, columns, attnames = _hit_reader(db.vendor, names)
    # The ORM's own converters, so values come out as a queryset's would on either database.
    converters = column_converters(connection=db, columns=columns)
    if db.vendor == "postgresql":
        params: list[Any] = [tenant_id, list(ids)]
    else:
        sql = sql.format(ids=", ".join(["%s"] * len(ids)))
        params = [tenant_id, *ids]
    # Prepared (memoryhub.core.prepared): primary keys, one plan for any ids.
    with statements_prepared(using=alias), db.cursor() as cursor:
        compiled_timestamps(cursor)
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    found: dict[Hashable, Message | RecalledMessage] = {}
    # Asked once per read, not per row: each ask walks the signal's receivers.
    signalled = pre_init.has_listeners(Message) or post_init.has_listeners(Message)
    for row in rows:
        values = row_converted(row=row, converters=converters, connection=db)
        if fields is None:
            record = RecalledMessage(*values)
            found[record.id] = record
        else:
            message = _partial_message(alias, attnames, values, signalled=signalled)
            found[message.pk] = message
    return found


def _concrete_field(name: str) -> models.Field[Any, Any]:
    field = Message._meta.get_field(name)
    if not isinstance(field, models.Field) or not field.concrete:
        raise ValueError(f"Message.{name} is not a column.")
    return field


def _partial_message(
    alias: str, attnames: tuple[str, ...], values: list[Any], *, signalled: bool
) -> Message:
    """What `Message.from_db` builds from these columns (the others deferred), without
    Model.__init__'s per-field work: it was most of the cost of the context's ~60 hits. With
    an init signal receiver connected (`signalled`), from_db itself, so the receiver runs."""
    if signalled:
        return Message.from_db(alias, attnames, values)
    message = Message.__new__(Message)
    message.__dict__.update(zip(attnames, values, strict=True))
    message._state = ModelState()
    message._state.adding = False
    message._state.db = alias
    return message


def _in_model_order(attnames: set[str]) -> tuple[str, ...]:
    # Model.from_db takes the values of a subset of the fields in the model's field order.
    return tuple(f.attname for f in Message._meta.concrete_fields if f.attname in attnames)


def _attname(name: str) -> str:
    # `.only("session")` and `.only("session_id")` name the same column.
    return _concrete_field(name).attname


def _query_vector(*, query: str, index: RecallIndex) -> Any:
    return embed_query_or_none(query) if index.has_vectors else None


def _nearest_in_database(
    also_ids: Sequence[Hashable],
    *,
    embedder: Embedder,
    query: str,
    tenant: Tenant,
    end_user: EndUser,
    limit: int,
    person_messages: int,
    session_id: uuid.UUID | None,
    role: str | None,
    since: dt.datetime | None,
    until: dt.datetime | None,
    exclude_ids: Sequence[int],
) -> dict[Hashable, float] | None:
    """The cosines of the person's nearest messages and of `also_ids` (the ones rank asks for:
    see DENSE_LEXICAL_ROWS), from pgvector; None when the query cannot be embedded or the
    person has no vector yet (hybrid then runs lexical)."""
    vector = embed_query_or_none(query)
    if vector is None:
        return None
    nearest = nearest_messages(
        tenant_id=tenant.pk,
        end_user_id=end_user.pk,
        model=embedder.model_name,
        query_vector=vector,
        limit=limit,
        person_messages=person_messages,
        also_ids=cast(Sequence[int], also_ids),  # the index's ids are message ids
        session_id=session_id,
        role=role,
        since=since,
        until=until,
        exclude_ids=exclude_ids,
    )
    # Re-keyed for rank(), whose ids are any Hashable (a Mapping's key type is invariant).
    return {message_id: cosine for message_id, cosine in nearest.items()} or None


class _DatabaseCosines:
    """The cosines pgvector gives rank (`_nearest_in_database`), fetched at its first call: the
    search may rank twice (filters applied after ranking, then all if still short), with the
    same lexical scores and so the same ids asked for. `found` is None when no cosine came
    (the query could not be embedded): hybrid then ran as lexical."""

    def __init__(self, fetch: Callable[[Sequence[Hashable]], dict[Hashable, float] | None]) -> None:
        self._fetch = fetch
        self._fetched = False
        self.found: dict[Hashable, float] | None = None

    def __call__(self, also_ids: Sequence[Hashable]) -> dict[Hashable, float] | None:
        if not self._fetched:
            self.found = self._fetch(also_ids)
            self._fetched = True
        return self.found


def message_recall(
    *,
    tenant: Tenant,
    end_user: EndUser,
    query: str,
    mode: Mode = "hybrid",
    top_k: int = 10,
    speaker: str | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    session_id: uuid.UUID | None = None,
    role: str | None = None,
    exclude_ids: Sequence[int] = (),
    accept_newer_appends: bool = False,
    newest_window: bool = False,
    fields: Sequence[str] | None = None,
    token: Token | None = None,
    neighbours_of: int = 0,
) -> RecallResult:
    """The person's messages best matching `query`, best first (memoryhub.core.recall.rank).

    `session_id`/`role` narrow the hits; `exclude_ids` drops messages the caller already shows.
    `fields`: the only `Message` fields the caller reads (Message instances holding only
    those, as `.only()` loads them; the others would cost a query each); None loads whole rows,
    as RecalledMessage records. `token`: the person's version token, when just read.
    `neighbours_of`: the messages around the best this many ranked hits are read in the same
    statement as the hits (`RecallResult.neighbours`): the index knows their ids. A message
    appended after the index was built is not among them. `accept_newer_appends` and
    `newest_window`: as person_index takes them.
    Raises EmptySearchQuery for a query with no searchable word.
    """
    index, holds_appends = _person_index_holding(
        tenant_id=tenant.pk,
        end_user_id=end_user.pk,
        accept_newer_appends=accept_newer_appends,
        newest_window=newest_window,
        token=token,
    )
    if index is None or len(index) == 0:
        rank_empty_check(query)
        return RecallResult(mode="lexical" if mode == "hybrid" else mode, hits=[])
    query_vector: Callable[[], Any] | None = None
    dense_scores: _DatabaseCosines | None = None
    # With pgvector, an index holding no vector (a person of RECALL_PGVECTOR_FROM_MESSAGES
    # messages or more, or one none of whose vectors is made yet) asks the database; one
    # holding them ranks here, as without pgvector.
    database_embedder = (
        _database_embedder() if mode != "lexical" and not index.has_vectors else None
    )
    if database_embedder is None and mode != "lexical":
        # Waited for inside rank, once its lexical part is done: a vector embedded ahead
        # (embed_query_ahead) is still being computed on another thread meanwhile.
        query_vector = cache(partial(_query_vector, query=query, index=index))
    elif database_embedder is not None:
        rank_empty_check(query)  # before a round trip for nothing
        # Called inside rank, once its lexical part has chosen the other messages it needs.
        dense_scores = _DatabaseCosines(
            partial(
                _nearest_in_database,
                embedder=database_embedder,
                query=query,
                tenant=tenant,
                end_user=end_user,
                limit=max(DENSE_CANDIDATES, top_k),
                person_messages=len(index),
                session_id=session_id,
                role=role,
                since=since,
                until=until,
                exclude_ids=exclude_ids,
            )
        )
    if mode == "semantic" and query_vector is None and dense_scores is None:
        rank_empty_check(query)
        return RecallResult(mode="semantic", hits=[])
    filtered = session_id is not None or role is not None or bool(exclude_ids)
    excluded = set(exclude_ids)
    if fields is not None:
        # The context reads 7 short fields of ~60 rows: whole rows also decode their JSON
        # metadata and tool calls. The filters below read these two.
        fields = [*fields, "session_id", "role"]
    want = top_k
    while True:
        # With filters applied after ranking, ask for more than top_k, then all if still short.
        fetch = min(len(index), max(want * 5, 100)) if filtered else want
        hits = rank(
            index,
            query,
            top_k=fetch,
            mode=mode,
            query_vector=query_vector,
            dense_scores=dense_scores,
            speaker=speaker,
            since=since,
            until=until,
        )
        placed = {
            hit.id: index.neighbour_ids(hit.row) for hit in hits[:neighbours_of] if hit.row >= 0
        }
        around = {hit: [n for n in pair if n is not None] for hit, pair in placed.items()}
        ids = dict.fromkeys([*(hit.id for hit in hits), *(n for ns in around.values() for n in ns)])
        by_id = _hit_rows(tenant_id=tenant.pk, ids=list(ids), fields=fields)
        found = [
            MessageRecall(message=by_id[hit.id], hit=hit)
            for hit in hits
            if hit.id in by_id
            and hit.id not in excluded
            and (session_id is None or by_id[hit.id].session_id == session_id)
            and (role is None or by_id[hit.id].role == role)
        ]
        if len(found) >= top_k or fetch >= len(index) or len(hits) < fetch:
            # Hybrid without a vector (embeddings failing, no dense score) ran as lexical.
            has_dense = (dense_scores is not None and dense_scores.found is not None) or (
                query_vector is not None and query_vector() is not None
            )
            return RecallResult(
                mode=mode if (mode != "hybrid" or has_dense) else "lexical",
                hits=found[:top_k],
                neighbours={n: by_id[n] for ns in around.values() for n in ns if n in by_id},
                neighbours_of=frozenset(around),
                # An index short of newer appends cannot tell a session's last message.
                last_of_session=(
                    frozenset(hit for hit, (_, after) in placed.items() if after is None)
                    if holds_appends
                    else frozenset()
                ),
            )
        want = len(index)


def messages_search(
    *,
    tenant: Tenant,
    query: str,
    mode: Mode = "hybrid",
    top_k: int = 10,
    user_id: str | None = None,
    session_id: uuid.UUID | None = None,
    role: str | None = None,
    speaker: str | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> RecallResult:
    """The message search behind the API and the search page.

    With one person — `user_id`, or the person of `session_id` — it is `message_recall` in the
    mode asked for. Without (a tenant-wide search, a session with no person) it is the
    database's full-text search, lexical, over every message the filters allow. Raises
    ResourceNotFound for an unknown person or session, InvalidInput for a semantic search
    without a person, EmptySearchQuery for a query with no searchable word.
    """
    end_user: EndUser | None = None
    token: Token | None = None
    if mode != "lexical" and (user_id is not None or session_id is not None):
        # A person's search ranks with the query's vector: embedded beside the reads below.
        embed_query_ahead(query)
    if user_id is not None:
        if tenant.person is None:
            end_user, token = _person_and_token(tenant=tenant, external_id=user_id)
        else:
            end_user = end_user_get_for_tenant(tenant=tenant, external_id=user_id)
    if session_id is not None:
        session = session_get_for_tenant(tenant=tenant, session_id=session_id)
        if end_user is None and session.end_user_id is not None:
            end_user = EndUser.objects.get(pk=session.end_user_id)
    if end_user is not None:
        try:
            return message_recall(
                tenant=tenant,
                end_user=end_user,
                query=query,
                mode=mode,
                top_k=top_k,
                speaker=speaker,
                since=since,
                until=until,
                session_id=session_id,
                role=role,
                token=token,
            )
        except HistoryTooLarge as error:
            # One session of the person: the database's full-text search below serves it.
            if session_id is None or mode == "semantic":
                raise InvalidInput(
                    field="user_id",
                    message=(
                        f"This person's history is too large to search whole ({error}): "
                        "search one of their sessions (session_id, lexical or hybrid)."
                    ),
                    code="history_too_large",
                ) from None
    if mode == "semantic":
        raise InvalidInput(
            field="mode",
            message=(
                "Semantic search reads one person's history: give user_id, or the session_id "
                "of a session that has a person."
            ),
            code="person_required",
        )
    hits = message_search(
        tenant=tenant,
        query=query,
        session_id=session_id,
        role=role,
        top_k=top_k,
        speaker=speaker,
        since=since,
        until=until,
    )
    return RecallResult(
        mode="lexical",
        hits=[
            MessageRecall(
                message=hit.message,
                hit=Hit(
                    id=hit.message.pk,
                    score=hit.score,
                    lexical_score=hit.score,
                    dense_score=None,
                    signals=LEXICAL_ONLY,
                ),
            )
            for hit in hits
        ],
    )


LEXICAL_ONLY = Signals(lexical=True, semantic=False, speaker=False, date=False, when=False)


def rank_empty_check(query: str) -> None:
    """Raise EmptySearchQuery as rank would, for a person with nothing to rank."""
    if not query_terms(query):
        raise EmptySearchQuery("The query has no searchable words.")
