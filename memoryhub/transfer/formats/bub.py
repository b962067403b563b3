"""Bub's tape, the append-only JSON Lines file that holds a chat and its memory zone (format:
/shared/seeds 003, Bub).

PATH is one tape (`<workspace md5>__<quoted tape name>.jsonl`, or any `*.jsonl`) or a directory
of them (bub's `~/.bub/tapes/`; `*.jsonl` only, so `tape.archive()` backups, `.jsonl.<stamp>.bak`,
are left out). Each line is a tape entry `{"id": int, "kind": str, "payload": {...}, "meta": {...}}`
(an optional top-level `date`, written by newer republic versions, is used when present).

What each part becomes:

- The tape's name (decoded from the file name, or the file's stem when it does not follow bub's
  naming) is the end user's id: a tape is one chat, and its name is the only identity the store
  has. Every session and note of the tape belongs to that person.
- Sessions: a `session/start` anchor begins one (bub writes it once, when a tape has no anchor;
  a file that holds several starts gives several sessions; conversation before any start is a
  session of its own). source_id `<tape name>:<entry id of its first entry>`, agent_id "bub",
  metadata `{"tape": name, "start_state": <the anchor's state>}`.
- Messages, in tape order: `message` entries as they are (an OpenAI-style message: role, content,
  name, tool_calls, tool_call_id; content given as a list of parts keeps its text parts, and the
  number of other parts is kept in metadata as `omitted_parts`); `system` entries as system
  messages; a `tool_call` entry as one assistant message whose tool_calls are the entry's
  `calls`; a `tool_result` entry as one tool message per result, with the id and function name
  of the call at the same position in the tool_call before it (non-text results as JSON).
  Each message's metadata keeps `tape_entry_id`.
- Other anchors are handoffs (phase boundaries): the anchor's state becomes session state under
  `anchor:<name>` (a repeated name moves to the end, as MemoryHub's state does), and a
  non-empty `state.summary` becomes a summary through the last message before the anchor
  (model "bub handoff"; of two at the same point the later wins; before any message there is
  nothing to summarise, and only the state is kept).
- Memory: a zone is a `memory/open` anchor, the entries after it, and the `memory/seal` anchor
  with the same `state.version`. As in bub, the sealed zone with the highest version wins (of
  equal versions the later one); every sealed zone is a version of the notes it changed, ranked
  as bub ranks them, so the winning zone's text is each note's current version. A zone's
  `memory.long_term` event is a version of the long-term note, each `memory.daily` event one of
  the note of its `date` (source ids `<tape name>:note:long_term`,
  `<tape name>:note:daily:<date>`), dated by its `updated_at`; a zone that rewrote a note
  unchanged adds no version. A daily note the winning zone no longer holds (bub's `prune()`)
  ends with an empty version, as a cleared note does in MemoryHub. A note that was only ever
  empty is no note.

Timestamps: ISO strings with an offset are kept; naive ones are taken as UTC. bub's entries carry
no time of their own, so a message's time is its entry's `date` when it has one, else the latest
time the tape recorded before it (an entry's `date` or a memory event's `updated_at`), else the
session's start. A session starts at the first time recorded in it and was last active at the
last; a session with no recorded time at all gets the import time.

Not imported, and why:
- `meta` of each entry: bookkeeping of the bot's runtime (run ids, usage), not memory.
Everything else left out is reported as a skipped line:
- A zone that is never sealed, a seal without its open, a memory event outside any zone, and a
  malformed memory event in a sealed zone: bub would not read them; each is a skipped `notes`
  line with its file:line.
- `event` entries other than memory ones (runtime telemetry such as loop steps or commands):
  not memory and not conversation; one skipped `events` line per tape counts them and names them.
- Lines that are not a readable entry (bad UTF-8, truncated JSON, wrong field types, unknown
  kinds such as `error`): a skipped `entries` line with file:line and why; the rest of the
  session is imported.

A re-run finds a session, a note by its source id and adds only what the tape gained since: new
messages at the end of a session, new note versions from new zones (the sink matches what is
already stored), never anything twice.

The reader streams: a first pass over the file keeps only the current session's counters, its
handoff states and the memory zones' text; each session's messages are read again from the
file, from the session's first byte to its last, while the sink writes them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from memoryhub.transfer.formats.base import Unreadable, parse_time, required_time, skipped
from memoryhub.transfer.types import (
    ImportedMessage,
    ImportedNote,
    ImportedNoteVersion,
    ImportedSession,
    ImportedStateEntry,
    ImportedSummary,
    Item,
    Origin,
    Skipped,
)
from sessions_app.models import STATE_KEY_MAX_LENGTH

AGENT_ID = "bub"
SESSION_START_ANCHOR = "session/start"
MEMORY_OPEN_ANCHOR = "memory/open"
MEMORY_SEAL_ANCHOR = "memory/seal"
LONG_TERM_EVENT = "memory.long_term"
DAILY_EVENT = "memory.daily"
HANDOFF_STATE_PREFIX = "anchor:"
HANDOFF_SUMMARY_MODEL = "bub handoff"
CONVERSATION_KINDS = frozenset({"message", "system", "tool_call", "tool_result"})
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
RUNTIME_EVENT_NAMES_SHOWN = 5
# bub names a tape file `<md5 of the workspace path>__<url-quoted tape name>.jsonl`.
BUB_TAPE_FILE_NAME = re.compile(r"[0-9a-f]{32}__(?P<tape>.+)")


@dataclass(frozen=True)
class _Entry:
    line: int
    offset: int  # byte offset of the line in the file, where a session's second pass starts
    entry_id: int
    kind: str
    payload: dict[str, Any]
    date: dt.datetime | None


@dataclass
class _NoteText:
    content: str
    updated_at: dt.datetime | None


@dataclass
class _Zone:
    version: int
    open_line: int
    long_term: _NoteText | None = None
    dailies: dict[dt.date, _NoteText] = field(default_factory=dict)
    problems: list[Skipped] = field(default_factory=list)  # reported only if this zone wins


@dataclass
class _SessionDraft:
    """What the first pass learns about a session; its messages are read in the second."""

    source_id: str
    first_line: int
    first_offset: int
    start_state: dict[str, Any] | None
    end_offset: int = -1  # where the next session (or the file as first read) begins
    created_at: dt.datetime | None = None
    last_active_at: dt.datetime | None = None
    message_count: int = 0
    handoff_states: dict[str, Any] = field(default_factory=dict)  # insertion order = FIFO order
    summaries: dict[int, ImportedSummary] = field(default_factory=dict)  # by through_seq


@dataclass
class _RuntimeEvents:
    count: int = 0
    first_line: int = 0
    names: list[str] = field(default_factory=list)  # the first few, for the report
    more_names: bool = False


def read(path: Path) -> Iterator[Item]:
    """Read one tape file, or every `*.jsonl` tape of a directory in name order."""
    tape_paths = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    for tape_path in tape_paths:
        yield from _read_tape(tape_path=tape_path)


def tape_name_for(*, tape_path: Path) -> str:
    """The tape's name as bub knows it: decoded from bub's file name, else the file's stem."""
    stem = tape_path.name.removesuffix(".jsonl")
    bub_name = BUB_TAPE_FILE_NAME.fullmatch(stem)
    return unquote(bub_name.group("tape")) if bub_name else stem


