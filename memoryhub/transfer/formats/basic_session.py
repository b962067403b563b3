"""Reads basic-session's store: a bot identity's `memory/` directory, as MemorySystem and its
BasicSessionStore write it (format: /shared/seeds 000, basic-session).

    memory/sessions.json                 {"sessions": [{"id", "agent_id", "store_types",
                                                        "created_at"}]}
    memory/sessions/{uuid}/kv.json       {"cap": N, "entries": [{"key", "value", "ts"}]}
    memory/sessions/{uuid}/transcript.md "### {role} — {timestamp}", a blank line, the message

PATH is that `memory/` directory, the identity directory that holds it, or its sessions.json.

What each part becomes in MemoryHub:

- A session (its sessions.json entry and its directory) becomes one Session, without an end user:
  the store belongs to one bot and records nobody's id (a `user_name` key stays in the state).
  `id` is the source id (lower-case), so importing the same directory again adds nothing, and the
  external key, so a bot that resumed sessions by id (`load_session`) gets them back by it.
  `agent_id` and `created_at` are kept; `store_types` goes into the metadata. The last activity
  is the newest time the session holds (creation, message headers, state `ts`).
- kv.json's entries become the session's state, in file order: the store moves a key it sets
  again to the end, which is MemoryHub's FIFO order too. Values stay strings; the store's
  `working_memory` key is MemoryHub's working memory key as well. `ts` is the entry's
  `updated_at`. `cap` is the store's FIFO cap: when the session brings more keys than its memory
  policy's state cap, or the store's cap is larger, the session keeps a cap of its own (the sink,
  reported), so the next new key does not evict what the import brought. If a key appears twice,
  which the store never writes, the later one wins, as it does for the store's `kv_get`.
- transcript.md's entries become the messages, seq 1, 2, ... in file order, with the header's
  role and time; the text is trimmed as the store trims it when it reads the file back. A role
  MemoryHub does not know is passed on: the sink stores it under a known one, keeping it in the
  message's metadata, and reports it.
- The store has no summaries, user memories, facts or notes.

Timestamps are ISO 8601. The store writes UTC with a "Z"; an explicit offset is kept, and a time
without one is taken as UTC. A session with no `created_at` gets the time in its UUIDv7 id.

Unknown fields are ignored. Anything else that cannot be read is reported with its file and line,
and one record never keeps its conversation out. So:

- A sessions.json entry that is not an object, has no UUID `id`, a field of the wrong type or a
  bad time, repeats an id, or names a directory that does not exist is skipped (its directory
  with it). If sessions.json stops being JSON, the entries before that point are imported and
  the directories of the rest are skipped, naming the line to repair.
- A kv.json entry without a non-empty string key is a skipped "state" record; a value that is
  not a string is kept as that JSON value, and a bad `ts` dates the entry at the import (both
  reported as changed). A kv.json that stops being JSON (cut off, say) keeps the entries before
  that point; the rest is reported.
- A transcript line is a header only when it matches the store's `### {role} — {timestamp}`
  pattern (one word, " — ", an ISO 8601 time), as the store's parser reads it: any other line
  that starts with "### " (a Markdown heading in a reply) is message text. One that starts with
  a role (a header written without " — ", or with a bad time) is text too, and reported. Text
  before the first header becomes a system message dated as the first one (reported); bytes that
  are not UTF-8 are replaced (reported). A missing kv.json or transcript.md holds nothing to
  import and is not a problem.
- A session directory that a readable (or absent) sessions.json does not list is imported all
  the same: no index will ever describe it. It has no agent id, the time of its UUIDv7 id and
  `{"in_session_index": false}` in its metadata. Anything else in sessions/ (not a directory
  named by a UUID) is reported; hidden files are ignored.

A re-run adds what a transcript gained since (the sink matches messages already stored), never
a message twice. Nothing is held longer than it must be: sessions.json and kv.json are decoded
one entry at a time, and a transcript is read twice, once for its times and notes and once, as
the sink stores them, for its messages.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from memoryhub.transfer.formats.base import parse_time
from memoryhub.transfer.types import (
    Changed,
    ImportedMessage,
    ImportedSession,
    ImportedStateEntry,
    Item,
    Origin,
    Skipped,
)
from sessions_app.models import MessageRole

# How much of a JSON file is read at a time; a module attribute so tests can make it tiny.
JSON_CHUNK_CHARS = 64 * 1024
# One index or kv entry larger than this is taken as broken rather than read on to the end of
# the file: it keeps a malformed huge sessions.json from being loaded whole.
JSON_VALUE_MAX_CHARS = 16 * 1024 * 1024
HEADER_PREFIX = "### "
HEADER_SEPARATOR = " — "
SESSION_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
KNOWN_ROLES = tuple(MessageRole.values)
_JSON_WHITESPACE = re.compile(r"[ \t\r\n]*")
_UNIX_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# What cannot be read of the index or the session directories is a skipped session; a bad kv
# entry is a skipped "state" record and its session comes in all the same.
SKIPPED_KIND = "sessions"
# The role of text a transcript holds before its first header (the store writes none).
PREAMBLE_ROLE = "system"


@dataclass(frozen=True)
class _ListedSession:
    """A readable sessions.json entry."""

    session_id: str  # as written, which is also its directory's name
    origin: Origin
    agent_id: str
    created_at: dt.datetime | None
    store_types: list[str]


@dataclass(frozen=True)
class _TranscriptEntry:
    line: int
    role: str
    created_at: dt.datetime
    content: str


class _BrokenJson(Exception):
    def __init__(self, *, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


# --- JSON, one entry at a time ------------------------------------------------------------------
class _JsonStream:
    """Walks one JSON document a piece at a time, knowing the line it is on: enough to step
    through the top-level object and decode the members of one of its lists one by one."""

    def __init__(self, *, handle: IO[str]) -> None:
        self._handle = handle
        self._buffer = ""
        self._position = 0
        self.line = 1  # the line self._position is on
        self._at_end = False
        self._decoder = json.JSONDecoder()

    def _advance(self, *, to: int) -> None:
        self.line += self._buffer.count("\n", self._position, to)
        self._position = to

    def _read_more(self) -> bool:
        """Drop what has been read and append the next chunk; False at the end of the file."""
        if self._at_end:
            return False
        self._buffer = self._buffer[self._position :]
        self._position = 0
        # At least as much as is pending, so that one long value costs O(n), not O(n²).
        chunk = self._handle.read(max(JSON_CHUNK_CHARS, len(self._buffer)))
        if not chunk:
            self._at_end = True
            return False
        self._buffer += chunk
        return True

    def next_char(self) -> str:
        """Skip whitespace; the next significant character, "" at the end of the file."""
        while True:
            whitespace = _JSON_WHITESPACE.match(self._buffer, self._position)
            assert whitespace is not None  # matches the empty string at worst
            self._advance(to=whitespace.end())
            if self._position < len(self._buffer) or not self._read_more():
                return self._buffer[self._position : self._position + 1]

    def take(self, char: str) -> bool:
        if self.next_char() != char:
            return False
        self._advance(to=self._position + 1)
        return True

    def expect(self, char: str, *, what: str) -> None:
        found = self.next_char()
        if not self.take(char):
            seen = f"found {found!r}" if found else "the file ends there"
            raise _BrokenJson(line=self.line, reason=f"expected {what}, {seen}.")

    def value(self) -> Any:
        """Decode the JSON value that starts at the next significant character."""
        self.next_char()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buffer, self._position)
            except json.JSONDecodeError as error:
                pending = len(self._buffer) - self._position
                if pending < JSON_VALUE_MAX_CHARS and self._read_more():
                    continue
                raise self._broken(error) from None
            # A number that ends the chunk may go on in the next one.
            if end == len(self._buffer) and self._read_more():
                continue
            self._advance(to=end)
            return value

    def _broken(self, error: json.JSONDecodeError) -> _BrokenJson:
        line = self.line + self._buffer.count("\n", self._position, error.pos)
        column = error.pos - self._buffer.rfind("\n", 0, error.pos)
        # Input that ends mid-value fails at its very end, or inside a string never closed.
        if self._at_end and (
            error.pos >= len(self._buffer) or error.msg.startswith("Unterminated string")
        ):
            return _BrokenJson(line=line, reason="the file ends in the middle of a JSON value.")
        return _BrokenJson(line=line, reason=f"not valid JSON: {error.msg} (column {column}).")


def _list_members(
    *, handle: IO[str], list_key: str, fields: dict[str, Any] | None = None
) -> Iterator[tuple[int, Any]]:
    """(line, member) for each member of the list under the top-level object's `list_key`;
    raises _BrokenJson where the document stops making sense, after the members before it.
    The top-level object's other fields go into `fields` (when given) as they are read."""
    stream = _JsonStream(handle=handle)
    stream.expect("{", what="a JSON object")
    if stream.take("}"):
        return
    while True:
        if stream.next_char() != '"':
            raise _BrokenJson(line=stream.line, reason="expected a key in double quotes.")
        key = stream.value()
        stream.expect(":", what=f"':' after {key!r}")
        if key == list_key:
            stream.expect("[", what=f"a list under {list_key!r}")
            if not stream.take("]"):
                while True:
                    stream.next_char()
                    yield stream.line, stream.value()
                    if stream.take("]"):
                        break
                    stream.expect(",", what="',' or ']' after a list member")
            if fields is None:
                return  # what follows the list holds nothing this reader uses
        else:
            value = stream.value()
            if fields is not None:
                fields[key] = value
        if stream.take("}"):
            return
        stream.expect(",", what="',' or '}' after a field")


