"""Gather what a session's context may contain (the impure half; assemble.py is the pure half).

Every read is bounded by the budget, not by the history: the last `max_messages` messages, at
most `max_memories` memories of each kind, the top facts, and 8 days of notes.
"""

from __future__ import annotations

import datetime as dt

from facts_app.selectors.facts import fact_search_for_person
from facts_app.selectors.memories import memory_lists_for_context
from facts_app.selectors.notes import note_recall_for_context
from memoryhub.accounts.models import Tenant
from memoryhub.context.types import (
    Budget,
    ContextInputs,
    FactItem,
    MemoryItem,
    MessageItem,
    NoteItem,
    SummaryItem,
)
from memoryhub.core.search import EmptySearchQuery
from sessions_app.models import MessageRole
from sessions_app.selectors import SessionForContext, message_tail_for_context

FACTS_TOP_K = 10
RECENT_NOTE_DAYS = 7


def context_inputs_for_session(
    *, tenant: Tenant, found: SessionForContext, budget: Budget, query: str, today: dt.date
) -> ContextInputs:
    """The inputs of assemble_context for one session (from `session_get_for_context`, which
    also brought its current summary). `query` picks the facts; without it the latest user
    message does (seed 004's injection).

    Four queries: the last messages, the memories (both lists), the fact search, the notes."""
    tail = message_tail_for_context(tenant=tenant, session_id=found.id, last=budget.max_messages)
    messages = [
        MessageItem(
            seq=row.seq,
            role=row.role,
            content=row.content,
            name=row.name,
            tool_call_id=row.tool_call_id,
            tool_calls=row.tool_calls,
            token_count=row.token_count,
        )
        for row in tail.messages
    ]
    # The assembler uses it only when history is cut (by max_messages or by the budget, which
    # only it knows); a session without messages has no history to cut, so it gets none.
    summary = (
        SummaryItem(text=found.summary_text, through_seq=found.summary_through_seq)
        if messages and found.summary_text is not None and found.summary_through_seq is not None
        else None
    )
    end_user_id = found.end_user_id
    memories = memory_lists_for_context(
        tenant_id=tenant.pk, end_user_id=end_user_id, limit=budget.max_memories
    )
    tenant_memories = [
        MemoryItem(key=row.key, content=row.content, pinned=row.pinned, tenant_wide=True)
        for row in memories.tenant_wide
    ]
    if end_user_id is None:
        return ContextInputs(
            today=today,
            tenant_memories=tenant_memories,
            summary=summary,
            messages=messages,
            earlier_messages_exist=tail.has_more,
        )

    user_memories = [
        MemoryItem(key=row.key, content=row.content, pinned=row.pinned) for row in memories.personal
    ]
    search_text = query or next(
        (m.content for m in reversed(messages) if m.role == MessageRole.USER), ""
    )
    facts: list[FactItem] = []
    if search_text:
        try:
            hits = fact_search_for_person(
                tenant_id=tenant.pk, end_user_id=end_user_id, query=search_text, top_k=FACTS_TOP_K
            )
        except EmptySearchQuery:
            hits = []
        facts = [FactItem(id=hit.id, content=hit.content, score=hit.score) for hit in hits]

    notes = note_recall_for_context(
        tenant_id=tenant.pk, end_user_id=end_user_id, today=today, days=RECENT_NOTE_DAYS + 1
    )
    long_term = notes.long_term
    daily = [NoteItem(day=note.day, content=note.content) for note in notes.daily]
    return ContextInputs(
        today=today,
        tenant_memories=tenant_memories,
        user_memories=user_memories,
        facts=facts,
        long_term_note=(
            NoteItem(day=None, content=long_term.content)
            if long_term is not None and long_term.content
            else None
        ),
        # A note dated tomorrow (a bot ahead of UTC) reads as today's.
        today_note=next((note for note in daily if note.day and note.day >= today), None),
        recent_notes=[note for note in daily if note.day and note.day < today],
        summary=summary,
        messages=messages,
        earlier_messages_exist=tail.has_more,
    )
