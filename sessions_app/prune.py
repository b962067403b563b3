"""Retention's part in conversation memory: which sessions, messages and summaries a cutoff
expires, and their batched delete. The retention wing (memoryhub.retention) decides the cutoffs
from each tenant's policy, runs this and audits it; the purge by age runs it too."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.db.models import Count, Exists, F, Model, OuterRef, Q, QuerySet, Sum, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Greatest

from memoryhub.accounts.idempotency import (
    _ERASED_HASH,
    ERASED_BODY,
    ERASED_STATUS,
    idempotency_responses_erase,
)
from memoryhub.accounts.models import EndUser, IdempotencyRecord, Tenant
from memoryhub.accounts.services import delete_in_batches, deleted_kinds, end_user_recall_touch
from memoryhub.core.locks import DELETE_RERUN_SQLSTATES, rows_lock, run_rerunning
from sessions_app.models import (
    FINISHED_PLAN_STATUSES,
    Message,
    MessageVector,
    Plan,
    Session,
    StateEntry,
    SubTask,
    Summary,
    TaskContext,
)
from sessions_app.services import MESSAGE_APPEND_SCOPE, sessions_delete_prepare

BATCH_SIZE = 1000

Progress = Callable[[str, int], None]  # (kind, rows just deleted or counted)


def _no_progress(kind: str, rows: int) -> None:
    return None


# Batches sized by time: long enough that a batch's fixed costs (its round trips, its commit)
# are small beside its rows, short enough that no writer queues long behind one (a batch holds
# its sessions' row locks until it commits).
BATCH_SECONDS_LOW = 0.05
BATCH_SECONDS_HIGH = 0.1
# Below this a batch is mostly its fixed costs (a round trip, planning, a commit), and a slow
# one (the machine busy) is no faster for being smaller.
BATCH_SIZE_MIN = 500
BATCH_SIZE_MAX = 200_000
# After each batch, a pause of this share of its time (none by default). The writers a batch
# slows are slowed by the share of the CPUs (and WAL) it takes while it runs; a pause between
# batches of tens of milliseconds does not shorten that, it only stretches the cleanup (the
# bench's cleanup part, same code with a quarter's pause and without, on a busy 2-core box:
# 0.26-0.34 of a raw DELETE's rate against 0.55-0.62, appenders' p99 x1.22-1.32 against
# x1.20-1.21). Appends to a batch's own sessions wait on their row locks, and the lock queue
# lets them in before the next batch's. That is of a pause taken always: retention's own pacer
# (memoryhub.retention.prune.retention_pacer) pauses only while other clients are busy, and
# longer (RETENTION_YIELD_RATIO), which did bring the appenders' p99 down.
BATCH_PAUSE_RATIO = 0.0


@dataclass
class BatchPacer:
    """How many rows the next batch takes: it starts at `size` and grows or shrinks so that a
    batch takes BATCH_SECONDS_LOW to _HIGH, then pauses `pause_ratio` of that time. One pacer goes
    through a tenant's whole run, so each rule starts at the size the last one found. The clock
    and the sleep are injectable for tests."""

    size: int = BATCH_SIZE
    low_seconds: float = BATCH_SECONDS_LOW
    high_seconds: float = BATCH_SECONDS_HIGH
    min_size: int = BATCH_SIZE_MIN
    max_size: int = BATCH_SIZE_MAX
    pause_ratio: float = BATCH_PAUSE_RATIO
    clock: Callable[[], float] = time.perf_counter
    sleep: Callable[[float], None] = time.sleep
    batches: int = field(default=0, init=False)

    def run(self, batch: Callable[[int], bool]) -> None:
        """Call `batch(size)` until it answers False (nothing more to do), resizing by the time
        each took and pausing between them."""
        while True:
            started = self.clock()
            more = batch(self.size)
            elapsed = max(self.clock() - started, 0.0)
            self.batches += 1
            self._resize(elapsed)
            if not more:
                return
            if self.pause_ratio > 0 and elapsed > 0:
                self.sleep(elapsed * self.pause_ratio)

    def _resize(self, elapsed: float) -> None:
        target = (self.low_seconds + self.high_seconds) / 2
        if elapsed < self.low_seconds:
            # At most double: one fast batch (rows cached, nobody writing) proves little.
            factor = 2.0 if elapsed <= 0 else min(2.0, target / elapsed)
        elif elapsed > self.high_seconds:
            factor = max(0.25, target / elapsed)
        else:
            return
        floor = min(self.min_size, self.size)  # a test's tiny start stays possible
        resized = int(self.size * factor)
        if factor > 1:
            resized = max(resized, self.size + 1)
        self.size = max(floor, min(self.max_size, resized))


@dataclass(frozen=True)
class ConversationScope:
    """The sessions and messages one cutoff applies to: a tenant, optionally one person, and
    either some agents only or every agent but some (those with their own policy). Pinned
    sessions (imported history the importer chose to keep) are never in it, nor are their
    messages and summaries."""

    tenant: Tenant
    cutoff: dt.datetime
    end_user: EndUser | None = None
    agents: frozenset[str] | None = None
    other_agents_than: frozenset[str] = frozenset()

    def _narrow(self, queryset: QuerySet[Any], *, prefix: str) -> QuerySet[Any]:
        queryset = queryset.filter(**{f"{prefix}pinned": False})
        if self.end_user is not None:
            queryset = queryset.filter(**{f"{prefix}end_user": self.end_user})
        if self.agents is not None:
            queryset = queryset.filter(**{f"{prefix}agent_id__in": self.agents})
        if self.other_agents_than:
            queryset = queryset.exclude(**{f"{prefix}agent_id__in": self.other_agents_than})
        return queryset

    def expired_sessions(self) -> QuerySet[Session]:
        return self._narrow(
            Session.objects.for_tenant(self.tenant).filter(last_active_at__lt=self.cutoff),
            prefix="",
        )

    def expired_messages(self) -> QuerySet[Message]:
        return self._narrow(
            Message.objects.for_tenant(self.tenant).filter(created_at__lt=self.cutoff),
            prefix="session__",
        )

    def replaced_summaries(self) -> QuerySet[Summary]:
        return self._narrow(
            Summary.objects.for_tenant(self.tenant).filter(
                created_at__lt=self.cutoff, through_seq__lt=F("session__summarized_seq")
            ),
            prefix="session__",
        )


def kind(model: type[Model]) -> str:
    return str(model._meta.verbose_name_plural).replace(" ", "_")


def conversations_prune(
    *,
    scope: ConversationScope,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    progress: Progress = _no_progress,
    pacer: BatchPacer | None = None,
    counts: Counter[str] | None = None,
) -> Counter[str]:
    """Messages older than the scope's cutoff, sessions idle since before it (with their
    state and summaries), and replaced summaries older than it. Messages go in batches the
    pacer sizes by time (a new one starting at `batch_size` without one); the rest, far fewer
    rows, in batches of `batch_size`. Rows are added to `counts` (returned; a new one without
    it) batch by batch, as each commits: a caller cut short still knows what went."""
    counts = Counter() if counts is None else counts
    messages_before = counts[kind(Message)]
    sessions = scope.expired_sessions()
    if dry_run:
        dry = _conversations_count(scope=scope, sessions=sessions)
        counts.update(dry)
        progress("dry run", sum(dry.values()))
        return counts
    try:
        _conversations_delete(
            scope=scope,
            sessions=sessions,
            batch_size=batch_size,
            progress=progress,
            pacer=pacer or BatchPacer(size=batch_size),
            counts=counts,
        )
    finally:
        if counts[kind(Message)] > messages_before:
            # Search indexes hold these messages: tell them (a deleted session alone they
            # notice), also after a run cut short.
            end_user_recall_touch(
                tenant=scope.tenant,
                end_user_ids=None if scope.end_user is None else [scope.end_user.pk],
            )
    return counts


def _conversations_count(*, scope: ConversationScope, sessions: QuerySet[Session]) -> Counter[str]:
    counts: Counter[str] = Counter()
    in_expired = Q(session__in=sessions.values("pk"))
    counts[kind(Message)] = (
        Message.objects.for_tenant(scope.tenant)
        .filter(Q(pk__in=scope.expired_messages().values("pk")) | in_expired)
        .count()
    )
    counts[kind(Session)] = sessions.count()
    counts[kind(StateEntry)] = StateEntry.objects.filter(in_expired).count()
    counts[kind(Summary)] = (
        Summary.objects.for_tenant(scope.tenant)
        .filter(Q(pk__in=scope.replaced_summaries().values("pk")) | in_expired)
        .count()
    )
    # A session's plans and task contexts (and theirs sub-tasks) go with it.
    plans = Plan.objects.filter(in_expired)
    tasks = TaskContext.objects.filter(in_expired | Q(plan__in=plans.values("pk")))
    counts[kind(Plan)] = plans.count()
    counts[kind(TaskContext)] = tasks.count()
    counts[kind(SubTask)] = SubTask.objects.filter(task__in=tasks.values("pk")).count()
    return counts


def _conversations_delete(
    *,
    scope: ConversationScope,
    sessions: QuerySet[Session],
    batch_size: int,
    progress: Progress,
    pacer: BatchPacer,
    counts: Counter[str],
) -> None:
    # Messages first, oldest first along (tenant, created_at): an expired session's messages
    # are all older than its last activity, so its own delete below is small. What goes takes
    # the stored responses that quote it along (blanked: accounts.idempotency).
    messages_delete_paced(
        tenant=scope.tenant,
        queryset=scope.expired_messages(),
        order_by=("created_at", "pk"),
        pacer=pacer,
        counts=counts,
        progress=progress,
    )
    for queryset, order_by, before_delete in (
        (scope.replaced_summaries(), ("created_at", "pk"), None),
        (
            sessions,
            ("last_active_at", "pk"),
            lambda ids: sessions_delete_prepare(tenant=scope.tenant, session_ids=ids),
        ),
    ):
        delete_in_batches(
            queryset=queryset,
            order_by=order_by,
            batch_size=batch_size,
            counts=counts,
            progress=progress,
            before_delete=before_delete,
        )


def messages_delete_paced(
    *,
    tenant: Tenant,
    queryset: QuerySet[Message],
    order_by: tuple[str, ...],
    pacer: BatchPacer,
    counts: Counter[str],
    progress: Progress,
) -> None:
    """Delete the messages `queryset` selects, oldest first along `order_by` (an index), in
    batches the pacer sizes, each its own short transaction that keeps what every delete of
    messages keeps: the batch's sessions locked first (the order appends lock in; a session
    pinned meanwhile keeps its messages), their counters lowered by exactly what went, their
    vectors gone, and the stored responses that quote what went blanked. On PostgreSQL a batch
    is one statement whatever its size (no id travels to Python); elsewhere it goes through the
    ORM, as delete_in_batches does."""
    if connections[queryset.db].vendor == "postgresql":
        # Each batch starts where the last one's rows ended (its first ordering key, >=: rows
        # tied with the last one are read again), not at the start of the index: the rows the
        # earlier batches deleted are dead until a vacuum, and a batch walking over them all
        # again cost more with each batch (and visited each one's heap page once more). Every
        # row there was when the run started lies at or past the mark (the order is a total
        # one along an index), so the run still deletes them all; only a row written during
        # the run behind the mark (a backfill with an old time) waits for the next run.
        key = order_by[0]
        after: list[Any] = []

        def pg_batch(size: int) -> bool:
            batch_queryset = queryset.filter(**{f"{key}__gte": after[0]}) if after else queryset
            scanned, deleted, last = run_rerunning(
                lambda: _pg_messages_batch(
                    tenant=tenant, queryset=batch_queryset, order_by=order_by, size=size
                ),
                sqlstates=DELETE_RERUN_SQLSTATES,
            )
            if last is not None:
                after[:] = [last]
            if deleted:
                counts[kind(Message)] += deleted
            progress(str(Message._meta.verbose_name_plural), deleted)
            return scanned >= size

        with _batch_settings(using=queryset.db):
            pacer.run(pg_batch)
        return

    def batch(size: int) -> bool:
        ids = list(queryset.order_by(*order_by).values_list("pk", flat=True)[:size])
        if not ids:
            return False
        removed = deleted_kinds(
            per_model=run_rerunning(
                lambda: _orm_messages_batch(tenant=tenant, queryset=queryset, ids=ids),
                sqlstates=DELETE_RERUN_SQLSTATES,
            )
        )
        counts.update(removed)
        progress(str(Message._meta.verbose_name_plural), sum(removed.values()))
        return len(ids) >= size

    pacer.run(batch)


# The settings _batch_settings turns off (literal names, never input): one statement reads them
# and turns them off, another puts back what it read.
_BATCH_SETTINGS_OFF = ("enable_sort", "synchronous_commit", "jit")
_BATCH_SETTINGS_READ_AND_OFF = "SELECT " + ", ".join(
    [f"current_setting('{name}')" for name in _BATCH_SETTINGS_OFF]
    + [f"set_config('{name}', 'off', false)" for name in _BATCH_SETTINGS_OFF]
)
_BATCH_SETTINGS_BACK = "SELECT " + ", ".join(
    f"set_config('{name}', %s, false)" for name in _BATCH_SETTINGS_OFF
)


@contextmanager
def _batch_settings(*, using: str) -> Iterator[None]:
    """The connection's settings while its batches run (put back after them; a rollback of an
    outer transaction puts them back too):

    - enable_sort off: under row-level security the planner counts the policy's quals as
      filtering out most of a tenant's rows, so it would rather sort those few than walk
      (tenant, created_at) in order, and then reads and sorts every expired message for each
      batch (measured: 200 ms for 1,000 rows of 100,000, against 6 ms walking the index);
    - synchronous_commit off: a batch's commit does not wait for its WAL to reach the disk (most
      of a small batch's time on a busy server). A crash may lose the last batches, never a part
      of one: the next run deletes those rows again, and the audit event written after them
      (a normal commit) flushes them first;
    - jit off: the same misestimate prices a batch's walk over a million expired messages above
      jit_above_cost (211,512 for a batch of 7,000), and compiling the statement's ~160
      expressions then took 35-47 ms of each 53-91 ms batch (EXPLAIN ANALYZE); a batch's own
      work is tens of milliseconds, never long enough to win a compile back.
    """
    with connections[using].cursor() as cursor:
        cursor.execute(_BATCH_SETTINGS_READ_AND_OFF)
        before = list(cursor.fetchone()[: len(_BATCH_SETTINGS_OFF)])
    try:
        yield
    finally:
        connection = connections[using]
        if connection.connection is not None and not connection.needs_rollback:
            try:
                with connection.cursor() as cursor:
                    cursor.execute(_BATCH_SETTINGS_BACK, before)
            except DatabaseError:
                # A connection that cannot be put back is not used again with these settings.
                connection.close()


def _orm_messages_batch(
    *, tenant: Tenant, queryset: QuerySet[Message], ids: list[int]
) -> dict[str, int]:
    with transaction.atomic():
        _message_sessions_lock(ids)
        # The filter again, not just the ids: a row that stopped matching is kept.
        going = rows_lock(queryset.filter(pk__in=ids))
        if not going:
            return {}
        _messages_delete_prepare(tenant=tenant, message_ids=going)
        return Message._base_manager.filter(pk__in=going).delete()[1]


# One batch of messages on PostgreSQL, one statement: the batch (the ORM's query, oldest first,
# `size` rows), its sessions locked in key order before any message goes (an InitPlan: the whole
# ARRAY is built at the delete's first row; the sessions are found by `= ANY(ARRAY(...))`, an index
# probe each, because with `IN (SELECT ...)` the planner, which guesses a row or two for the batch
# behind row-level security's quals, walked every session of the table and scanned the batch for
# each: 18 ms a batch with 108 sessions in the table), the messages of the sessions locked deleted
# by the row addresses the batch's query read (a TID scan: no second walk down the primary key per
# row; messages are never updated, and one that were meanwhile would be skipped, not deleted twice,
# and go in the next run) with their vectors (Django's foreign keys are deferred: checked at commit;
# the vectors' delete is skipped outright when the tenant has none, as for a tenant without
# embeddings, instead of a probe per message), the sessions' counters lowered by what went (as
# session_counters_subtract does) and the appends' stored responses that quote it blanked (as
# _append_responses_erase does). The lock re-reads a session changed meanwhile: one pinned since the
# batch was read keeps its messages. A vector written under a session's lock while the batch waited
# for it fails the commit's foreign-key check (23503), and the batch runs again
# (DELETE_RERUN_SQLSTATES).
_PG_MESSAGES_DELETE = """
WITH going (id, session_id, mark, row) AS MATERIALIZED ({going}),
locked AS MATERIALIZED (
    SELECT s.id, s.summarized_seq FROM {session} s
    WHERE s.id = ANY(ARRAY(SELECT DISTINCT session_id FROM going)) AND NOT s.pinned
    ORDER BY s.id
    FOR UPDATE
),
gone AS (
    DELETE FROM {message} m
    WHERE m.ctid = ANY(ARRAY(SELECT row FROM going))
      AND m.session_id = ANY(ARRAY(SELECT id FROM locked))
    RETURNING m.id, m.session_id, m.seq, m.token_count
),
vectors AS (
    DELETE FROM {vector} v WHERE v.message_id IN (SELECT id FROM gone)
        AND EXISTS (SELECT FROM {vector} x WHERE x.tenant_id = %s)
    RETURNING 1
),
per_session AS (
    SELECT g.session_id, count(*) AS n, coalesce(sum(g.token_count), 0) AS tokens,
           coalesce(sum(g.token_count) FILTER (WHERE g.seq <= s.summarized_seq), 0) AS summarized
    FROM gone g JOIN locked s ON s.id = g.session_id
    GROUP BY g.session_id
),
counters AS (
    UPDATE {session} s
    SET message_count = GREATEST(s.message_count - p.n, 0),
        token_count = GREATEST(s.token_count - p.tokens, 0),
        summarized_tokens = GREATEST(s.summarized_tokens - p.summarized, 0)
    FROM per_session p WHERE s.id = p.session_id
    RETURNING 1
),
erased AS (
    UPDATE {record} r
    SET response_status = %s, response_body = %s::jsonb, request_hash = %s
    WHERE r.tenant_id = %s AND r.session_id IN (SELECT session_id FROM per_session)
      AND r.scope = %s AND r.request_hash <> %s
      AND (r.response_body -> 'id' IN (SELECT to_jsonb(id) FROM gone)
           OR r.response_body -> 'messages' -> 0 -> 'id' IN (SELECT to_jsonb(id) FROM gone))
    RETURNING 1
)
SELECT (SELECT count(*) FROM going), (SELECT count(*) FROM gone),
       (SELECT count(*) FROM vectors), (SELECT count(*) FROM counters),
       (SELECT count(*) FROM erased), (SELECT max(mark) FROM going)