def _read_tape(*, tape_path: Path) -> Iterator[Item]:
    """First pass: report unreadable lines as they come, yield each session when the next one
    starts (its messages stream from a second read), and the winning zone's notes at the end."""
    file_label = tape_path.name
    tape_name = tape_name_for(tape_path=tape_path)
    draft: _SessionDraft | None = None
    conversation = _Conversation(start_time=None)
    open_zone: _Zone | None = None
    sealed_zones: list[_Zone] = []  # in seal order
    runtime_events = _RuntimeEvents()
    end_of_file = 0

    def begin_session(*, entry: _Entry, start_state: dict[str, Any] | None) -> _SessionDraft:
        nonlocal conversation
        conversation = _Conversation(start_time=None)
        return _SessionDraft(
            source_id=f"{tape_name}:{entry.entry_id}",
            first_line=entry.line,
            first_offset=entry.offset,
            start_state=start_state,
        )

    for line, offset, raw in _tape_lines(tape_path=tape_path, start_offset=0, start_line=1):
        end_of_file = offset + len(raw)
        try:
            entry = _parse_entry(raw=raw, line=line, offset=offset)
        except Unreadable as error:
            yield skipped(kind="entries", origin=Origin(file_label, line), error=error)
            continue
        if entry is None:
            continue
        origin = Origin(file_label, line)

        if entry.kind == "anchor":
            name, state = _anchor_name_and_state(entry)
            if name == SESSION_START_ANCHOR:
                if draft is not None:
                    draft.end_offset = entry.offset
                    yield _session(tape_path=tape_path, tape_name=tape_name, draft=draft)
                draft = begin_session(entry=entry, start_state=state)
            elif name == MEMORY_OPEN_ANCHOR:
                version = _zone_version(state)
                if version is None:
                    yield _no_version(origin=origin, anchor=name)
                    continue
                if open_zone is not None:
                    yield _unsealed(zone=open_zone, file_label=file_label)
                open_zone = _Zone(version=version, open_line=line)
            elif name == MEMORY_SEAL_ANCHOR:
                version = _zone_version(state)
                if version is None:
                    yield _no_version(origin=origin, anchor=name)
                elif open_zone is None or open_zone.version != version:
                    yield Skipped(
                        kind="notes",
                        origin=origin,
                        reason=(
                            f"memory/seal version {version} has no memory/open of the same "
                            "version before it; not imported."
                        ),
                    )
                else:
                    sealed_zones.append(open_zone)
                    open_zone = None
            else:
                if len(HANDOFF_STATE_PREFIX + name) > STATE_KEY_MAX_LENGTH:
                    yield Skipped(
                        kind="entries",
                        origin=origin,
                        reason=(
                            "anchor name is over "
                            f"{STATE_KEY_MAX_LENGTH - len(HANDOFF_STATE_PREFIX)} characters."
                        ),
                    )
                    continue
                if draft is None:
                    draft = begin_session(entry=entry, start_state=None)
                _keep_handoff(draft=draft, name=name, state=state, entry=entry)

        elif entry.kind == "event":
            name = _event_name(entry)
            if name in (LONG_TERM_EVENT, DAILY_EVENT):
                if open_zone is None:
                    yield Skipped(
                        kind="notes",
                        origin=origin,
                        reason=f"{name} event outside a memory zone; not imported.",
                    )
                else:
                    _keep_memory_event(zone=open_zone, name=name, entry=entry, origin=origin)
            else:
                runtime_events.count += 1
                runtime_events.first_line = runtime_events.first_line or line
                if name not in runtime_events.names:
                    if len(runtime_events.names) < RUNTIME_EVENT_NAMES_SHOWN:
                        runtime_events.names.append(name)
                    else:
                        runtime_events.more_names = True

        elif entry.kind in CONVERSATION_KINDS:
            if draft is None:
                draft = begin_session(entry=entry, start_state=None)
            try:
                draft.message_count += len(conversation.messages_for(entry))
            except Unreadable as error:
                yield skipped(kind="entries", origin=origin, error=error)
                continue

        else:
            yield Skipped(
                kind="entries",
                origin=origin,
                reason=f"unknown entry kind {entry.kind!r}; not imported.",
            )
            continue

        if draft is not None:
            reading = _clock_reading(entry)
            if reading is not None:
                draft.created_at = draft.created_at or reading
                draft.last_active_at = reading

    if draft is not None:
        draft.end_offset = end_of_file
        yield _session(tape_path=tape_path, tape_name=tape_name, draft=draft)
    if open_zone is not None:
        yield _unsealed(zone=open_zone, file_label=file_label)
    if runtime_events.count:
        more = ", ..." if runtime_events.more_names else ""
        yield Skipped(
            kind="events",
            origin=Origin(file_label, runtime_events.first_line),
            reason=(
                f"{runtime_events.count} runtime event entries "
                f"({', '.join(runtime_events.names)}{more}) are not memory; not imported."
            ),
        )
    for zone in sealed_zones:
        yield from zone.problems
    if sealed_zones:
        yield from _notes(zones=sealed_zones, tape_name=tape_name, file_label=file_label)