def _json_list(
    *,
    file: Path,
    label: str,
    list_key: str,
    fields: dict[str, Any] | None = None,
    kind: str = SKIPPED_KIND,
) -> Iterator[tuple[Origin, Any] | Skipped]:
    """The members of `file`'s `list_key` list with their origins; a Skipped (of `kind`),
    last, if the file cannot be read to the end of that list."""
    try:
        with file.open(encoding="utf-8") as handle:
            for line, member in _list_members(handle=handle, list_key=list_key, fields=fields):
                yield Origin(label, line), member
    except _BrokenJson as broken:
        yield Skipped(kind=kind, origin=Origin(label, broken.line), reason=broken.reason)
    except UnicodeDecodeError:
        yield Skipped(kind=kind, origin=Origin(label), reason="is not UTF-8 text.")
    except OSError as error:
        yield Skipped(kind=kind, origin=Origin(label), reason=f"cannot be read: {error.strerror}.")


# --- values --------------------------------------------------------------------------------------
def _uuid7_time(session_id: str) -> dt.datetime | None:
    """The creation time a UUIDv7 carries in its first 48 bits (Unix milliseconds)."""
    value = uuid.UUID(session_id)
    if value.version != 7:
        return None
    try:
        return _UNIX_EPOCH + dt.timedelta(milliseconds=value.int >> 80)
    except OverflowError:  # 48 bits of milliseconds reach past the year 9999
        return None