"""


def _pg_messages_batch(
    *, tenant: Tenant, queryset: QuerySet[Message], order_by: tuple[str, ...], size: int
) -> tuple[int, int, Any]:
    """(rows the batch's query found, rows it deleted, the greatest first ordering key of the
    rows found: None when none). One statement: its own transaction (or the caller's)."""
    # The row's address (the model's table name only: no value in the SQL).
    row_ctid = RawSQL(f'"{Message._meta.db_table}".ctid', ())  # noqa: S611
    going = (
        queryset.annotate(row_ctid=row_ctid)
        .order_by(*order_by)
        .values_list("pk", "session_id", order_by[0], "row_ctid")[:size]
    )
    going_sql, going_params = going.query.sql_with_params()
    # Table names and the ORM's compiled query only; the values go as parameters.
    statement = _PG_MESSAGES_DELETE.format(
        going=going_sql,
        message=Message._meta.db_table,
        vector=MessageVector._meta.db_table,
        session=Session._meta.db_table,
        record=IdempotencyRecord._meta.db_table,
    )
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(
            statement,
            [
                *going_params,
                tenant.pk,
                ERASED_STATUS,
                json.dumps(ERASED_BODY),
                _ERASED_HASH,
                tenant.pk,
                MESSAGE_APPEND_SCOPE,
                _ERASED_HASH,
            ],
        )
        row = cursor.fetchone()
    return int(row[0]), int(row[1]), row[5]


def _message_sessions_lock(message_ids: list[int]) -> None:
    """Lock the sessions of messages about to go, before the messages: the order appends and
    session deletes lock in, and what keeps the sessions' counters still until the delete."""
    rows_lock(
        Session.objects.filter(
            pk__in=Message.objects.filter(pk__in=message_ids).values("session_id")
        )
    )


def _messages_delete_prepare(*, tenant: Tenant, message_ids: list[int]) -> None:
    _append_responses_erase(tenant=tenant, message_ids=message_ids)
    session_counters_subtract(message_ids=message_ids)


def session_counters_subtract(*, message_ids: list[int]) -> None:
    """Take messages about to be deleted off their sessions' counters, in the delete's
    transaction with the sessions and the messages locked: `message_count` and `token_count`
    stay exactly what the session stores (seed 004's `Len`), and `summarized_tokens` loses what
    the summary covered of them, so that token_count - summarized_tokens stays the
    unsummarized history a summary is due on. One UPDATE per session of the batch."""
    per_session = (
        Message.objects.filter(pk__in=message_ids)
        .order_by()  # no default ordering in the GROUP BY
        .values("session_id")
        .annotate(
            rows=Count("pk"),
            tokens=Sum("token_count"),
            summarized=Sum("token_count", filter=Q(seq__lte=F("session__summarized_seq"))),
        )
    )
    for row in per_session:
        Session.objects.filter(pk=row["session_id"]).update(
            message_count=Greatest(F("message_count") - row["rows"], Value(0)),
            token_count=Greatest(F("token_count") - (row["tokens"] or 0), Value(0)),
            summarized_tokens=Greatest(F("summarized_tokens") - (row["summarized"] or 0), Value(0)),
        )


def session_counters_recount(*, tenant: Tenant, batch_size: int = BATCH_SIZE) -> int:
    """Set every session's counters of the tenant to what it stores, counting its messages:
    the repair of counters that drifted before deletes kept them (retention and purges of old
    messages, until issue 15). Batches of sessions, each locked in its own transaction as an
    append would lock it; returns how many sessions had a counter corrected."""
    corrected = 0
    after: Any = None
    while True:
        sessions = Session.objects.for_tenant(tenant).order_by("pk")
        if after is not None:
            sessions = sessions.filter(pk__gt=after)
        ids = list(sessions.values_list("pk", flat=True)[:batch_size])
        if not ids:
            return corrected
        after = ids[-1]
        with transaction.atomic():
            rows_lock(Session.objects.filter(pk__in=ids))
            stored = {
                row["session_id"]: row
                for row in Message.objects.filter(session_id__in=ids)
                .order_by()
                .values("session_id")
                .annotate(
                    rows=Count("pk"),
                    tokens=Sum("token_count"),
                    summarized=Sum("token_count", filter=Q(seq__lte=F("session__summarized_seq"))),
                )
            }
            for session in Session.objects.filter(pk__in=ids).only(
                "message_count", "token_count", "summarized_tokens"
            ):
                row = stored.get(session.pk, {})
                true = (
                    row.get("rows") or 0,
                    row.get("tokens") or 0,
                    row.get("summarized") or 0,
                )
                if (session.message_count, session.token_count, session.summarized_tokens) != true:
                    Session.objects.filter(pk=session.pk).update(
                        message_count=true[0], token_count=true[1], summarized_tokens=true[2]
                    )
                    corrected += 1


@dataclass(frozen=True)
class TranscriptCapScope:
    """Seed 000's transcript cap for some sessions of a tenant: at most `cap` messages each,
    the oldest going first. Agents are narrowed as in ConversationScope."""

    tenant: Tenant
    cap: int
    agents: frozenset[str] | None = None
    other_agents_than: frozenset[str] = frozenset()

    def sessions_over_cap(self) -> QuerySet[Session]:
        # The counters are exact (session_counters_subtract), so they find the sessions over
        # the cap without counting anyone's messages.
        # A pinned session (imported history the user chose to keep) is exempt from every
        # retention rule, the cap included.
        sessions = Session.objects.for_tenant(self.tenant).filter(
            message_count__gt=self.cap, pinned=False
        )
        if self.agents is not None:
            sessions = sessions.filter(agent_id__in=self.agents)
        if self.other_agents_than:
            sessions = sessions.exclude(agent_id__in=self.other_agents_than)
        return sessions

    def evicted_messages(self, *, session_id: Any) -> QuerySet[Message]:
        """The session's messages past the cap: all up to the (cap+1)-th newest."""
        newest_evicted = (
            Message.objects.filter(session_id=session_id)
            .order_by("-seq")
            .values_list("seq", flat=True)[self.cap : self.cap + 1]
        )
        return Message.objects.for_tenant(self.tenant).filter(
            session_id=session_id, seq__lte=newest_evicted
        )


def transcripts_cap(
    *,
    scope: TranscriptCapScope,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    progress: Progress = _no_progress,
    pacer: BatchPacer | None = None,
    counts: Counter[str] | None = None,
) -> Counter[str]:
    """Evict each session's oldest messages past the cap (FIFO), in the batches retention
    deletes messages in, keeping the counters exact and blanking stored responses that quote
    them. Rows are added to `counts` as each batch commits, as conversations_prune does."""
    pacer = pacer or BatchPacer(size=batch_size)
    counts = Counter() if counts is None else counts
    touched: set[int] = set()
    over = list(scope.sessions_over_cap().order_by("pk").values_list("pk", "end_user_id"))
    try:
        for session_id, end_user_id in over:
            going = scope.evicted_messages(session_id=session_id)
            if dry_run:
                counts[kind(Message)] += going.count()
                continue
            before = counts[kind(Message)]
            try:
                messages_delete_paced(
                    tenant=scope.tenant,
                    queryset=going,
                    order_by=("seq",),
                    pacer=pacer,
                    counts=counts,
                    progress=progress,
                )
            finally:
                if counts[kind(Message)] > before and end_user_id is not None:
                    touched.add(end_user_id)
    finally:
        if touched:
            end_user_recall_touch(tenant=scope.tenant, end_user_ids=touched)
    if dry_run:
        progress("dry run", counts[kind(Message)])
    return counts


def _append_responses_erase(*, tenant: Tenant, message_ids: list[int]) -> None:
    """Blank the stored responses of the appends that stored these messages (about to go).

    A response quotes its message as `id`, or a batch's as `messages`, whose first is its
    oldest (times never decrease along seqs): a batch that lost any message to a cutoff lost
    that one. Only a backfill (an old `created_at`) meets a cutoff while its response is kept.
    """
    sessions = set(Message.objects.filter(pk__in=message_ids).values_list("session_id", flat=True))
    quoting = Q(response_body__id__in=message_ids) | Q(
        response_body__messages__0__id__in=message_ids
    )
    idempotency_responses_erase(
        tenant=tenant, session_ids=sessions, where=Q(scope=MESSAGE_APPEND_SCOPE) & quoting
    )


def finished_work(
    *, tenant: Tenant, cutoff: dt.datetime
) -> tuple[QuerySet[Plan], QuerySet[TaskContext]]:
    """Finished plans and task contexts unchanged since `cutoff`.

    A plan is finished when its status is completed, failed or cancelled; it goes with its task
    contexts. A task context is finished when it waits for no sub-task, or when its plan is
    finished: a context still waiting for sub-tasks of a running plan (or of none) stays until
    its worker deletes it, or its plan or session goes.
    """
    finished = list(FINISHED_PLAN_STATUSES)
    plans = Plan.objects.for_tenant(tenant).filter(status__in=finished, updated_at__lt=cutoff)
    tasks = TaskContext.objects.for_tenant(tenant).filter(
        ~Exists(SubTask.objects.filter(task=OuterRef("pk"))) | Q(plan__status__in=finished),
        updated_at__lt=cutoff,
    )
    return plans, tasks


def finished_work_count(
    *, tenant: Tenant, plans: QuerySet[Plan], tasks: QuerySet[TaskContext]
) -> Counter[str]:
    """What deleting `finished_work` would remove, each row once: a plan's cascade is two levels
    deep (its task contexts, their sub-tasks), and a context can go both ways."""
    going = TaskContext.objects.for_tenant(tenant).filter(
        Q(plan__in=plans.values("pk")) | Q(pk__in=tasks.values("pk"))
    )
    return Counter(
        {
            kind(Plan): plans.count(),
            kind(TaskContext): going.count(),
            kind(SubTask): SubTask.objects.filter(task__in=going.values("pk")).count(),
        }
    )