def _tape_lines(
    *, tape_path: Path, start_offset: int, start_line: int
) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, raw bytes) of each line from `start_offset`: binary, so that
    offsets are exact and a bad byte spoils one line, not the file."""
    with tape_path.open("rb") as tape_file:
        tape_file.seek(start_offset)
        offset = start_offset
        for line, raw in enumerate(tape_file, start=start_line):
            yield line, offset, raw
            offset += len(raw)


def _parse_entry(*, raw: bytes, line: int, offset: int) -> _Entry | None:
    """The entry on one line (None for a blank line), or Unreadable saying what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Unreadable(f"not UTF-8 (byte {error.start}).") from None
    text = text.strip()
    if not text:
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise Unreadable(
            f"not valid JSON, truncated or damaged: {error.msg} (column {error.colno})."
        ) from None
    if not isinstance(record, dict):
        raise Unreadable(f"a tape entry must be a JSON object, not {_json_type(record)}.")
    entry_id, kind, payload = record.get("id"), record.get("kind"), record.get("payload")
    if not isinstance(entry_id, int) or isinstance(entry_id, bool):
        raise Unreadable(f"`id` must be an integer, not {_json_type(entry_id)}.")
    if not isinstance(kind, str):
        raise Unreadable(f"`kind` must be a string, not {_json_type(kind)}.")
    if not isinstance(payload, dict):
        raise Unreadable(f"`payload` must be an object, not {_json_type(payload)}.")
    date = record.get("date")
    if date is not None and not isinstance(date, str):
        raise Unreadable(f"`date` must be an ISO 8601 string, not {_json_type(date)}.")
    if kind in ("anchor", "event"):
        name = payload.get("name")
        if not isinstance(name, str) or not name:
            raise Unreadable(f"{kind} `payload.name` must be a non-empty string.")
    if kind == "anchor" and not isinstance(payload.get("state", {}), dict | None):
        raise Unreadable(
            f"anchor `payload.state` must be an object, not {_json_type(payload['state'])}."
        )
    return _Entry(
        line=line,
        offset=offset,
        entry_id=entry_id,
        kind=kind,
        payload=payload,
        date=required_time(text=date, what="`date`") if date is not None else None,
    )


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    for python_type, name in names.items():
        if isinstance(value, python_type):
            return name
    return "a number"


