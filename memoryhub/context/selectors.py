"""The context's own read: a session's last messages, its person's memories and notes in one
statement (the gather's other reads depend on what this one finds)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from django.db import connections, router

from facts_app.selectors.memories import (
    CONTEXT_RANKED_MEMORIES_SQL,
    MemoryLists,
    context_ranked_memories_params,
    memory_lists_from_rows,
)
from facts_app.selectors.notes import ContextNotes, context_notes_from_rows, context_notes_query
from memoryhub.accounts.models import Tenant
from sessions_app.models import Message
from sessions_app.selectors import MessageTail, message_tail_from_rows, message_tail_query

# The three reads of message_tail_for_context, memory_lists_for_context and
# note_recall_for_context, each as it is, one after the other: a round trip instead of three
# before nearly every model call a bot makes. A row's "part" says which read it comes from, and
# the columns are each read's own (NULL in the others' rows): 0 a message (newest first), 1 a
# memory (in memory_list's order), 2 a note. (PostgreSQL types a UNION's columns pair by pair:
# "day", NULL in the first two, is typed in the first.)
_CONTEXT_READS_SQL = """
SELECT 0 AS "part", "seq", "role", "content", "name", "tool_call_id", "tool_calls",
       "token_count", NULL AS "end_user_id", NULL AS "key", NULL AS "pinned", NULL AS "place",
       CAST(NULL AS DATE) AS "day"
FROM ({messages}) AS "messages"
UNION ALL
SELECT 1, NULL, NULL, CASE WHEN "place" <= %s THEN "content" END, NULL, NULL, NULL, NULL,
       "end_user_id", "key", "pinned", "place", NULL
FROM ({memories}) AS "memories"
UNION ALL
SELECT 2, NULL, NULL, "content", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "day"
FROM ({notes}) AS "notes"
ORDER BY "part", "seq" DESC, "pinned" DESC, "key"
"""


@dataclass(frozen=True)
class ContextReads:
    tail: MessageTail
    memories: MemoryLists
    notes: ContextNotes  # none without a person


def context_reads_for_session(
    *,
    tenant: Tenant,
    session_id: uuid.UUID,
    end_user_id: int | None,
    last: int,
    max_memories: int,
    today: dt.date,
    note_days: int,
) -> ContextReads:
    """`message_tail_for_context(last=last)`, `memory_lists_for_context(limit=max_memories)`
    and, for a person, `note_recall_for_context(days=note_days)`, in one query."""
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
    sql = _CONTEXT_READS_SQL.format(
        messages=messages_sql, memories=CONTEXT_RANKED_MEMORIES_SQL, notes=notes_sql
    )
    params = [
        *messages_params,
        limit,
        *context_ranked_memories_params(
            connection=connection, tenant_id=tenant.pk, end_user_id=end_user_id
        ),
        # end_user_id None: "end_user_id" = NULL matches no note.
        *notes_params,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return ContextReads(
        tail=message_tail_from_rows((row[1:8] for row in rows if row[0] == 0), last=last),
        memories=memory_lists_from_rows(
            ((row[8], row[9], row[3], row[10], row[11]) for row in rows if row[0] == 1),
            limit=limit,
        ),
        notes=context_notes_from_rows((row[12], row[3]) for row in rows if row[0] == 2),
    )
