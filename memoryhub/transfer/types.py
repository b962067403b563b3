"""What an importer hands the sink: plain records, independent of where they were read from.

Each format's reader (MemoryHub's own JSONL, basic-session, PicoBot, bub, sclaw) turns its input
into these, one session (with its messages, state and summaries) or one long-term item at a
time, so an import streams: memory stays flat however large the input. `origin` names the file
and line a record came from, for the report; `source_id` is the record's identity in its source,
which makes a re-run of the same import add nothing. A record a reader cannot read is a Skipped
(see formats/base.py).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Origin:
    """Where a record came from: "memory/sessions.json", line 12 (0 when lines mean nothing)."""

    path: str
    line: int = 0

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


@dataclass
class ImportedMessage:
    role: str
    content: str = ""
    created_at: dt.datetime | None = None
    name: str = ""
    tool_call_id: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # Kept from MemoryHub's own export so a round trip is exact; else assigned in order.
    seq: int | None = None
    token_count: int | None = None  # counted on import when the source has none


@dataclass
class ImportedSummary:
    text: str
    through_seq: int
    model: str = "imported"
    created_at: dt.datetime | None = None


@dataclass
class ImportedStateEntry:
    key: str
    value: Any
    updated_at: dt.datetime | None = None  # the entry's own time (basic-session's `ts`)


@dataclass
class ImportedSession:
    source_id: str
    origin: Origin
    user_id: str | None = None
    agent_id: str = ""
    external_key: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: dt.datetime | None = None
    last_active_at: dt.datetime | None = None
    state: list[ImportedStateEntry] = field(default_factory=list)  # oldest first (FIFO order)
    # The store's own cap on state keys (basic-session's kv.json `cap`), when it has one.
    state_cap: int | None = None
    pinned: bool = False  # exempt from retention (MemoryHub's own export)
    summaries: list[ImportedSummary] = field(default_factory=list)
    # Any iterable, consumed once and in chunks: a reader may stream a huge session's messages
    # straight from its file instead of holding them (they come last for that reason).
    messages: Iterable[ImportedMessage] = field(default_factory=list)
    # MemoryHub's own format: the session's id in the export, so facts that name it as their
    # source can be pointed at the imported session.
    exported_id: str | None = None


@dataclass
class ImportedMemoryVersion:
    version: int
    content: str
    created_at: dt.datetime | None = None


@dataclass
class ImportedMemory:
    source_id: str
    origin: Origin
    key: str
    content: str
    user_id: str | None = None  # None: tenant-wide
    pinned: bool = False
    expires_at: dt.datetime | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    version: int = 1
    source_session_id: str | None = None  # an exported or source session id, remapped
    versions: list[ImportedMemoryVersion] = field(default_factory=list)


@dataclass
class ImportedFact:
    source_id: str
    origin: Origin
    content: str
    user_id: str | None = None
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    source_session_id: str | None = None  # an exported or source session id, remapped
    source_message_seqs: list[int] = field(default_factory=list)
    created_at: dt.datetime | None = None
    valid_until: dt.datetime | None = None
    superseded_by_source_id: str | None = None
    external_id: str | None = None  # the fact's id for its owner: Fact.external_id


@dataclass
class ImportedNoteVersion:
    content: str
    created_at: dt.datetime | None = None


@dataclass
class ImportedNote:
    """A long-term note (day None) or one day's note, with its versions, oldest first."""

    source_id: str
    origin: Origin
    user_id: str
    day: dt.date | None
    versions: list[ImportedNoteVersion]


@dataclass
class ImportedEndUser:
    """A person with what MemoryHub keeps on them beside their memory (MemoryHub's format)."""

    source_id: str
    origin: Origin
    user_id: str
    display_name: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: dt.datetime | None = None


@dataclass
class ImportedPolicy:
    """A memory policy row (MemoryHub's format): `values` are MemoryPolicy fields by name."""

    source_id: str
    origin: Origin
    agent_id: str
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class ImportedPlan:
    source_id: str
    origin: Origin
    plan_id: str
    user_id: str
    goal_event: str
    session_source_id: str | None = None
    goal_data: dict[str, Any] = field(default_factory=dict)
    status: str = "running"
    state: dict[str, Any] = field(default_factory=dict)
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None


@dataclass
class ImportedTaskContext:
    source_id: str
    origin: Origin
    task_id: str
    event_type: str
    plan_id: str | None = None
    session_source_id: str | None = None
    response_event: str = ""
    response_topic: str = "action-results"
    data: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    sub_tasks: list[str] = field(default_factory=list)
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None


@dataclass(frozen=True)
class Skipped:
    kind: str
    origin: Origin
    reason: str


@dataclass(frozen=True)
class Changed:
    """A record imported, but not exactly as the source had it (cut to a size limit, a role
    renamed, a cap raised...): the report lists each, so no change goes unsaid."""

    kind: str
    origin: Origin
    change: str


@dataclass
class ImportReport:
    """Counts per kind of what was imported, what was already there (a re-run) and what was
    skipped, with every skip's origin and reason: nothing is dropped silently."""

    dry_run: bool = False
    imported: Counter[str] = field(default_factory=Counter)
    already_there: Counter[str] = field(default_factory=Counter)
    skipped: list[Skipped] = field(default_factory=list)
    changed: list[Changed] = field(default_factory=list)
    # What a re-run added to records an earlier run imported ("messages", "note versions").
    added_to_existing: Counter[str] = field(default_factory=Counter)

    def skip(self, *, kind: str, origin: Origin, reason: str) -> None:
        self.skipped.append(Skipped(kind=kind, origin=origin, reason=reason))

    def change(self, *, kind: str, origin: Origin, change: str) -> None:
        self.changed.append(Changed(kind=kind, origin=origin, change=change))

    def rows(self) -> list[tuple[str, int, int, int]]:
        """(kind, imported, already there, skipped) for every kind met, by name."""
        kinds = sorted(
            set(self.imported) | set(self.already_there) | {s.kind for s in self.skipped}
        )
        return [
            (
                kind,
                self.imported[kind],
                self.already_there[kind],
                sum(1 for skipped in self.skipped if skipped.kind == kind),
            )
            for kind in kinds
        ]

    def added_rows(self) -> list[tuple[str, int]]:
        """(kind, count) added to records imported before, by name (for the pages)."""
        return sorted(self.added_to_existing.items())

    def lines(self) -> list[str]:
        verb = "would import" if self.dry_run else "imported"
        kinds = sorted(
            set(self.imported) | set(self.already_there) | {s.kind for s in self.skipped}
        )
        out = []
        for kind in kinds:
            skipped = sum(1 for s in self.skipped if s.kind == kind)
            out.append(
                f"{kind}: {verb} {self.imported[kind]}, already there {self.already_there[kind]}, "
                f"skipped {skipped}"
            )
        verb_added = "would add" if self.dry_run else "added"
        out.extend(
            f"{kind} {verb_added} to records imported before: {count}"
            for kind, count in sorted(self.added_to_existing.items())
        )
        out.extend(f"skipped {s.kind} at {s.origin}: {s.reason}" for s in self.skipped)
        out.extend(f"changed {c.kind} at {c.origin}: {c.change}" for c in self.changed)
        return out


Item = (
    ImportedSession
    | ImportedMemory
    | ImportedFact
    | ImportedNote
    | ImportedEndUser
    | ImportedPolicy
    | ImportedPlan
    | ImportedTaskContext
    | Skipped
    | Changed
)
