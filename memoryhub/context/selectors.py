"""The context's own read: a session's last messages, its person's memories and notes in one
statement (the gather's other reads depend on what this one finds)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connections, router

from facts_app.recall import FactCandidate
from facts_app.selectors.facts import candidates_from_rows, current_candidates_query
from facts_app.selectors.memories import (
    CONTEXT_RANKED_MEMORIES_SQL,
    MemoryLists,
    context_ranked_memories_params,
    memory_lists_from_rows,
)
from facts_app.selectors.notes import ContextNotes, context_notes_from_rows, context_notes_query
from memoryhub.accounts.models import Tenant
from memoryhub.core.prepared import statements_prepared
from memoryhub.core.rows import compiled_timestamps
from sessions_app.models import Message
from sessions_app.selectors import MessageTail, message_tail_from_rows, message_tail_query

# The three reads of message_tail_for_context, memory_lists_for_context and
# note_recall_for_context, each as it is, one after the other, and optionally the facts' ranking
# candidates (facts_app.selectors.facts.current_candidates_query): a round trip instead of four
# before nearly every model call a bot makes. A row's "part" says which read it comes from, and
# the columns are each read's own (NULL in the others' rows): 0 a message (newest first), 1 a
# memory (in memory_list's order), 2 a note, 3 a fact (newest first: "place"). (PostgreSQL types
# a UNION's columns pair by pair: those NULL in the first part are typed there.)
_CONTEXT_READS_SQL = """
SELECT 0 AS "part", "seq", "role", "content", "name", "tool_call_id", "tool_calls",
       "token_count", NULL AS "end_user_id", NULL AS "key", NULL AS "pinned", NULL AS "place",
       CAST(NULL AS DATE) AS "day", CAST(NULL AS BIGINT) AS "id",
       CAST(NULL AS TIMESTAMPTZ) AS "created_at",
       CAST(NULL AS TIMESTAMPTZ) AS "vector_written_at"
FROM ({messages}) AS "messages"
UNION ALL
SELECT 1, NULL, NULL, CASE WHEN "place" <= %s THEN "content" END, NULL, NULL, NULL, NULL,
       "end_user_id", "key", "pinned", "place", NULL, NULL, NULL, NULL
FROM ({memories}) AS "memories"
UNION ALL
SELECT 2, NULL, NULL, "content", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "day", NULL,
       NULL, NULL
FROM ({notes}) AS "notes"{facts}
ORDER BY "part", "seq" DESC, "pinned" DESC, "key", "place"
"""
_FACTS_PART_SQL = """
UNION ALL
SELECT 3, NULL, NULL, "content", NULL, NULL, "tags", NULL, "end_user_id", NULL, NULL,
       ROW_NUMBER() OVER (ORDER BY "created_at" DESC, "id" DESC), NULL, "id", "created_at",
       CAST("vector_written_at" AS TIMESTAMPTZ)
FROM ({candidates}) AS "facts"
"""


@dataclass(frozen=True)
class ContextReads:
    tail: MessageTail
    memories: MemoryLists
    notes: ContextNotes  # none without a person
    # Whether the facts' ranking candidates came with this read (`with_facts`), and they (None:
    # too many, the database ranks them).
    facts_read: bool = False
    fact_candidates: list[FactCandidate] | None = None


def context_reads_for_session(
    *,
    tenant: Tenant,
    session_id: uuid.UUID,
    end_user_id: int | None,
    last: int,
    max_memories: int,
    today: dt.date,
    note_days: int,
    with_facts: bool = False,
) -> ContextReads:
    """`message_tail_for_context(last=last)`, `memory_lists_for_context(limit=max_memories)`
    and, for a person, `note_recall_for_context(days=note_days)`, in one query; `with_facts`
    adds the facts' ranking candidates (the person's and the tenant-wide ones) that
    fact_recall_for_context would read, where they can come this way (`facts_read` says)."""
    limit = max(max_memories, 0)
    connection = connections[router.db_for_read(Message)]
    messages_sql, messages_params = message_tail_query(
        connection=connection, tenant_id=tenant.pk, session_id=session_id, last=last
    )
    notes_sql, notes_params = context_notes_query(
        connection=connection,
        tenant_id=tenant.pk,
        end_user_id=end_user_id,
        today=today,
        days=note_days,
    )
    facts_sql = ""
    facts_params: list[Any] = []
    # Not on SQLite: a UNION loses the column's declared type there, and with it the conversion
    # of the facts' times (they would come back as text). Not for a tenant bound to a person:
    # its narrowing is the ORM's. Their own read follows instead.
    with_facts = with_facts and connection.vendor == "postgresql" and tenant.person is None
    if with_facts:
        candidates_sql, facts_params = current_candidates_query(
            connection=connection, tenant_id=tenant.pk, end_user_id=end_user_id, tenant_wide=True
        )
        facts_sql = _FACTS_PART_SQL.format(candidates=candidates_sql.strip())
    sql = _CONTEXT_READS_SQL.format(
        messages=messages_sql,
        memories=CONTEXT_RANKED_MEMORIES_SQL,
        notes=notes_sql,
        facts=facts_sql,
    )
    params = [
        *messages_params,
        limit,
        *context_ranked_memories_params(
            connection=connection, tenant_id=tenant.pk, end_user_id=end_user_id
        ),
        # end_user_id None: "end_user_id" = NULL matches no note.
        *notes_params,
        *facts_params,
    ]
    # Prepared (memoryhub.core.prepared): with the limits written in, its generic plan is its
    # custom one, and planning it was 0.6 ms of its 1.6 before every context call.
    with statements_prepared(using=connection.alias), connection.cursor() as cursor:
        if with_facts:
            compiled_timestamps(cursor)
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return ContextReads(
        tail=message_tail_from_rows((row[1:8] for row in rows if row[0] == 0), last=last),
        memories=memory_lists_from_rows(
            ((row[8], row[9], row[3], row[10], row[11]) for row in rows if row[0] == 1),
            limit=limit,
        ),
        notes=context_notes_from_rows((row[12], row[3]) for row in rows if row[0] == 2),
        facts_read=with_facts,
        fact_candidates=candidates_from_rows(
            (row[13], row[8], row[3], row[6], row[14], row[15]) for row in rows if row[0] == 3
        )
        if with_facts
        else None,
    )