def _json_type(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words, for a reason in the report."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _shown(value: Any) -> str:
    """A value as a reason quotes it: a string shortened, anything else by its JSON type."""
    if not isinstance(value, str):
        return f"({_json_type(value)})"
    return repr(value if len(value) <= 60 else value[:57] + "...")


# --- sessions.json -------------------------------------------------------------------------------
def _listed_session(*, member: Any, origin: Origin) -> _ListedSession | Skipped:
    if not isinstance(member, dict):
        return Skipped(
            kind=SKIPPED_KIND,
            origin=origin,
            reason=f"a session entry is {_json_type(member)}, not an object.",
        )
    session_id = member.get("id")
    if not isinstance(session_id, str) or not SESSION_UUID.fullmatch(session_id):
        return Skipped(
            kind=SKIPPED_KIND,
            origin=origin,
            reason=f"the entry's id {_shown(session_id)} is not a session UUID.",
        )
    reasons: list[str] = []
    agent_id = member.get("agent_id", "")
    if not isinstance(agent_id, str):
        reasons.append(f"agent_id is {_json_type(agent_id)}, not a string")
    store_types = member.get("store_types", [])
    if not isinstance(store_types, list) or not all(isinstance(t, str) for t in store_types):
        reasons.append("store_types is not a list of strings")
    created_at = None
    raw_created_at = member.get("created_at")
    if raw_created_at is not None:
        created_at = parse_time(text=raw_created_at) if isinstance(raw_created_at, str) else None
        if created_at is None:
            reasons.append(f"created_at {_shown(raw_created_at)} is not an ISO 8601 time")
    if reasons:
        return Skipped(
            kind=SKIPPED_KIND, origin=origin, reason=f"session {session_id}: {'; '.join(reasons)}."
        )
    return _ListedSession(
        session_id=session_id,
        origin=origin,
        agent_id=agent_id,
        created_at=created_at,
        store_types=store_types,
    )


# --- kv.json -------------------------------------------------------------------------------------
@dataclass
class _KvStore:
    entries: list[ImportedStateEntry]  # oldest first
    cap: int | None
    problems: list[Item]  # Skipped entries and Changed ones, for the report


def _state(*, file: Path, label: str) -> _KvStore:
    """The state entries oldest first, the store's cap, and what could not be read as it is:
    one bad entry is reported and left out, never its session."""
    found_cap: dict[str, Any] = {}
    kv = _KvStore(entries=[], cap=None, problems=[])
    if not file.exists():
        return kv
    entries: dict[str, ImportedStateEntry] = {}  # in order; a key seen again moves to the end
    for found in _json_list(
        file=file, label=label, list_key="entries", fields=found_cap, kind="state"
    ):
        if isinstance(found, Skipped):
            kv.problems.append(
                Skipped(
                    kind="state",
                    origin=found.origin,
                    reason=f"{found.reason} The entries after this point cannot be read; "
                    "those before it are imported.",
                )
            )
            continue
        origin, member = found
        if not isinstance(member, dict):
            kv.problems.append(
                Skipped(
                    kind="state",
                    origin=origin,
                    reason=f"an entry is {_json_type(member)}, not an object.",
                )
            )
            continue
        key, value, stamp = member.get("key"), member.get("value"), member.get("ts")
        if not isinstance(key, str) or not key:
            kv.problems.append(
                Skipped(
                    kind="state",
                    origin=origin,
                    reason=f"the key is {_json_type(key)}, not a non-empty string.",
                )
            )
            continue
        time = None
        if stamp is not None:
            time = parse_time(text=stamp) if isinstance(stamp, str) else None
            if time is None:
                kv.problems.append(
                    Changed(
                        kind="state",
                        origin=origin,
                        change=f"{key!r}: ts {_shown(stamp)} is not an ISO 8601 time; the entry "
                        "is kept, dated at the import.",
                    )
                )
        if not isinstance(value, str):
            kv.problems.append(
                Changed(
                    kind="state",
                    origin=origin,
                    change=f"{key!r}: the value is {_json_type(value)}, not a string (the store "
                    "writes strings); kept as that JSON value.",
                )
            )
        entries.pop(key, None)
        entries[key] = ImportedStateEntry(key=key, value=value, updated_at=time)
    cap = found_cap.get("cap")
    kv.cap = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None
    kv.entries = list(entries.values())
    return kv


# --- transcript.md -------------------------------------------------------------------------------
def _header(*, line: str) -> tuple[str, dt.datetime] | None:
    """A header line's role and time, as the store's `### {role} — {timestamp}` pattern reads
    it; None for any other line, which is message text (a Markdown heading in a reply)."""
    role, separator, stamp = line.removeprefix(HEADER_PREFIX).partition(HEADER_SEPARATOR)
    role = role.strip()
    if not separator or not role or any(char.isspace() for char in role):
        return None
    time = parse_time(text=stamp)
    if time is None:
        return None
    return role, time


def _looks_like_header(*, line: str) -> bool:
    """A "### " text line that starts with a role, so may be a header the store wrote wrongly
    (a missing " — ", a bad time): read as text like any heading, but said in the report. A
    heading such as "### Step 1 — install" is text and nothing more."""
    words = line.removeprefix(HEADER_PREFIX).split(maxsplit=1)
    return bool(words) and words[0].lower() in KNOWN_ROLES


def _transcript(*, file: Path, label: str) -> Iterator[_TranscriptEntry | Changed]:
    """The entries of transcript.md, in file order, one entry held at a time, and what was read
    otherwise than written (Changed): nothing in it is left out."""
    if not file.exists():
        return
    current: tuple[int, str, dt.datetime] | None = None  # line, role, time
    body: list[str] = []
    preamble: list[str] = []  # text before the first header
    preamble_line = 0
    try:
        with file.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                # As Rust's str::lines(), which the store reads with: "\n" or "\r\n" ends a line.
                raw_line = raw.removesuffix(b"\n").removesuffix(b"\r")
                try:
                    line = raw_line.decode("utf-8")
                except UnicodeDecodeError:
                    line = raw_line.decode("utf-8", errors="replace")
                    yield Changed(
                        kind="messages",
                        origin=Origin(label, number),
                        change="is not UTF-8 text; kept with its bad bytes replaced by U+FFFD.",
                    )
                parsed = _header(line=line) if line.startswith(HEADER_PREFIX) else None
                if parsed is not None:
                    if current is not None:
                        yield _TranscriptEntry(*current, content="\n".join(body).strip())
                    elif "\n".join(preamble).strip():
                        yield Changed(
                            kind="messages",
                            origin=Origin(label, preamble_line),
                            change=f"text before the first '{HEADER_PREFIX}{{role}}"
                            f"{HEADER_SEPARATOR}{{timestamp}}' header belongs to no message; "
                            "kept as a system message dated as the first one.",
                        )
                        yield _TranscriptEntry(
                            line=preamble_line,
                            role=PREAMBLE_ROLE,
                            created_at=parsed[1],
                            content="\n".join(preamble).strip(),
                        )
                    current, body = (number, *parsed), []
                    continue
                if line.startswith(HEADER_PREFIX) and _looks_like_header(line=line):
                    yield Changed(
                        kind="messages",
                        origin=Origin(label, number),
                        change=f"{_shown(line)} does not match the store's header pattern "
                        f"'{HEADER_PREFIX}{{role}}{HEADER_SEPARATOR}{{ISO 8601 time}}': read as "
                        "text of the message it is in, as the store reads it.",
                    )
                if current is not None:
                    body.append(line)
                else:
                    preamble_line = preamble_line or number
                    preamble.append(line)
    except OSError as error:
        yield Changed(
            kind="messages",
            origin=Origin(label),
            change=f"cannot be read to its end: {error.strerror}; the messages before are kept.",
        )
    if current is not None:
        yield _TranscriptEntry(*current, content="\n".join(body).strip())
    elif "\n".join(preamble).strip():
        yield Changed(
            kind="messages",
            origin=Origin(label, preamble_line),
            change="the transcript has no header; its text is kept as one system message.",
        )
        yield _TranscriptEntry(
            line=preamble_line,
            role=PREAMBLE_ROLE,
            created_at=dt.datetime.fromtimestamp(file.stat().st_mtime, tz=dt.UTC),
            content="\n".join(preamble).strip(),
        )


def _check_transcript(
    *, file: Path, label: str
) -> tuple[dt.datetime | None, dt.datetime | None, list[Changed]]:
    """The transcript's earliest and latest times, and what it reads otherwise than written
    (contents are not kept)."""
    earliest: dt.datetime | None = None
    latest: dt.datetime | None = None
    notes: list[Changed] = []
    for found in _transcript(file=file, label=label):
        if isinstance(found, Changed):
            notes.append(found)
            continue
        earliest = found.created_at if earliest is None else min(earliest, found.created_at)
        latest = found.created_at if latest is None else max(latest, found.created_at)
    return earliest, latest, notes


def _messages(*, file: Path, label: str) -> Iterator[ImportedMessage]:
    """The transcript's messages, read again as the sink stores them. A role MemoryHub does
    not know is passed on as it is: the sink stores it under a known one, keeping it."""
    for found in _transcript(file=file, label=label):
        if isinstance(found, Changed):
            continue
        yield ImportedMessage(
            role=found.role,
            content=found.content,
            created_at=found.created_at,
            metadata={"basic_session": {"preamble": True}} if found.role == PREAMBLE_ROLE else {},
        )


# --- a session -----------------------------------------------------------------------------------
def _session(
    *,
    memory_dir: Path,
    label: str,
    session_id: str,
    origin: Origin,
    agent_id: str,
    created_at: dt.datetime | None,
    metadata: dict[str, Any],
) -> Iterator[Item]:
    """The session, after what of its files is reported (a bad kv entry, a line read otherwise
    than written): one record never keeps its conversation out."""
    directory = memory_dir / "sessions" / session_id
    files_label = f"{label}/sessions/{session_id}"
    kv = _state(file=directory / "kv.json", label=f"{files_label}/kv.json")
    transcript, transcript_label = directory / "transcript.md", f"{files_label}/transcript.md"
    first_message_at, last_message_at, notes = _check_transcript(
        file=transcript, label=transcript_label
    )
    yield from kv.problems
    yield from notes
    created_at = created_at or _uuid7_time(session_id) or first_message_at
    state_times = [entry.updated_at for entry in kv.entries if entry.updated_at is not None]
    times = [t for t in (created_at, last_message_at, *state_times) if t is not None]
    yield ImportedSession(
        source_id=session_id.lower(),
        origin=origin,
        user_id=None,
        agent_id=agent_id,
        external_key=session_id.lower(),
        metadata=metadata,
        created_at=created_at,
        last_active_at=max(times) if times else None,
        state=kv.entries,
        state_cap=kv.cap,
        messages=_messages(file=transcript, label=transcript_label),
    )


# --- the store -----------------------------------------------------------------------------------
def _memory_dir(path: Path) -> Path | None:
    if path.is_file():
        return path.parent if path.name == "sessions.json" else None
    for candidate in (path, path / "memory"):
        if (candidate / "sessions.json").is_file() or (candidate / "sessions").is_dir():
            return candidate
    return None


def read(path: Path) -> Iterator[Item]:
    memory_dir = _memory_dir(path)
    if memory_dir is None:
        yield Skipped(
            kind=SKIPPED_KIND,
            origin=Origin(str(path)),
            reason="not a seed000 memory directory: no sessions.json or sessions/ in it or in "
            "its memory/.",
        )
        return
    label = memory_dir.resolve().name or "memory"
    index_label = f"{label}/sessions.json"
    # Every id sessions.json lists (with its line), readable entry or not: a directory it lists
    # is imported or reported through its entry, never as an unlisted one.
    listed: dict[str, int] = {}
    index_broken_at: Origin | None = None
    index = memory_dir / "sessions.json"
    if index.is_file():
        for found in _json_list(file=index, label=index_label, list_key="sessions"):
            if isinstance(found, Skipped):
                index_broken_at = found.origin
                yield Skipped(
                    kind=SKIPPED_KIND,
                    origin=found.origin,
                    reason=f"{found.reason} The sessions listed after this point cannot be read.",
                )
                continue
            origin, member = found
            entry = _listed_session(member=member, origin=origin)
            member_id = member.get("id") if isinstance(member, dict) else None
            if isinstance(member_id, str) and SESSION_UUID.fullmatch(member_id):
                if member_id in listed:
                    yield Skipped(
                        kind=SKIPPED_KIND,
                        origin=origin,
                        reason=f"session {member_id} is listed again (first on line "
                        f"{listed[member_id]}); this entry is ignored.",
                    )
                    continue
                listed[member_id] = origin.line
            if isinstance(entry, Skipped):
                yield entry
                continue
            if not (memory_dir / "sessions" / entry.session_id).is_dir():
                yield Skipped(
                    kind=SKIPPED_KIND,
                    origin=origin,
                    reason=f"sessions/{entry.session_id}/ does not exist: the session has no "
                    "state or transcript to import.",
                )
                continue
            yield from _session(
                memory_dir=memory_dir,
                label=label,
                session_id=entry.session_id,
                origin=origin,
                agent_id=entry.agent_id,
                created_at=entry.created_at,
                metadata={"store_types": entry.store_types},
            )
    yield from _unlisted(
        memory_dir=memory_dir, label=label, listed=listed, index_broken_at=index_broken_at
    )


def _unlisted(
    *, memory_dir: Path, label: str, listed: dict[str, int], index_broken_at: Origin | None
) -> Iterator[Item]:
    """The session directories sessions.json does not list, and anything else in sessions/."""
    sessions_dir = memory_dir / "sessions"
    if not sessions_dir.is_dir():
        return
    with os.scandir(sessions_dir) as entries:
        names = sorted(entry.name for entry in entries)  # UUIDv7 names sort by creation
    for name in names:
        if name.startswith(".") or name in listed:
            continue
        origin = Origin(f"{label}/sessions/{name}")
        if not SESSION_UUID.fullmatch(name) or not (sessions_dir / name).is_dir():
            yield Skipped(
                kind=SKIPPED_KIND,
                origin=origin,
                reason="not a session directory: sessions/ holds one directory per session, "
                "named by its UUID.",
            )
        elif index_broken_at is not None:
            # Imported now, it would lack its agent id and creation time for good (a re-run
            # finds it already there); once the index is repaired it comes in whole.
            yield Skipped(
                kind=SKIPPED_KIND,
                origin=origin,
                reason=f"not in the readable part of sessions.json; repair it at "
                f"{index_broken_at} and import again.",
            )
        else:
            yield from _session(
                memory_dir=memory_dir,
                label=label,
                session_id=name,
                origin=origin,
                agent_id="",
                created_at=None,
                metadata={"in_session_index": False},
            )
