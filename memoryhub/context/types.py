"""The inputs and the result of context assembly: plain frozen dataclasses, no Django.

Selectors gather these from the database; `assemble_context` turns them into an `AssembledContext`
without touching the database, so it can be tested (and reasoned about) as a pure function.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class MemoryItem:
    key: str
    content: str
    pinned: bool = False
    tenant_wide: bool = False


@dataclass(frozen=True)
class FactItem:
    id: int
    content: str
    score: float
    tenant_wide: bool = False


@dataclass(frozen=True)
class NoteItem:
    day: datetime.date | None  # None is the long-term note
    content: str


@dataclass(frozen=True)
class SummaryItem:
    text: str
    through_seq: int


@dataclass(frozen=True)
class MessageItem:
    seq: int
    role: str
    content: str
    name: str = ""
    tool_call_id: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    token_count: int | None = None


@dataclass(frozen=True)
class HistoryTurn:
    """One of the person's earlier turns: from another session of theirs, or from this session's
    part older than its verbatim tail. `session_id` groups turns into conversations, `seq`
    orders them (one turn per session and seq; consecutive seqs are adjacent turns)."""

    id: int
    session_id: str
    seq: int
    speaker: str  # the message's name, else its role
    content: str
    created_at: datetime.datetime


@dataclass(frozen=True)
class HistoryHit:
    """A turn the recall ranked for the question, with the previous and next turn of its session
    when they were gathered (only for the best few hits: per token, hits alone recall more)."""

    turn: HistoryTurn
    score: float
    neighbours: Sequence[HistoryTurn] = ()


@dataclass(frozen=True)
class ContextInputs:
    today: datetime.date
    tenant_memories: Sequence[MemoryItem] = ()
    user_memories: Sequence[MemoryItem] = ()
    # The keys of the memories past max_memories, left out by the gather (only their keys were
    # read): reported as dropped for "max_memories", after the ones cut here.
    tenant_memory_keys_cut: Sequence[str] = ()
    user_memory_keys_cut: Sequence[str] = ()
    # Already ranked, best first: the person's, then the tenant-wide ones (each ranked alone).
    facts: Sequence[FactItem] = ()
    long_term_note: NoteItem | None = None
    today_note: NoteItem | None = None
    recent_notes: Sequence[NoteItem] = ()  # newest first, excluding today
    summary: SummaryItem | None = None
    # The most recent messages, OLDEST FIRST (seq ascending), at most max_messages of them.
    messages: Sequence[MessageItem] = ()
    # True when the session has messages older than the first one passed in.
    earlier_messages_exist: bool = False
    history: Sequence[HistoryHit] = ()  # already ranked, best first


@dataclass(frozen=True)
class Budget:
    max_tokens: int = 4000
    max_messages: int = 20
    max_memories: int = 50
    # How many of the ranked facts are considered (seed 004's MaxFacts), and the facts section's
    # own share of max_tokens (seed 004's MaxTokens; None: no share of its own).
    max_facts: int = 10
    facts_max_tokens: int | None = None
    # The relevant-history section's share of max_tokens (0: no such section).
    max_history_tokens: int = 1500


@dataclass(frozen=True)
class SectionReport:
    name: str
    tokens: int
    included: list[str]  # item labels, in output order
    dropped: list[tuple[str, str]]  # (label, reason), e.g. ("memory:diet", "budget")


@dataclass(frozen=True)
class AssembledContext:
    """The included items, in output order, and a report of what was left out and why.

    `total_tokens` is the budget charged (the sum of the sections' tokens); `markdown_tokens` and
    `messages_tokens` are exact counts of the two renderings. All three are at most `max_tokens`.
    """

    sections: list[SectionReport]
    total_tokens: int
    max_tokens: int
    memories: list[MemoryItem]
    facts: list[FactItem]
    long_term_note: NoteItem | None
    today_note: NoteItem | None
    recent_notes: list[NoteItem]
    summary: SummaryItem | None
    messages: list[MessageItem]
    markdown_tokens: int = 0
    messages_tokens: int = 0
    history: list[HistoryTurn] = field(default_factory=list)  # in output order
    # The two renderings, kept by the assembler, which made them for its final count, so that
    # the response does not make them again (render.render_markdown/render_messages return
    # them). Not init fields: `dataclasses.replace` drops them, so a changed copy is rendered
    # anew, never served a stale text.
    rendered_markdown: str | None = field(default=None, init=False, compare=False, repr=False)
    rendered_messages: list[dict[str, Any]] | None = field(
        default=None, init=False, compare=False, repr=False
    )