def _clock_reading(entry: _Entry) -> dt.datetime | None:
    """The time the tape recorded at this entry, if any: its own `date`, or a memory event's
    `updated_at` (written at the moment the event was appended)."""
    if entry.date is not None:
        return entry.date
    if entry.kind == "event" and _event_name(entry) in (LONG_TERM_EVENT, DAILY_EVENT):
        data = entry.payload.get("data")
        updated_at = data.get("updated_at") if isinstance(data, dict) else None
        if isinstance(updated_at, str):
            # None if it is not a time: reported with the zone's problems if that zone wins.
            return parse_time(text=updated_at)
    return None


def _anchor_name_and_state(entry: _Entry) -> tuple[str, dict[str, Any] | None]:
    """Checked by _parse_entry: the name is a non-empty string, the state an object or none."""
    return entry.payload["name"], entry.payload.get("state")


def _event_name(entry: _Entry) -> str:
    name = entry.payload.get("name")
    return name if isinstance(name, str) else ""


def _zone_version(state: dict[str, Any] | None) -> int | None:
    version = (state or {}).get("version")
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def _no_version(*, origin: Origin, anchor: str) -> Skipped:
    return Skipped(
        kind="notes",
        origin=origin,
        reason=f"{anchor} anchor has no integer state.version; its zone cannot be matched.",
    )


def _unsealed(*, zone: _Zone, file_label: str) -> Skipped:
    return Skipped(
        kind="notes",
        origin=Origin(file_label, zone.open_line),
        reason=(
            f"memory zone version {zone.version} opened here is never sealed; not imported "
            "(bub reads sealed zones only)."
        ),
    )


def _keep_handoff(
    *, draft: _SessionDraft, name: str, state: dict[str, Any] | None, entry: _Entry
) -> None:
    key = HANDOFF_STATE_PREFIX + name
    draft.handoff_states.pop(key, None)  # setting a key again moves it to the end
    draft.handoff_states[key] = state or {}
    summary = (state or {}).get("summary")
    if isinstance(summary, str) and summary.strip() and draft.message_count:
        draft.summaries[draft.message_count] = ImportedSummary(
            text=summary,
            through_seq=draft.message_count,
            model=HANDOFF_SUMMARY_MODEL,
            created_at=_clock_reading(entry),
        )


