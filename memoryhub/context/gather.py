"""Gather what a session's context may contain (the impure half; assemble.py is the pure half).

Every read is bounded by the budget, not by the history: the last `max_messages` messages, at
most `max_memories` memories of each kind, the top facts, and 8 days of notes.
"""

from __future__ import annotations

import datetime as dt

from facts_app.selectors.facts import FactFilters, fact_search
from facts_app.selectors.memories import memory_list
from facts_app.selectors.notes import note_recall
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
from sessions_app.models import MessageRole, Session
from sessions_app.selectors import message_page_for_tenant, summary_current

FACTS_TOP_K = 10
RECENT_NOTE_DAYS = 7


def context_inputs_for_session(
    *, tenant: Tenant, session: Session, budget: Budget, query: str, today: dt.date
) -> ContextInputs:
    """The inputs of assemble_context for one session. `query` picks the facts; without it the
    latest user message does (seed 004's injection)."""
    page = message_page_for_tenant(tenant=tenant, session_id=session.pk, last=budget.max_messages)
    messages = [
        MessageItem(
            seq=message.seq,
            role=message.role,
            content=message.content,
            name=message.name,
            tool_call_id=message.tool_call_id,
            tool_calls=message.tool_calls,
            token_count=message.token_count,
        )
        for message in page.messages
    ]
    # The assembler uses it only when history is cut (by max_messages or by the budget, which
    # only it knows), so any session with messages asks: one probe of a unique index.
    current = summary_current(tenant_id=tenant.pk, session_id=session.pk) if page.messages else None
    summary = SummaryItem(text=current.text, through_seq=current.through_seq) if current else None
    tenant_memories = [
        MemoryItem(key=memory.key, content=memory.content, pinned=memory.pinned, tenant_wide=True)
        for memory in memory_list(tenant=tenant, end_user=None)[: budget.max_memories]
    ]
    end_user = session.end_user
    if end_user is None:
        return ContextInputs(
            today=today,
            tenant_memories=tenant_memories,
            summary=summary,
            messages=messages,
            earlier_messages_exist=page.has_more,
        )

    user_memories = [
        MemoryItem(key=memory.key, content=memory.content, pinned=memory.pinned)
        for memory in memory_list(tenant=tenant, end_user=end_user)[: budget.max_memories]
    ]
    search_text = query or next(
        (m.content for m in reversed(page.messages) if m.role == MessageRole.USER), ""
    )
    facts: list[FactItem] = []
    if search_text:
        try:
            hits = fact_search(
                tenant=tenant,
                query=search_text,
                filters=FactFilters(user_id=end_user.external_id),
                top_k=FACTS_TOP_K,
            )
        except EmptySearchQuery:
            hits = []
        facts = [
            FactItem(id=hit.fact.pk, content=hit.fact.content, score=hit.score) for hit in hits
        ]

    recall = note_recall(tenant=tenant, end_user=end_user, today=today, days=RECENT_NOTE_DAYS + 1)
    long_term = recall.long_term
    daily = [NoteItem(day=note.day, content=note.content) for note in recall.daily]
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
        earlier_messages_exist=page.has_more,
    )
