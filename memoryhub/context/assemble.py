"""Context assembly: a pure, deterministic function from gathered inputs and a budget to what a bot
puts in front of its model (DESIGN.md §5). No database, no clock (`today` is an input), no I/O.

Priority: who claims the budget first
    0. The frame: the `<memory>` wrapper and the usage hints. If even that does not fit, nothing
       does and the result is empty.
    1. Messages, newest first: they are the conversation. Only the newest `max_messages` are
       considered (older ones: "max_messages"). They are taken a whole exchange at a time: a
       message with tool calls and the tool results answering it are shown together or not at
       all, so neither format ever holds a result without its call nor a call without its
       results (OpenAI-compatible APIs refuse both). Results whose call is older than the window
       go with it ("max_messages"); a call not (yet) fully answered, and a result that does not
       follow its call, are left out ("incomplete tool exchange"). The walk stops at the first
       exchange that does not fit, and it and everything older is dropped ("budget"): the
       transcript never has holes (but for incomplete exchanges).
    2. The summary, only when history was cut: `earlier_messages_exist`, or a message was dropped
       in step 1 for max_messages or the budget (otherwise: "history not truncated"). If it does
       not fit, it may displace the oldest included exchanges ("displaced by summary"), never the
       newest one; if it still would not fit, it is dropped ("budget") and nothing is displaced.
    3. Memories: tenant-wide ones (pinned first), then the user's pinned ones, then the rest of the
       user's. Each of the two lists is capped at `max_memories` ("max_memories"), and the keys
       the gather already cut there are reported alike.
    4. Facts, in the rank order given (the person's, then the tenant-wide ones), the first
       `max_facts` of them ("max_facts"), within the section's own share `facts_max_tokens` when
       there is one (seed 004's MaxFacts and MaxTokens). A duplicate id is dropped ("duplicate").
    5. Notes: the long-term note, today's note, then recent notes newest first. A recent note
       dated today, in the future, more than 7 days back or undated is dropped ("outside recent
       window").
    6. Relevant history: the person's earlier turns, in the rank order given, within its own share
       (`max_history_tokens`) of what is left. A hit given with neighbours is tried with them
       first, then alone. A turn shown already (as an earlier hit's neighbour) is not shown
       again; a repeated hit is dropped ("duplicate"); a neighbour left out is reported once,
       for the "budget" when it was tried, else because its hit was not shown ("hit not
       shown"). Claimed last, so it never takes anything from the sections above: with or
       without it they are the same. Its report appears only when there were candidates.
   In steps 3-6 an item that does not fit is dropped ("budget") and the next, possibly smaller,
   one is still tried. Items are added whole or not at all; the one exception is the long-term
   note, which when too big is cut at a line or word boundary and marked "[truncated]" (its cut
   tail is reported as ("note:long_term:tail", "budget")). Blank items are dropped ("empty").

Budget accounting: what is counted is what is rendered
    Every rendered piece (section header, bullet, note, transcript line) comes from
    `memoryhub.context.render`, and the budget is charged `count_tokens(piece)` for it. A section's
    header is charged with its first item. The frame is charged for the wrapper, the hints and one
    MESSAGE_OVERHEAD (the system message of the messages format). A message is charged the larger
    of its Markdown transcript line and its chat-message cost (MESSAGE_OVERHEAD + content + name +
    tool_call_id + tool_calls JSON, see `count_message_tokens`), and the "Recent Messages" header
    is charged with the first one; so the charge covers both formats. Adjacent history turns
    share one piece (a block of one conversation): a turn is charged what its block's count
    grows by, and as the budget is given back in the reverse order of claims, what is left is
    still the exact count of the blocks left. Real tokenizers are not exactly additive, so
    at the end both renderings are counted for real, and while either is over
    `max_tokens` the most recently claimed item (a message: with its exchange) is dropped
    ("budget"). Hence, always:
        count_tokens(render_markdown(ctx)) <= max_tokens
        messages_token_count(render_messages(ctx), count_tokens) <= max_tokens
        ctx.total_tokens == sum of the sections' tokens <= max_tokens

Cost: items are counted at most once (the long-term note: a binary search, O(log n) counts; a
history turn: the block it would make, each block counted once); an item longer than
MAX_CHARS_PER_TOKEN characters per token of room left is dropped without being counted, so nothing
is counted once the budget is spent and no single count is bigger than the budget allows. The
caller bounds the inputs (at most max_messages messages, bounded lists; the memory lists are cut
to max_memories before counting), so the work is bounded by the budget, not by the length of the
session. `MessageItem.token_count` is not used for the budget: the guarantee
must not depend on a number stored under another tokenizer.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from memoryhub.context import render
from memoryhub.context.render import (
    count_message_tokens,
    messages_token_count,
    render_markdown,
    render_messages,
)
from memoryhub.context.types import (
    AssembledContext,
    Budget,
    ContextInputs,
    FactItem,
    HistoryTurn,
    MemoryItem,
    MessageItem,
    NoteItem,
    SectionReport,
    SummaryItem,
)

__all__ = [
    "BUDGET",
    "DISPLACED",
    "DUPLICATE",
    "EMPTY",
    "HIT_NOT_SHOWN",
    "INCOMPLETE_EXCHANGE",
    "MAX_FACTS",
    "MAX_MEMORIES",
    "MAX_MESSAGES",
    "NOT_TRUNCATED",
    "OUTSIDE_WINDOW",
    "assemble_context",
    "count_message_tokens",
    "messages_token_count",
    "render_markdown",
    "render_messages",
]

# Why an item was dropped.
BUDGET = "budget"
MAX_MESSAGES = "max_messages"
MAX_MEMORIES = "max_memories"
NOT_TRUNCATED = "history not truncated"
DISPLACED = "displaced by summary"
DUPLICATE = "duplicate"
EMPTY = "empty"
OUTSIDE_WINDOW = "outside recent window"
HIT_NOT_SHOWN = "hit not shown"
MAX_FACTS = "max_facts"
INCOMPLETE_EXCHANGE = "incomplete tool exchange"

RECENT_NOTE_DAYS = 7
# No token of a real tokenizer is longer than this (o200k_base: 128 bytes), so a piece longer than
# this many characters per token of room cannot fit and is dropped without being counted.
MAX_CHARS_PER_TOKEN = 256
# A long-term note is cut only if at least this many tokens of it would remain worth showing.
MIN_TRUNCATED_NOTE_TOKENS = 16
LONG_TERM_LABEL = "note:long_term"
LONG_TERM_TAIL_LABEL = "note:long_term:tail"

# Sections in output order (also the order of the report).
SECTION_ORDER = (
    "frame",
    "memories",
    "facts",
    "long_term_note",
    "today_note",
    "recent_notes",
    "history",
    "summary",
    "messages",
)

Item = MemoryItem | FactItem | NoteItem | SummaryItem | MessageItem | HistoryTurn


@dataclass(frozen=True)
class _Entry:
    label: str
    charge: int
    item: Item


@dataclass
class _Section:
    name: str
    header_charge: int
    entries: list[_Entry] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    # The entries' charges, summed as they come and go (`tokens` is asked after every claim).
    charged: int = 0

    @property
    def tokens(self) -> int:
        if not self.entries:
            return 0
        return self.header_charge + self.charged


class _Assembler:
    def __init__(self, *, inputs: ContextInputs, budget: Budget, count: Callable[[str], int]):
        self.inputs = inputs
        self.budget = budget
        self.count = count
        self.max_tokens = max(budget.max_tokens, 0)
        self.sections = {
            name: _Section(name, 0 if name == "frame" else count(render.section_header(name)))
            for name in SECTION_ORDER
        }
        self.claims: list[tuple[_Section, _Entry]] = []  # in the order the budget was claimed
        # An included message's label -> the labels of its exchange (one list per exchange).
        self.exchange_of: dict[str, list[str]] = {}
        # The history turns shown by (session, seq), to find a turn's block without a sort.
        self.history_places: dict[tuple[str, int], HistoryTurn] = {}
        self.history_pieces: dict[tuple[int, ...], str] = {}
        self.history_counts: dict[tuple[int, ...], int] = {}
        self.frame_charge = count(render.OPEN) + count(render.CLOSE) + render.MESSAGE_OVERHEAD
        self.frame_fits = self.frame_charge <= self.max_tokens
        # When the frame does not fit, `used` starts over the limit and nothing else fits either.
        self.used = self.frame_charge

    # -- bookkeeping -------------------------------------------------------------------------

    def _room(self, section: _Section, share: int | None = None) -> int:
        """What the section's next item may cost: what is left of the budget, and of the
        section's own share of it when it has one (its header included in both)."""
        room = self.max_tokens - self.used
        if share is not None:
            room = min(room, share - section.tokens)
        return room - (0 if section.entries else section.header_charge)

    def _hopeless(self, section: _Section, piece: str, share: int | None = None) -> bool:
        """True when `piece` certainly cannot fit, decided without counting it."""
        room = self._room(section, share)
        return room <= 0 or len(piece) > MAX_CHARS_PER_TOKEN * room

    def _cost(self, section: _Section, charge: int) -> int:
        return charge + (0 if section.entries else section.header_charge)

    def _fits(self, section: _Section, charge: int, share: int | None = None) -> bool:
        return charge <= self._room(section, share)

    def _add(self, section: _Section, label: str, charge: int, item: Item) -> None:
        self.used += self._cost(section, charge)
        entry = _Entry(label, charge, item)
        section.entries.append(entry)
        section.charged += charge
        self.claims.append((section, entry))

    def _drop(self, section: _Section, label: str, reason: str) -> None:
        section.dropped.append((label, reason))

    def _remove(self, section: _Section, entry: _Entry, reason: str) -> None:
        before = section.tokens
        section.entries.remove(entry)
        section.charged -= entry.charge
        self.claims.remove((section, entry))
        self.used -= before - section.tokens
        if entry.label == LONG_TERM_LABEL:
            section.dropped = [d for d in section.dropped if d[0] != LONG_TERM_TAIL_LABEL]
        section.dropped.append((entry.label, reason))

    def _offer(
        self, section: _Section, label: str, piece: str, item: Item, share: int | None = None
    ) -> bool:
        """Add an item whole if it fits (the budget, and the section's share when it has one);
        otherwise drop it for the budget."""
        if self._hopeless(section, piece, share):  # once spent, nothing more is counted
            self._drop(section, label, BUDGET)
            return False
        charge = self.count(piece)
        if self._fits(section, charge, share):
            self._add(section, label, charge, item)
            return True
        self._drop(section, label, BUDGET)
        return False

    # -- the steps ---------------------------------------------------------------------------

    def messages(self) -> bool:
        """Newest first, a whole exchange at a time, until max_messages or the budget; returns
        whether history was cut."""
        section = self.sections["messages"]
        messages = list(self.inputs.messages)
        start = max(len(messages) - max(self.budget.max_messages, 0), 0)
        candidates, over_limit = messages[start:], messages[:start]
        earlier = bool(over_limit) or self.inputs.earlier_messages_exist
        stopped = False
        for block, reason in reversed(_exchanges(candidates, earlier=earlier)):
            labels = [f"message:{message.seq}" for message in block]
            if reason is not None:
                for label in reversed(labels):
                    self._drop(section, label, reason)
                continue
            charges = None if stopped else self._exchange_charges(section, block)
            if charges is None:
                stopped = True
                for label in reversed(labels):
                    self._drop(section, label, BUDGET)
                continue
            # Claimed newest first, like single messages, so the oldest claim is given back first.
            for label, charge, message in reversed(list(zip(labels, charges, block, strict=True))):
                self._add(section, label, charge, message)
                self.exchange_of[label] = labels
        for message in reversed(over_limit):
            self._drop(section, f"message:{message.seq}", MAX_MESSAGES)
        return earlier or stopped

    def _exchange_charges(self, section: _Section, block: list[MessageItem]) -> list[int] | None:
        """What each message of an exchange is charged, or None when the exchange cannot fit
        (decided without counting once the budget is spent)."""
        lines = [render.transcript_line(message) for message in block]
        room = self._room(section)
        if room <= 0 or sum(map(len, lines)) > MAX_CHARS_PER_TOKEN * room:
            return None
        charges = [
            max(self.count(line), count_message_tokens(render.message_dict(message), self.count))
            for message, line in zip(block, lines, strict=True)
        ]
        return charges if sum(charges) <= room else None

    def _remove_exchange(self, entry: _Entry, reason: str) -> None:
        """Remove an included message with the rest of its exchange (a tool call is never shown
        without its results, nor a result without its call)."""
        section = self.sections["messages"]
        labels = self.exchange_of.get(entry.label, [entry.label])
        for other in [e for e in section.entries if e.label in labels]:
            self._remove(section, other, reason)

    def summary(self, *, truncated: bool) -> None:
        summary = self.inputs.summary
        section = self.sections["summary"]
        if summary is None:
            return
        if not truncated:
            self._drop(section, "summary", NOT_TRUNCATED)
            return
        if not summary.text.strip():
            self._drop(section, "summary", EMPTY)
            return
        piece = render.summary_piece(summary)
        if not self.frame_fits or len(piece) > MAX_CHARS_PER_TOKEN * self.max_tokens:
            self._drop(section, "summary", BUDGET)
            return
        charge = self.count(piece)
        if self._fits(section, charge):
            self._add(section, "summary", charge, summary)
            return
        # Make room by displacing the oldest included exchanges, but never the newest one.
        messages = self.sections["messages"]
        shortfall = self.used + self._cost(section, charge) - self.max_tokens
        exchanges: list[list[_Entry]] = []  # newest first, like the entries
        for entry in messages.entries:
            if (
                exchanges
                and self.exchange_of[entry.label] is self.exchange_of[exchanges[-1][0].label]
            ):
                exchanges[-1].append(entry)
            else:
                exchanges.append([entry])
        victims: list[_Entry] = []
        freed = 0
        for exchange in reversed(exchanges[1:]):
            if freed >= shortfall:
                break
            victims.extend(reversed(exchange))  # oldest first, as reported
            freed += sum(entry.charge for entry in exchange)
        if freed < shortfall:
            self._drop(section, "summary", BUDGET)
            return
        for entry in victims:
            self._remove(messages, entry, DISPLACED)
        self._add(section, "summary", charge, summary)

    def memories(self) -> None:
        section = self.sections["memories"]
        limit = max(self.budget.max_memories, 0)
        groups = (
            ("tenant_memory", self.inputs.tenant_memories),
            ("memory", self.inputs.user_memories),
        )
        for prefix, memories in groups:
            # Pinned first; sorted() is stable, so the caller's order holds within each tier.
            ordered = sorted(memories, key=lambda memory: not memory.pinned)
            for position, memory in enumerate(ordered):
                label = f"{prefix}:{memory.key}"
                if position >= limit:
                    self._drop(section, label, MAX_MEMORIES)
                elif not memory.content.strip():
                    self._drop(section, label, EMPTY)
                else:
                    self._offer(section, label, render.memory_piece(memory), memory)
        # Past max_memories already where they were read: only their keys came along.
        for prefix, keys in (
            ("tenant_memory", self.inputs.tenant_memory_keys_cut),
            ("memory", self.inputs.user_memory_keys_cut),
        ):
            for key in keys:
                self._drop(section, f"{prefix}:{key}", MAX_MEMORIES)

    def facts(self) -> None:
        section = self.sections["facts"]
        limit = max(self.budget.max_facts, 0)
        share = self.budget.facts_max_tokens
        share = None if share is None else max(share, 0)
        seen: set[int] = set()
        for fact in self.inputs.facts:
            label = f"fact:{fact.id}"
            if fact.id in seen:
                self._drop(section, label, DUPLICATE)
                continue
            seen.add(fact.id)
            if len(seen) > limit:
                self._drop(section, label, MAX_FACTS)
            elif not fact.content.strip():
                self._drop(section, label, EMPTY)
            else:
                self._offer(section, label, render.fact_piece(fact), fact, share)

    def notes(self) -> None:
        self._long_term_note()
        today = self.inputs.today
        note = self.inputs.today_note
        if note is not None:
            note = replace(note, day=note.day or today)
            section = self.sections["today_note"]
            label = f"note:{today.isoformat()}"
            if not note.content.strip():
                self._drop(section, label, EMPTY)
            else:
                self._offer(section, label, render.note_piece(note), note)
        section = self.sections["recent_notes"]
        oldest = today - datetime.timedelta(days=RECENT_NOTE_DAYS)
        for position, note in enumerate(self.inputs.recent_notes):
            if note.day is None:
                self._drop(section, f"note:recent:{position}", OUTSIDE_WINDOW)
                continue
            label = f"note:{note.day.isoformat()}"
            if not oldest <= note.day < today:
                self._drop(section, label, OUTSIDE_WINDOW)
            elif not note.content.strip():
                self._drop(section, label, EMPTY)
            else:
                self._offer(section, label, render.note_piece(note), note)

    def _long_term_note(self) -> None:
        note = self.inputs.long_term_note
        section = self.sections["long_term_note"]
        if note is None:
            return
        note = replace(note, day=None)
        if not note.content.strip():
            self._drop(section, LONG_TERM_LABEL, EMPTY)
            return
        piece = render.note_piece(note)
        if not self._hopeless(section, piece):
            charge = self.count(piece)
            if self._fits(section, charge):
                self._add(section, LONG_TERM_LABEL, charge, note)
                return
        cut = self._truncated(note, available=self._room(section))
        if cut is None:
            self._drop(section, LONG_TERM_LABEL, BUDGET)
            return
        self._add(section, LONG_TERM_LABEL, self.count(render.note_piece(cut)), cut)
        self._drop(section, LONG_TERM_TAIL_LABEL, BUDGET)

    def _truncated(self, note: NoteItem, *, available: int) -> NoteItem | None:
        """The longest head of the note (cut at a line or word boundary when that keeps most of
        it) that fits in `available` tokens with its "[truncated]" marker, or None."""
        if available < MIN_TRUNCATED_NOTE_TOKENS:
            return None
        text = note.content.strip()

        def head(length: int) -> NoteItem:
            return replace(note, content=f"{text[:length].rstrip()}\n{render.TRUNCATED_MARKER}")

        def fits(length: int) -> bool:
            return self.count(render.note_piece(head(length))) <= available

        # A token is rarely longer than 64 characters, so this bounds what gets counted.
        low, high = 0, min(len(text), available * 64)
        while low < high:
            middle = (low + high + 1) // 2
            if fits(middle):
                low = middle
            else:
                high = middle - 1
        if low == 0:
            return None
        for boundary in ("\n", " "):
            at = text.rfind(boundary, 0, low + 1)
            if at >= low // 2 and at > 0 and fits(at):
                return head(at)
        return head(low) if fits(low) else None

    def history(self) -> None:
        hits = self.inputs.history
        section = self.sections["history"]
        share = max(self.budget.max_history_tokens, 0)
        shown: set[int] = set()  # turn ids, mirrors the section's entries until the final loop
        hit_ids: set[int] = set()
        tried: set[int] = set()  # neighbour ids offered at least once
        for hit in hits:
            turn = hit.turn
            label = f"history:{turn.id}"
            if turn.id in hit_ids:
                self._drop(section, label, DUPLICATE)
                continue
            hit_ids.add(turn.id)
            if not turn.content.strip():
                self._drop(section, label, EMPTY)
                continue
            group = [] if turn.id in shown else [turn]
            # An earlier hit left out stays out: it is reported once, as a hit.
            extra = {
                neighbour.id: neighbour
                for neighbour in hit.neighbours
                if neighbour.id not in shown
                and neighbour.id not in hit_ids
                and neighbour.content.strip()
            }
            tried.update(extra)
            if extra and self._offer_turns(section, [*group, *extra.values()], share, shown):
                continue
            if group and not self._offer_turns(section, group, share, shown):
                self._drop(section, label, BUDGET)
        # Neighbours that are hits themselves were reported as hits.
        left_out: dict[int, str] = {}
        for hit in hits:
            for neighbour in hit.neighbours:
                if neighbour.id in shown or neighbour.id in hit_ids or neighbour.id in left_out:
                    continue
                if not neighbour.content.strip():
                    left_out[neighbour.id] = EMPTY
                else:
                    left_out[neighbour.id] = BUDGET if neighbour.id in tried else HIT_NOT_SHOWN
        for turn_id, reason in left_out.items():
            self._drop(section, f"history:{turn_id}", reason)

    def _offer_turns(
        self, section: _Section, turns: list[HistoryTurn], share: int, shown: set[int]
    ) -> bool:
        """Add `turns` (all of them or none) if they fit both the budget and the share."""
        room = min(self.max_tokens - self.used, share - section.tokens)
        room -= 0 if section.entries else section.header_charge
        places = dict(self.history_places)
        charges: list[int] = []
        for turn in turns:
            charge = self._turn_charge(places, turn, room=room - sum(charges))
            if charge is None:
                return False
            charges.append(charge)
            places[(turn.session_id, turn.seq)] = turn
        if sum(charges) > room:
            return False
        for turn, charge in zip(turns, charges, strict=True):
            self._add(section, f"history:{turn.id}", charge, turn)
            shown.add(turn.id)
        self.history_places = places
        return True

    def _turn_charge(
        self, places: dict[tuple[str, int], HistoryTurn], turn: HistoryTurn, *, room: int
    ) -> int | None:
        """What adding `turn` to the shown turns (by place) costs: its block's count after,
        minus the counts of the (at most two) blocks it joins. None when it cannot fit."""
        if room <= 0:
            return None
        before: list[HistoryTurn] = []
        while (place := (turn.session_id, turn.seq - len(before) - 1)) in places:
            before.append(places[place])
        after: list[HistoryTurn] = []
        while (place := (turn.session_id, turn.seq + len(after) + 1)) in places:
            after.append(places[place])
        parts = [part for part in (before[::-1], after) if part]
        block = [*before[::-1], turn, *after]
        grown = len(self._history_piece(block)) - sum(
            len(self._history_piece(part)) for part in parts
        )
        if grown > MAX_CHARS_PER_TOKEN * room:
            return None  # nothing is counted once the share or the budget is spent
        return self._history_count(block) - sum(self._history_count(part) for part in parts)

    # A block is looked at again each time a turn joins it or tries to: remember its rendering
    # and its count (the parts a turn joins were counted when they were shown).
    def _history_piece(self, block: list[HistoryTurn]) -> str:
        key = tuple(turn.id for turn in block)
        if key not in self.history_pieces:
            self.history_pieces[key] = render.history_piece(block)
        return self.history_pieces[key]

    def _history_count(self, block: list[HistoryTurn]) -> int:
        key = tuple(turn.id for turn in block)
        if key not in self.history_counts:
            self.history_counts[key] = self.count(self._history_piece(block))
        return self.history_counts[key]

    # -- the result --------------------------------------------------------------------------

    def result(self) -> AssembledContext:
        included_anything = bool(self.claims)
        frame_tokens = self.frame_charge if included_anything else 0
        reports: list[SectionReport] = []
        for name, section in self.sections.items():
            if name == "history" and not self.inputs.history:
                continue  # reported only when there were candidates: most contexts have none
            if name == "frame":
                dropped = [] if self.frame_fits else [("hints", BUDGET)]
                reports.append(
                    SectionReport(
                        name="frame",
                        tokens=frame_tokens,
                        included=["hints"] if included_anything else [],
                        dropped=dropped,
                    )
                )
                continue
            labels = [entry.label for entry in section.entries]
            if name == "history":  # claimed in rank order, output in time order
                labels = [f"history:{t.id}" for t in self._history_shown()]
            reports.append(
                SectionReport(
                    name=name,
                    tokens=section.tokens,
                    # Messages are claimed newest first but output oldest first.
                    included=labels[::-1] if name == "messages" else labels,
                    dropped=list(section.dropped),
                )
            )

        def items(name: str) -> list[Item]:
            return [entry.item for entry in self.sections[name].entries]

        long_term = [n for n in items("long_term_note") if isinstance(n, NoteItem)]
        today = [n for n in items("today_note") if isinstance(n, NoteItem)]
        summary = [s for s in items("summary") if isinstance(s, SummaryItem)]
        messages = [m for m in items("messages") if isinstance(m, MessageItem)]
        return AssembledContext(
            sections=reports,
            total_tokens=sum(report.tokens for report in reports),
            max_tokens=self.max_tokens,
            memories=[m for m in items("memories") if isinstance(m, MemoryItem)],
            facts=[f for f in items("facts") if isinstance(f, FactItem)],
            long_term_note=long_term[0] if long_term else None,
            today_note=today[0] if today else None,
            recent_notes=[n for n in items("recent_notes") if isinstance(n, NoteItem)],
            summary=summary[0] if summary else None,
            messages=messages[::-1],  # claimed newest first, output oldest first
            history=self._history_shown(),
        )

    def _history_shown(self) -> list[HistoryTurn]:
        turns = [
            e.item for e in self.sections["history"].entries if isinstance(e.item, HistoryTurn)
        ]
        return [turn for block in render.history_blocks(turns) for turn in block]

    def drop_last_claim(self) -> None:
        section, entry = self.claims[-1]
        if section.name == "messages":
            self._remove_exchange(entry, BUDGET)
        else:
            self._remove(section, entry, BUDGET)