def _keep_memory_event(*, zone: _Zone, name: str, entry: _Entry, origin: Origin) -> None:
    """Record a memory event of an open zone; a malformed one becomes one of the zone's
    problems, reported if the zone wins."""
    data = entry.payload.get("data")
    try:
        if not isinstance(data, dict):
            raise Unreadable("`data` must be an object")
        content, updated_at = data.get("content"), data.get("updated_at")
        if not isinstance(content, str):
            raise Unreadable(f"`data.content` must be a string, not {_json_type(content)}")
        if updated_at is not None and not isinstance(updated_at, str):
            raise Unreadable(f"`data.updated_at` must be a string, not {_json_type(updated_at)}")
        text = _NoteText(
            content=content,
            updated_at=required_time(text=updated_at, what="`data.updated_at`")
            if updated_at
            else None,
        )
        if name == LONG_TERM_EVENT:
            zone.long_term = text
            return
        day = data.get("date")
        try:
            parsed_day = dt.date.fromisoformat(day) if isinstance(day, str) else None
        except ValueError:
            parsed_day = None
        if parsed_day is None:
            raise Unreadable(f"`data.date` {day!r} is not a YYYY-MM-DD date")
        zone.dailies[parsed_day] = text
    except Unreadable as error:
        zone.problems.append(
            Skipped(
                kind="notes",
                origin=origin,
                reason=f"{name} event: {str(error).rstrip('.')}; not imported.",
            )
        )


def _notes(*, zones: list[_Zone], tape_name: str, file_label: str) -> Iterator[ImportedNote]:
    """Each note with its history: one version per sealed zone that changed it, in the order
    bub ranks zones (version, then the later seal), the winning zone's last. A daily note the
    winning zone no longer holds (bub's `prune()` dropped it) ends with an empty version, as a
    cleared note does in MemoryHub: its history is kept, and nothing shows it as current."""
    ranked = sorted(zones, key=lambda zone: zone.version)  # stable: of equals, the later seal
    winner = ranked[-1]
    texts = [text for text in (winner.long_term, *winner.dailies.values()) if text is not None]
    winner_time = max((t.updated_at for t in texts if t.updated_at is not None), default=None)
    histories: dict[dt.date | None, list[ImportedNoteVersion]] = {}
    for zone in ranked:
        for day, text in ((None, zone.long_term), *zone.dailies.items()):
            if text is None:
                continue
            history = histories.setdefault(day, [])
            if history and history[-1].content == text.content:
                continue  # the zone rewrote the note unchanged
            if not history and not text.content:
                continue  # nothing yet: an empty note is no note
            history.append(ImportedNoteVersion(text.content, text.updated_at))
    for day, history in histories.items():
        held = winner.long_term if day is None else winner.dailies.get(day)
        if held is None and history and history[-1].content:
            history.append(ImportedNoteVersion("", winner_time))
    origin = Origin(file_label, winner.open_line)
    for day in sorted(histories, key=lambda d: (d is not None, d or dt.date.min)):
        if not histories[day]:
            continue
        yield ImportedNote(
            source_id=f"{tape_name}:note:long_term"
            if day is None
            else f"{tape_name}:note:daily:{day.isoformat()}",
            origin=origin,
            user_id=tape_name,
            day=day,
            versions=histories[day],
        )


def _session(*, tape_path: Path, tape_name: str, draft: _SessionDraft) -> ImportedSession:
    metadata: dict[str, Any] = {"tape": tape_name}
    if draft.start_state is not None:
        metadata["start_state"] = draft.start_state
    return ImportedSession(
        source_id=draft.source_id,
        origin=Origin(tape_path.name, draft.first_line),
        user_id=tape_name,
        agent_id=AGENT_ID,
        metadata=metadata,
        created_at=draft.created_at,
        last_active_at=draft.last_active_at,
        state=[ImportedStateEntry(key, value) for key, value in draft.handoff_states.items()],
        summaries=list(draft.summaries.values()),
        messages=_session_messages(tape_path=tape_path, draft=draft),
    )


def _session_messages(*, tape_path: Path, draft: _SessionDraft) -> Iterator[ImportedMessage]:
    """Second pass over one session's bytes: the same conversion as the first pass, so the same
    messages in the same order; lines the first pass reported are passed over."""
    conversation = _Conversation(start_time=draft.created_at)
    for line, offset, raw in _tape_lines(
        tape_path=tape_path, start_offset=draft.first_offset, start_line=draft.first_line
    ):
        if offset >= draft.end_offset:
            return
        try:
            entry = _parse_entry(raw=raw, line=line, offset=offset)
        except Unreadable:
            continue
        if entry is None:
            continue
        conversation.observe_time(entry)
        if entry.kind in CONVERSATION_KINDS:
            try:
                yield from conversation.messages_for(entry)
            except Unreadable:
                continue


