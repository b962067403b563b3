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
  `working_memory` key is MemoryHub's working memory key as well. `ts` only counts towards the
  last activity (a state entry has no time of its own) and `cap` is not imported (MemoryHub's
  own cap applies). If a key appears twice, which the store never writes, the later one wins, as
  it does for the store's `kv_get`.
- transcript.md's entries become the messages, seq 1, 2, ... in file order, with the header's
  role and time; the text is trimmed as the store trims it when it reads the file back.
- The store has no summaries, user memories, facts or notes.

Timestamps are ISO 8601. The store writes UTC with a "Z"; an explicit offset is kept, and a time
without one is taken as UTC. A session with no `created_at` gets the time in its UUIDv7 id.

Unknown fields are ignored. Anything else that cannot be read is reported with its file and line,
and a session comes in whole or not at all: a re-run skips the sessions it finds already
imported, so a half-imported one could never be completed, while a skipped one comes in when its
file is repaired and the import run again. So:

- A sessions.json entry that is not an object, has no UUID `id`, a field of the wrong type or a
  bad time, repeats an id, or names a directory that does not exist is skipped (its directory
  with it). If sessions.json stops being JSON, the entries before that point are imported and
  the directories of the rest are skipped, naming the line to repair.
- A session whose kv.json is not JSON (cut off, say) or has an entry without a string key and
  value, or whose transcript.md has a bad header (no " — ", a role MemoryHub does not know, a
  time that is not ISO 8601) or text before its first header, is skipped, the reason naming its
  first problems with their lines (up to four). Like the store, every line that starts with
  "### " is a header: a message line that starts so cannot be told from a broken header. A
  missing kv.json or transcript.md holds nothing to import and is not a problem.
- A session directory that a readable (or absent) sessions.json does not list is imported all
  the same: no index will ever describe it. It has no agent id, the time of its UUIDv7 id and
  `{"in_session_index": false}` in its metadata. Anything else in sessions/ (not a directory
  named by a UUID) is reported; hidden files are ignored.

