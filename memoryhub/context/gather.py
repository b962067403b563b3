"""Gather what a session's context may contain (the impure half; assemble.py is the pure half).

Every read is bounded by the budget, not by the history: the last `max_messages` messages, at
most `max_memories` memories of each kind (and the keys of the rest, to report them), the top
`max_facts` facts of the person and of the tenant, 8 days of notes, and as many relevant
earlier turns as the history share could show.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any

from facts_app.selectors.facts import fact_recall_for_context
from memoryhub.accounts.models import EndUser, Tenant
from memoryhub.context.selectors import ContextReads, context_reads_for_session
from memoryhub.context.types import (
    Budget,
    ContextInputs,
    FactItem,
    HistoryHit,
    HistoryTurn,
    MemoryItem,
    MessageItem,
    NoteItem,
    SummaryItem,
)
from memoryhub.core.search import EmptySearchQuery
from memoryhub.llm.embeddings import embed_query_ahead
from sessions_app.models import MessageRole
from sessions_app.recall import (
    HistoryTooLarge,
    MessageRecall,
    RecallResult,
    Token,
    message_recall,
    speaker_of,
)
from sessions_app.selectors import (
    TURN_FIELDS,
    SessionForContext,
    message_neighbours_for_context,
)

RECENT_NOTE_DAYS = 7
# Relevant history: as many hits as its share could show (a turn averages ~41 tokens, some are
# much shorter), and neighbours for the best few only: per token, hits alone recall more
# (shared/research/retrieval.md), but a one-line answer needs its question to be read.
HISTORY_TOKENS_PER_HIT = 40
HISTORY_MAX_HITS = 100
HISTORY_NEIGHBOUR_HITS = 3
# The messages around this many more of the best hits are read with the hits, in case some of
# the best ones are in the context's verbatim tail (left out of the history).
HISTORY_NEIGHBOUR_SLACK = 3


def context_inputs_for_session(
    *, tenant: Tenant, found: SessionForContext, budget: Budget, query: str, today: dt.date
) -> ContextInputs:
    """The inputs of assemble_context for one session (from `session_get_for_context`, which
    also brought its current summary). `query` picks the facts, the person's and the
    tenant-wide ones (a session without a person gets these alone); without it the latest user
    message does (seed 004's injection).

    One query: the last messages with the memories (both lists), the person's notes and the
    facts' ranking candidates (both owners; on SQLite, or for a tenant bound to a person, in a
    query of their own); with a history share (`budget.max_history_tokens`), the recall adds,
    when something matched, the hit rows and their neighbours (and, when the person's cached
    index is missing or stale beyond new appends, its rebuild); its version token came with the
    session."""
    # A `query`'s vector for the relevant history was started before the session was read
    # (session_context_for_tenant); the latest user turn's is started below, once it is known.
    history_wanted = budget.max_history_tokens > 0 and found.end_user_id is not None
    # The facts are searched for the query, else for the latest user turn the tail brings: with
    # a share for them, almost every call. Their ranking candidates come with the tail, the
    # memories and the notes where they can (one round trip for the four).
    reads = context_reads_for_session(
        tenant=tenant,
        session_id=found.id,
        end_user_id=found.end_user_id,
        last=budget.max_messages,
        max_memories=budget.max_memories,
        today=today,
        note_days=RECENT_NOTE_DAYS + 1,
        with_facts=budget.max_facts > 0,
    )
    tail = reads.tail
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
    memories = reads.memories
    tenant_memories = [
        MemoryItem(key=row.key, content=row.content, pinned=row.pinned, tenant_wide=True)
        for row in memories.tenant_wide
    ]
    search_text = query or next(
        (m.content for m in reversed(messages) if m.role == MessageRole.USER), ""
    )
    if search_text and not query and history_wanted:
        embed_query_ahead(search_text)
    facts = _facts(
        tenant=tenant, end_user_id=end_user_id, query=search_text, budget=budget, reads=reads
    )
    if end_user_id is None:
        return ContextInputs(
            today=today,
            tenant_memories=tenant_memories,
            tenant_memory_keys_cut=memories.tenant_wide_cut,
            facts=facts,
            summary=summary,
            messages=messages,
            earlier_messages_exist=tail.has_more,
        )

    user_memories = [
        MemoryItem(key=row.key, content=row.content, pinned=row.pinned) for row in memories.personal
    ]

    history: list[HistoryHit] = []
    if search_text and budget.max_history_tokens > 0:
        history = _relevant_history(
            tenant=tenant,
            end_user_id=end_user_id,
            token=None if found.person_versions is None else Token(*found.person_versions),
            session_id=found.id,
            # This session's turns from the first one in the verbatim tail on are shown there.
            tail_from_seq=messages[0].seq if messages else None,
            tail_size=len(messages),
            query=search_text,
            top_k=min(
                max(budget.max_history_tokens // HISTORY_TOKENS_PER_HIT, 1), HISTORY_MAX_HITS
            ),
        )

    long_term = reads.notes.long_term
    daily = [NoteItem(day=note.day, content=note.content) for note in reads.notes.daily]
    return ContextInputs(
        today=today,
        tenant_memories=tenant_memories,
        user_memories=user_memories,
        tenant_memory_keys_cut=memories.tenant_wide_cut,
        user_memory_keys_cut=memories.personal_cut,
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
        history=history,
    )


def _facts(
    *, tenant: Tenant, end_user_id: int | None, query: str, budget: Budget, reads: ContextReads
) -> list[FactItem]:
    """The person's facts best matching `query`, then the tenant-wide ones (each list ranked
    alone; their scores do not compare): `max_facts` of each, so the assembler has the
    tenant-wide ones to fall back on and reports what its `max_facts` cut."""
    if not query or budget.max_facts <= 0:
        return []
    try:
        found = fact_recall_for_context(
            tenant=tenant,
            end_user_id=end_user_id,
            query=query,
            top_k=budget.max_facts,
            candidates_read=reads.facts_read,
            candidates=reads.fact_candidates,
        )
    except EmptySearchQuery:
        return []
    return [
        *(FactItem(id=hit.id, content=hit.content, score=hit.score) for hit in found.personal),
        *(
            FactItem(id=hit.id, content=hit.content, score=hit.score, tenant_wide=True)
            for hit in found.tenant_wide
        ),
    ]


# What a history turn is made of, as `Message` fields (and the neighbours' keys).
_TURN_FIELDS = TURN_FIELDS


def _history_turn(row: Mapping[str, Any]) -> HistoryTurn:
    return HistoryTurn(
        id=row["id"],
        session_id=str(row["session_id"]),
        seq=row["seq"],
        speaker=speaker_of(name=row["name"], role=row["role"]),
        content=row["content"],
        created_at=row["created_at"],
    )


def _neighbours_by_place(
    *, tenant: Tenant, result: RecallResult, best: list[MessageRecall]
) -> dict[tuple[uuid.UUID, int], Mapping[str, Any]]:
    """The messages just before and after each of `best`, by (session, seq), as
    `message_neighbours_for_context` finds them. Mostly read with the hits (the index knows
    their ids); from the database only around a hit whose neighbours were not read with it, or
    whose next message the index did not hold while it lacked newer appends (that message may
    be one of them; an index holding every append knows a session's last message, and a round
    trip for it was 18 context calls in 400 at a hundred messages a session). The previous
    message of an indexed hit cannot be newer than the index, and a removed one would have
    rebuilt it."""
    found: dict[tuple[uuid.UUID, int], Mapping[str, Any]] = {
        (message.session_id, message.seq): {name: getattr(message, name) for name in _TURN_FIELDS}
        for message in result.neighbours.values()
    }
    unsure = [
        (r.message.session_id, r.message.seq)
        for r in best
        if r.hit.id not in result.neighbours_of
        or (
            (r.message.session_id, r.message.seq + 1) not in found
            and r.hit.id not in result.last_of_session
        )
    ]
    if unsure:
        found.update(message_neighbours_for_context(tenant=tenant, places=unsure))
    return found


def _relevant_history(
    *,
    tenant: Tenant,
    end_user_id: int,
    token: Token | None,
    session_id: uuid.UUID,
    tail_from_seq: int | None,
    tail_size: int,
    query: str,
    top_k: int,
) -> list[HistoryHit]:
    """The person's turns best matching `query`, best first, without this session's verbatim
    tail; the best HISTORY_NEIGHBOUR_HITS with the previous and next turn of their session."""

    def in_tail(session: uuid.UUID, seq: int) -> bool:
        return session == session_id and tail_from_seq is not None and seq >= tail_from_seq

    # The recall reads only the person's pk: no query for the row.
    person = EndUser(pk=end_user_id, tenant=tenant)
    # The tail is left out after the ranking (its ids are not read), so ask for as many more
    # hits as it could take; the newest turns are shown verbatim anyway, so an index that
    # lacks only the latest appends serves (and is refreshed after the response).
    try:
        result = message_recall(
            tenant=tenant,
            end_user=person,
            query=query,
            top_k=top_k + tail_size,
            accept_newer_appends=True,
            # A person over RECALL_INDEX_MAX_MESSAGES: their newest messages are searched.
            newest_window=True,
            fields=_TURN_FIELDS,
            token=token,  # read with the session, at the start of the request
            # Room for a few best hits in the verbatim tail, which are left out below.
            neighbours_of=HISTORY_NEIGHBOUR_HITS + HISTORY_NEIGHBOUR_SLACK,
        )
    except (EmptySearchQuery, HistoryTooLarge):
        return []
    hits = [r for r in result.hits if not in_tail(r.message.session_id, r.message.seq)][:top_k]
    around = _neighbours_by_place(tenant=tenant, result=result, best=hits[:HISTORY_NEIGHBOUR_HITS])
    history: list[HistoryHit] = []
    for r in hits:
        message = r.message
        neighbours = [
            around[place]
            for place in (
                (message.session_id, message.seq - 1),
                (message.session_id, message.seq + 1),
            )
            if place in around and not in_tail(*place)
        ]
        history.append(
            HistoryHit(
                turn=_history_turn({name: getattr(message, name) for name in _TURN_FIELDS}),
                score=r.hit.score,
                neighbours=[_history_turn(row) for row in neighbours],
            )
        )
    return history
