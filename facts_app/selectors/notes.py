"""Reads of notes (seed 003): current versions, recall by days and query, and history."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import reduce
from operator import or_
from typing import Any

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet

from facts_app.models import Note, NoteKind
from memoryhub.accounts.models import EndUser, Tenant

RECALL_DAYS_DEFAULT = 7
RECALL_DAYS_MAX = 365
QUERY_WORD_MIN_LENGTH = 2
# Each word is one LIKE over the current notes; past a few dozen a query is a document, not a
# search, and the rest would only make the SQL longer.
QUERY_WORDS_MAX = 32
_NON_WORD = re.compile(r"\W+")


def query_words(query: str) -> list[str]:
    """The words of a recall query: split on non-word characters, shorter than 2 dropped,
    lower-cased and de-duplicated in order."""
    words: dict[str, None] = {}
    for word in _NON_WORD.split(query):
        if len(word) >= QUERY_WORD_MIN_LENGTH:
            words.setdefault(word.lower(), None)
    return list(words)[:QUERY_WORDS_MAX]


def _matching_any(notes: QuerySet[Note], words: list[str]) -> QuerySet[Note]:
    if not words:
        return notes
    # icontains escapes % and _, so a word is matched literally. (SQLite's LIKE folds only
    # ASCII case; PostgreSQL's UPPER folds all of Unicode.)
    return notes.filter(reduce(or_, (Q(content__icontains=word) for word in words)))


def _notes_of(*, tenant: Tenant, end_user: EndUser) -> QuerySet[Note]:
    return Note.objects.for_tenant(tenant).filter(end_user=end_user)


def note_long_term_current(*, tenant: Tenant, end_user: EndUser) -> Note | None:
    """The current long-term document, or None when it was never saved."""
    return (
        _notes_of(tenant=tenant, end_user=end_user)
        .filter(kind=NoteKind.LONG_TERM)
        .order_by("-version")
        .first()
    )


def note_daily_current_list(
    *,
    tenant: Tenant,
    end_user: EndUser,
    since: dt.date,
    until: dt.date,
    words: list[str] | None = None,
) -> list[Note]:
    """The current version of each day's note from `since` to `until`, newest day first.

    One query whatever the number of days: a version is current when no newer version of the
    same day exists (NOT EXISTS along the note_current index). Filtering by content happens on
    that current version, never on an older one. Days whose current text is empty (cleared)
    are left out: there is nothing to recall.
    """
    notes = _notes_of(tenant=tenant, end_user=end_user).filter(kind=NoteKind.DAILY)
    newer = notes.filter(day=OuterRef("day"), version__gt=OuterRef("version"))
    current = (
        notes.filter(day__gte=since, day__lte=until)
        .exclude(content="")
        .exclude(Exists(newer))
        .order_by("-day")
    )
    return list(_matching_any(current, words or []))


@dataclass(frozen=True)
class NoteRecall:
    long_term: Note | None
    daily: list[Note]


def note_recall(
    *,
    tenant: Tenant,
    end_user: EndUser,
    today: dt.date,
    days: int = RECALL_DAYS_DEFAULT,
    query: str = "",
) -> NoteRecall:
    """Seed 003's memory.recall / memory.show: the long-term document and the daily notes of
    the last `days` days (today included), newest first; with `query`, only notes whose current
    text contains any of its words. Two queries.

    Tomorrow is included too: a bot ahead of UTC may already write under its local date.
    """
    words = query_words(query)
    long_term = note_long_term_current(tenant=tenant, end_user=end_user)
    if long_term is not None and words:
        text = long_term.content.lower()
        if not any(word in text for word in words):
            long_term = None
    daily = note_daily_current_list(
        tenant=tenant,
        end_user=end_user,
        since=today - dt.timedelta(days=days - 1),
        until=today + dt.timedelta(days=1),
        words=words,
    )
    return NoteRecall(long_term=long_term, daily=daily)


def note_long_term_history(*, tenant: Tenant, end_user: EndUser) -> QuerySet[Note]:
    """Every version of the long-term document, newest first (the API pages through it)."""
    return (
        _notes_of(tenant=tenant, end_user=end_user)
        .filter(kind=NoteKind.LONG_TERM)
        .order_by("-version")
    )


def note_daily_history(*, tenant: Tenant, end_user: EndUser, day: dt.date) -> QuerySet[Note]:
    """Every version of one day's note, newest (the current one) first."""
    return (
        _notes_of(tenant=tenant, end_user=end_user)
        .filter(kind=NoteKind.DAILY, day=day)
        .order_by("-version")
    )


@dataclass(frozen=True)
class RecalledNote:
    day: dt.date | None  # None for the long-term document
    content: str


@dataclass(frozen=True)
class ContextNotes:
    long_term: RecalledNote | None  # the current version, even when empty
    daily: list[RecalledNote]  # newest day first, empty ones left out