Nothing is held longer than it must be: sessions.json and kv.json are decoded one entry at a
time, and a transcript is read twice, once to check it and once, as the sink stores them, for
its messages.
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
from memoryhub.transfer.sink import RecordRejected
from memoryhub.transfer.types import (
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
# Further problems of a skipped session named in its reason, beyond the first.
PROBLEMS_LISTED_MAX = 3
_JSON_WHITESPACE = re.compile(r"[ \t\r\n]*")
_UNIX_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# A session comes in whole or not at all, so every problem, of any file, is a skipped session.
SKIPPED_KIND = "sessions"


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


def _list_members(*, handle: IO[str], list_key: str) -> Iterator[tuple[int, Any]]:
    """(line, member) for each member of the list under the top-level object's `list_key`;
    raises _BrokenJson where the document stops making sense, after the members before it."""
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
            if stream.take("]"):
                return
            while True:
                stream.next_char()
                yield stream.line, stream.value()
                if stream.take("]"):
                    return  # what follows the list holds nothing this reader uses
                stream.expect(",", what="',' or ']' after a list member")
        stream.value()  # a field this reader does not use
        if stream.take("}"):
            return
        stream.expect(",", what="',' or '}' after a field")


def _json_list(*, file: Path, label: str, list_key: str) -> Iterator[tuple[Origin, Any] | Skipped]:
    """The members of `file`'s `list_key` list with their origins; a Skipped, last, if the file
    cannot be read to the end of that list."""
    try:
        with file.open(encoding="utf-8") as handle:
            for line, member in _list_members(handle=handle, list_key=list_key):
                yield Origin(label, line), member
    except _BrokenJson as broken:
        yield Skipped(kind=SKIPPED_KIND, origin=Origin(label, broken.line), reason=broken.reason)
    except UnicodeDecodeError:
        yield Skipped(kind=SKIPPED_KIND, origin=Origin(label), reason="is not UTF-8 text.")
    except OSError as error:
        yield Skipped(
            kind=SKIPPED_KIND, origin=Origin(label), reason=f"cannot be read: {error.strerror}."
        )


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
def _state(
    *, file: Path, label: str
) -> tuple[list[ImportedStateEntry], list[dt.datetime], list[Skipped]]:
    """The state entries oldest first, their times, and what could not be read."""
    if not file.exists():
        return [], [], []
    entries: dict[str, ImportedStateEntry] = {}  # in order; a key seen again moves to the end
    times: list[dt.datetime] = []
    problems: list[Skipped] = []
    for found in _json_list(file=file, label=label, list_key="entries"):
        if isinstance(found, Skipped):
            problems.append(found)
            continue
        origin, member = found
        if not isinstance(member, dict):
            problems.append(
                Skipped(
                    kind=SKIPPED_KIND,
                    origin=origin,
                    reason=f"an entry is {_json_type(member)}, not an object.",
                )
            )
            continue
        reasons: list[str] = []
        key, value, stamp = member.get("key"), member.get("value"), member.get("ts")
        if not isinstance(key, str) or not key:
            reasons.append(f"the key is {_json_type(key)}, not a non-empty string")
        if not isinstance(value, str):
            reasons.append(f"the value is {_json_type(value)}, not a string")
        if stamp is not None:
            time = parse_time(text=stamp) if isinstance(stamp, str) else None
            if time is None:
                reasons.append(f"ts {_shown(stamp)} is not an ISO 8601 time")
            else:
                times.append(time)
        if reasons:
            problems.append(
                Skipped(kind=SKIPPED_KIND, origin=origin, reason=f"{'; '.join(reasons)}.")
            )
            continue
        assert isinstance(key, str)
        entries.pop(key, None)
        entries[key] = ImportedStateEntry(key=key, value=value)
    return list(entries.values()), times, problems


# --- transcript.md -------------------------------------------------------------------------------
def _header(*, line: str) -> tuple[str, dt.datetime] | str:
    """A header line's role and time, or why it is not a header MemoryHub can import."""
    role, separator, stamp = line.removeprefix(HEADER_PREFIX).partition(HEADER_SEPARATOR)
    if not separator:
        return f"the header {_shown(line)} has no {HEADER_SEPARATOR!r} between role and time."
    role, stamp = role.strip(), stamp.strip()
    if role not in KNOWN_ROLES:
        return (
            f"the header {_shown(line)} has the role {role!r}; MemoryHub knows "
            f"{', '.join(KNOWN_ROLES)}."
        )
    time = parse_time(text=stamp)
    if time is None:
        return f"the header {_shown(line)} has {stamp!r}, which is not an ISO 8601 time."
    return role, time


def _transcript(*, file: Path, label: str) -> Iterator[_TranscriptEntry | Skipped]:
    """The entries of transcript.md and its problems, in file order, one entry held at a time."""
    if not file.exists():
        return
    current: tuple[int, str, dt.datetime] | None = None  # line, role, time
    body: list[str] = []
    # Lines that belong to no entry: before the first header, or under a broken one (reported).
    stray_reported = False
    try:
        with file.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    # As Rust's str::lines(), which the store reads with: "\n" or "\r\n" ends
                    # a line.
                    line = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
                except UnicodeDecodeError:
                    yield Skipped(
                        kind=SKIPPED_KIND, origin=Origin(label, number), reason="is not UTF-8 text."
                    )
                    continue
                if line.startswith(HEADER_PREFIX):
                    if current is not None:
                        yield _TranscriptEntry(*current, content="\n".join(body).strip())
                    current, body, stray_reported = None, [], True
                    parsed = _header(line=line)
                    if isinstance(parsed, str):
                        yield Skipped(
                            kind=SKIPPED_KIND, origin=Origin(label, number), reason=parsed
                        )
                    else:
                        current = (number, *parsed)
                elif current is not None:
                    body.append(line)
                elif line.strip() and not stray_reported:
                    stray_reported = True
                    yield Skipped(
                        kind=SKIPPED_KIND,
                        origin=Origin(label, number),
                        reason=f"text before the first '{HEADER_PREFIX}{{role}}{HEADER_SEPARATOR}"
                        "{timestamp}' header belongs to no message.",
                    )
    except OSError as error:
        yield Skipped(
            kind=SKIPPED_KIND, origin=Origin(label), reason=f"cannot be read: {error.strerror}."
        )
        return
    if current is not None:
        yield _TranscriptEntry(*current, content="\n".join(body).strip())


def _check_transcript(
    *, file: Path, label: str
) -> tuple[dt.datetime | None, dt.datetime | None, list[Skipped]]:
    """The transcript's earliest and latest times, and its problems (contents are not kept)."""
    earliest: dt.datetime | None = None
    latest: dt.datetime | None = None
    problems: list[Skipped] = []
    for found in _transcript(file=file, label=label):
        if isinstance(found, Skipped):
            problems.append(found)
            continue
        earliest = found.created_at if earliest is None else min(earliest, found.created_at)
        latest = found.created_at if latest is None else max(latest, found.created_at)
    return earliest, latest, problems


def _messages(*, file: Path, label: str) -> Iterator[ImportedMessage]:
    """The transcript's messages, read as the sink stores them (checked before, by
    _check_transcript; a file that changed since is refused rather than half imported)."""
    for found in _transcript(file=file, label=label):
        if isinstance(found, Skipped):
            raise RecordRejected(f"{found.origin}: {found.reason} (changed during the import)")
        yield ImportedMessage(
            role=found.role,
            content=found.content,
            created_at=found.created_at,
        )


# --- a session -----------------------------------------------------------------------------------
def _session_skipped(problems: list[Skipped]) -> Skipped:
    first, *others = problems
    reason = first.reason
    if others:
        listed = "; ".join(f"{p.origin}: {p.reason}" for p in others[:PROBLEMS_LISTED_MAX])
        unlisted = len(others) - PROBLEMS_LISTED_MAX
        reason += f" Also {listed}" + (f"; and {unlisted} more." if unlisted > 0 else "")
    return Skipped(kind=SKIPPED_KIND, origin=first.origin, reason=reason)


def _session(
    *,
    memory_dir: Path,
    label: str,
    session_id: str,
    origin: Origin,
    agent_id: str,
    created_at: dt.datetime | None,
    metadata: dict[str, Any],
) -> ImportedSession | Skipped:
    directory = memory_dir / "sessions" / session_id
    files_label = f"{label}/sessions/{session_id}"
    state, state_times, state_problems = _state(
        file=directory / "kv.json", label=f"{files_label}/kv.json"
    )
    transcript, transcript_label = directory / "transcript.md", f"{files_label}/transcript.md"
    first_message_at, last_message_at, transcript_problems = _check_transcript(
        file=transcript, label=transcript_label
    )
    if state_problems or transcript_problems:
        return _session_skipped(state_problems + transcript_problems)
    created_at = created_at or _uuid7_time(session_id) or first_message_at
    times = [t for t in (created_at, last_message_at, *state_times) if t is not None]
    return ImportedSession(
        source_id=session_id.lower(),
        origin=origin,
        user_id=None,
        agent_id=agent_id,
        external_key=session_id.lower(),
        metadata=metadata,
        created_at=created_at,
        last_active_at=max(times) if times else None,
        state=state,
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
            yield _session(
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
            yield _session(
                memory_dir=memory_dir,
                label=label,
                session_id=name,
                origin=origin,
                agent_id="",
                created_at=None,
                metadata={"in_session_index": False},
            )