class _Conversation:
    """Turns one session's conversation entries into messages, in tape order. Tool results take
    their call ids and function names from the tool calls before them; times carry forward."""

    def __init__(self, *, start_time: dt.datetime | None) -> None:
        self._pending_calls: list[dict[str, Any]] = []
        self._clock = start_time

    def observe_time(self, entry: _Entry) -> None:
        self._clock = _clock_reading(entry) or self._clock

    def messages_for(self, entry: _Entry) -> list[ImportedMessage]:
        """The messages one entry becomes; checks everything before changing any state."""
        metadata: dict[str, Any] = {"tape_entry_id": entry.entry_id}
        payload = entry.payload
        if entry.kind == "system":
            content = payload.get("content")
            if not isinstance(content, str):
                raise Unreadable(f"system `content` must be a string, not {_json_type(content)}.")
            return [self._message(role="system", content=content, metadata=metadata)]
        if entry.kind == "tool_call":
            calls = _tool_calls(payload.get("calls"), what="`calls`")
            self._pending_calls = calls
            return [self._message(role="assistant", tool_calls=calls, metadata=metadata)]
        if entry.kind == "tool_result":
            results = payload.get("results")
            if not isinstance(results, list):
                raise Unreadable(f"`results` must be an array, not {_json_type(results)}.")
            messages = []
            for position, result in enumerate(results):
                call = self._pending_calls[position] if position < len(self._pending_calls) else {}
                call_id = call.get("id")
                messages.append(
                    self._message(
                        role="tool",
                        content=result
                        if isinstance(result, str)
                        else json.dumps(result, ensure_ascii=False),
                        name=call["function"]["name"] if call else "",
                        tool_call_id=call_id if isinstance(call_id, str) else "",
                        metadata=metadata,
                    )
                )
            self._pending_calls = []
            return messages
        return [self._chat_message(payload=payload, metadata=metadata)]

    def _chat_message(
        self, *, payload: dict[str, Any], metadata: dict[str, Any]
    ) -> ImportedMessage:
        role = payload.get("role")
        if not isinstance(role, str) or not role:
            raise Unreadable(f"message role {role!r} is not a non-empty string.")
        # A role MemoryHub does not know is passed on as it is: the sink stores it under one
        # it knows, the original in the message's metadata, and the report says so.
        content = payload.get("content")
        if isinstance(content, list):
            texts, omitted = _text_parts(content)
            content = "\n".join(texts)
            if omitted:
                metadata = {**metadata, "omitted_parts": omitted}
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise Unreadable(
                f"message `content` must be a string, an array of parts or null, "
                f"not {_json_type(content)}."
            )
        for optional in ("name", "tool_call_id"):
            value = payload.get(optional)
            if value is not None and not isinstance(value, str):
                raise Unreadable(f"message `{optional}` must be a string, not {_json_type(value)}.")
        tool_calls = payload.get("tool_calls")
        calls = _tool_calls(tool_calls, what="`tool_calls`") if tool_calls is not None else None
        if calls:
            self._pending_calls = calls
        return self._message(
            role=role,
            content=content,
            name=payload.get("name") or "",
            tool_call_id=payload.get("tool_call_id") or "",
            tool_calls=calls,
            metadata=metadata,
        )

    def _message(
        self,
        *,
        role: str,
        content: str = "",
        name: str = "",
        tool_call_id: str = "",
        tool_calls: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any],
    ) -> ImportedMessage:
        return ImportedMessage(
            role=role,
            content=content,
            created_at=self._clock,
            name=name,
            tool_call_id=tool_call_id,
            tool_calls=tool_calls,
            metadata=metadata,
        )


def _tool_calls(value: Any, *, what: str) -> list[dict[str, Any]]:
    """OpenAI-style calls, each an object with `function.name`; anything else is unreadable."""
    if not isinstance(value, list):
        raise Unreadable(f"{what} must be an array, not {_json_type(value)}.")
    for position, call in enumerate(value, start=1):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise Unreadable(f"tool call {position} in {what} has no `function.name`.")
    return value


def _text_parts(parts: list[Any]) -> tuple[list[str], int]:
    """The text of a content-parts array, and how many parts were not text (images, audio)."""
    texts = []
    omitted = 0
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif (
            isinstance(part, dict)
            and part.get("type") in TEXT_PART_TYPES
            and isinstance(part.get("text"), str)
        ):
            texts.append(part["text"])
        else:
            omitted += 1
    return texts, omitted