# note_recall without a query, in one statement: the current long-term version (the newest
# version number is a scalar subquery, one probe of note_current), UNION ALL each day's current
# version (NOT EXISTS a newer one), as note_daily_current_list reads them. Written as SQL, not the
# ORM: this runs before nearly every model call a bot makes, and building the same statement
# through the ORM (two subqueries, a union) cost ~5 ms of Python per call against ~0.1 ms in the
# database.
_CONTEXT_NOTES_SQL = """
SELECT "day", "content" FROM "facts_app_note"
WHERE "tenant_id" = %s AND "end_user_id" = %s AND "kind" = %s AND "day" IS NULL
  AND "version" = (
    SELECT MAX("version") FROM "facts_app_note"
    WHERE "tenant_id" = %s AND "end_user_id" = %s AND "kind" = %s AND "day" IS NULL
  )
UNION ALL
SELECT "day", "content" FROM "facts_app_note" AS "current"
WHERE "tenant_id" = %s AND "end_user_id" = %s AND "kind" = %s
  AND "day" >= %s AND "day" <= %s AND "content" <> ''
  AND NOT EXISTS (
    SELECT 1 FROM "facts_app_note" AS "newer"
    WHERE "newer"."tenant_id" = "current"."tenant_id"
      AND "newer"."end_user_id" = "current"."end_user_id"
      AND "newer"."kind" = "current"."kind" AND "newer"."day" = "current"."day"
      AND "newer"."version" > "current"."version"
  )
"""
# The same on PostgreSQL, planned in about half the time (most of that statement's cost): the
# newest long-term version by a backward walk of its index, and the first row of each day in a
# walk of note_current (tenant, person, kind, day, version DESC), which is that day's current
# version. It reads what the statement above reads (every version of the days asked for: its NOT
# EXISTS probes each of them), without the probes. Two parts, not one with an OR, so that each
# stays on its own index conditions (an OR filters all of the person's notes, every day ever).
# A day whose current text is empty is left out in Python.
_CONTEXT_NOTES_PG_SQL = """
(SELECT "day", "content" FROM "facts_app_note"
 WHERE "tenant_id" = %s AND "end_user_id" = %s AND "kind" = %s AND "day" IS NULL
 ORDER BY "version" DESC LIMIT 1)
UNION ALL
(SELECT DISTINCT ON ("day") "day", "content" FROM "facts_app_note"
 WHERE "tenant_id" = %s AND "end_user_id" = %s AND "kind" = %s AND "day" >= %s AND "day" <= %s
 ORDER BY "day", "version" DESC)
"""


def _as_date(value: dt.date | str) -> dt.date:
    # SQLite hands a date back as text when the column's type is lost in the UNION.
    return dt.date.fromisoformat(value) if isinstance(value, str) else value


def context_notes_query(
    *,
    connection: BaseDatabaseWrapper,
    tenant_id: int,
    end_user_id: int | None,
    today: dt.date,
    days: int,
) -> tuple[str, list[Any]]:
    """note_recall_for_context's statement and its parameters, rows of (day, content), for
    `connection`'s database (the context's gather reads them in a statement of its own)."""
    adapt_day = connection.ops.adapt_datefield_value
    since = adapt_day(today - dt.timedelta(days=days - 1))
    until = adapt_day(today + dt.timedelta(days=1))
    owner = (tenant_id, end_user_id)
    if connection.vendor == "postgresql":
        return _CONTEXT_NOTES_PG_SQL, [
            *owner,
            NoteKind.LONG_TERM.value,
            *owner,
            NoteKind.DAILY.value,
            since,
            until,
        ]
    return _CONTEXT_NOTES_SQL, [
        *owner,
        NoteKind.LONG_TERM.value,
        *owner,
        NoteKind.LONG_TERM.value,
        *owner,
        NoteKind.DAILY.value,
        since,
        until,
    ]


def context_notes_from_rows(rows: Iterable[tuple[Any, str]]) -> ContextNotes:
    """The rows of context_notes_query's statement as note_recall_for_context returns them."""
    long_term: RecalledNote | None = None
    daily: list[RecalledNote] = []
    for day, content in rows:
        if day is None:
            long_term = RecalledNote(day=None, content=content)
        elif content:  # a cleared day: nothing to recall
            daily.append(RecalledNote(day=_as_date(day), content=content))
    daily.sort(key=lambda note: note.day or dt.date.min, reverse=True)
    return ContextNotes(long_term=long_term, daily=daily)


def note_recall_for_context(
    *, tenant_id: int, end_user_id: int, today: dt.date, days: int = RECALL_DAYS_DEFAULT
) -> ContextNotes:
    """What `note_recall(query="")` finds (tomorrow included), as (day, content) only, in one
    query."""
    connection = connections[router.db_for_read(Note)]
    sql, params = context_notes_query(
        connection=connection, tenant_id=tenant_id, end_user_id=end_user_id, today=today, days=days
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return context_notes_from_rows(rows)


@dataclass(frozen=True)
class NoteShow:
    """Seed 003's `memory.show`: the zone at a glance."""

    long_term: Note | None
    today: Note | None
    recent: list[Note]  # the days before today, newest first, cleared days left out
    long_term_versions: int
    daily_days: int  # days with a daily note (cleared ones included: their history is kept)
    daily_versions: int
    latest_change_at: dt.datetime | None


def note_show(
    *, tenant: Tenant, end_user: EndUser, today: dt.date, days: int = RECALL_DAYS_DEFAULT
) -> NoteShow:
    """The long-term document, today's note (tomorrow's reads as today's, as in the context),
    the notes of the `days` days before today, and counts of everything kept with the latest
    change. Three queries whatever the history holds."""
    recall = note_recall(tenant=tenant, end_user=end_user, today=today, days=days + 1)
    counts = (
        _notes_of(tenant=tenant, end_user=end_user)
        .order_by()
        .aggregate(
            long_term_versions=Count("pk", filter=Q(kind=NoteKind.LONG_TERM)),
            daily_versions=Count("pk", filter=Q(kind=NoteKind.DAILY)),
            daily_days=Count("day", distinct=True),
            latest=Max("created_at"),
        )
    )
    today_note = next((note for note in recall.daily if note.day and note.day >= today), None)
    return NoteShow(
        long_term=recall.long_term,
        today=today_note,
        recent=[note for note in recall.daily if note.day and note.day < today],
        long_term_versions=counts["long_term_versions"],
        daily_days=counts["daily_days"],
        daily_versions=counts["daily_versions"],
        latest_change_at=counts["latest"],
    )