def _exchanges(
    messages: list[MessageItem], *, earlier: bool
) -> list[tuple[list[MessageItem], str | None]]:
    """The messages (oldest first) as the units they are shown or left out in, oldest first,
    each with why it must be left out (None: it may be shown).

    A message with `tool_calls` and the tool results right after it that answer it are one
    exchange, shown whole only when every call is answered: an OpenAI-compatible API refuses a
    call without its results and a result without its call. So a call still waiting for its
    results (or never answered), and a result that does not follow its call, are left out
    ("incomplete tool exchange"); results at the start whose call is older than the window
    were cut with it ("max_messages"). Every other message is a unit of its own."""
    units: list[tuple[list[MessageItem], str | None]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        if message.tool_calls:
            ids = [
                call.get("id") if isinstance(call, dict) else None for call in message.tool_calls
            ]
            # Its results are the tool messages right after it, one per call, in any order.
            answered: set[str] = set()
            end = index + 1
            while end < len(messages) and messages[end].role == "tool":
                call_id = messages[end].tool_call_id
                if call_id not in ids or call_id in answered:
                    break
                answered.add(call_id)
                end += 1
            whole = len(answered) == len(ids) and all(ids)
            units.append((messages[index:end], None if whole else INCOMPLETE_EXCHANGE))
            index = end
        elif message.role == "tool":
            # At the very start, its call is older than the window when there is anything older.
            first = all(unit[0][0].role == "tool" for unit in units)
            units.append(([message], MAX_MESSAGES if earlier and first else INCOMPLETE_EXCHANGE))
            index += 1
        else:
            units.append(([message], None))
            index += 1
    return units


def assemble_context(
    *, inputs: ContextInputs, budget: Budget, count_tokens: Callable[[str], int]
) -> AssembledContext:
    """Choose what goes into the context, within `budget`; see the module docstring."""
    assembler = _Assembler(inputs=inputs, budget=budget, count=count_tokens)
    truncated = assembler.messages()
    assembler.summary(truncated=truncated)
    assembler.memories()
    assembler.facts()
    assembler.notes()
    assembler.history()
    while True:
        context = assembler.result()
        markdown, messages = render.render_both(context)
        markdown_tokens = count_tokens(markdown)
        messages_tokens = messages_token_count(messages, count_tokens)
        if max(markdown_tokens, messages_tokens) <= assembler.max_tokens or not assembler.claims:
            final = replace(
                context, markdown_tokens=markdown_tokens, messages_tokens=messages_tokens
            )
            # Rendered just now from the same items: the response renders no third time.
            object.__setattr__(final, "rendered_markdown", markdown)
            object.__setattr__(final, "rendered_messages", messages)
            return final
        # The tokenizer was not additive at some seam: give back the last thing claimed.
        assembler.drop_last_claim()
