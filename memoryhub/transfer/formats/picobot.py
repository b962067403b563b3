"""PicoBot's ``sessions.json`` snapshot and/or its SQLite database, into MemoryHub (format:
/shared/seeds 001, PicoBot).

PATH is the snapshot, the database (known by its SQLite header, whatever its name), or a
directory such as PicoBot's ``data/`` holding ``sessions.json`` and/or ``conversations.db`` (or
a single other ``*.db`` / ``*.sqlite`` / ``*.sqlite3``).

What each source field becomes
------------------------------
``sessions`` row, or an entry of the snapshot's ``{"sessions": [...]}`` list -> a Session:

- ``id`` -> the record's source id, so a re-run adds nothing; also ``metadata.picobot_session_id``.
- ``user_id`` -> the session's end user, the id kept as it is (``whatsapp:<phone>@s.whatsapp.net``,
  ``tui:local``, ``ws:…``, ``api:…``).
- ``channel_type``, ``channel_id`` -> ``metadata.channel_type``, ``metadata.channel_id``
  (PicoBot stores the channel type JSON-encoded, ``"whatsapp"``; it is decoded when it is JSON).
- ``permissions_json`` / ``permissions`` -> ``metadata.permissions`` (parsed), as a record only:
  MemoryHub's API-key scopes govern access now.
- ``state_json`` / ``state`` -> ``metadata.session_state``. It is PicoBot's lifecycle state
  (``"Active"``, ``{"AwaitingPermission": …}``), not key-value memory, so no StateEntry is made.
- ``created_at``, ``last_active`` -> ``created_at``, ``last_active_at``.
- No agent id and no external key: PicoBot has no agents, and ``channel_id`` is shared by many
  sessions while MemoryHub's external key is unique per tenant.

``messages`` rows (or the snapshot's ``conversation`` list) -> Messages, in ``seq_order`` order
(then row id), numbered 1..n: PicoBot counts from 0 and may leave gaps. ``message_type`` -> role,
``content``, ``tool_call_id`` and ``created_at`` are kept. ``token_estimate`` is not imported:
MemoryHub counts tokens with its own tokenizer so that context budgets add up. The snapshot's
entries are serde-tagged (``{"User": {"content": …}}``, ``{"Tool": {"tool_call_id": …,
"content": …}}``) and carry no time: they take the session's ``created_at``. An ``Assistant``
entry's ``tool_calls`` (``[{"id", "name", "arguments"}]``, or already OpenAI's shape) become the
message's tool calls in OpenAI's shape; calls of any other shape are kept as they are in
``metadata.picobot_tool_calls`` and reported. A role PicoBot does not write (a ``message_type``
or variant other than system/user/assistant/tool) is passed on: the sink stores it under a role
MemoryHub knows, keeping the original in the message metadata, and reports it.

``session_summaries`` -> the session's Summary: ``summary`` is its text, ``updated_at`` (when this
text was written) its time, and it covers the first ``message_count`` messages (PicoBot
summarizes a whole session), capped at the number imported, since retention may have deleted
some since. The older inline ``sessions.summary`` column becomes the Summary only when the session
has no ``session_summaries`` row; it covers every message and is dated ``last_active``. A summary
of a session without messages cannot say what it covers and is reported as skipped.

``user_memories`` -> a UserMemory of the end user ``user_id``, source id
``memory:<user_id>:<key>``; ``content``, ``created_at``, ``updated_at``; ``source_session_id``
points at the imported session when that session is imported too.

Timestamps are ISO 8601 / RFC 3339 text (PicoBot writes chrono's ``to_rfc3339``, with
nanoseconds: cut to microseconds). Text without a UTC offset (SQLite's ``YYYY-MM-DD HH:MM:SS``)
is read as UTC, the zone SQLite's own clock functions write.

Snapshot and database together: when both describe a session (same id), the database wins and
the session is imported once, from it: PicoBot's database is its source of truth and the snapshot
only what it migrates from. Across separate runs the first import of a session stays (a re-run
adds nothing), so import the directory to have the database win. ``sessions.json.migrated`` is
never read: PicoBot moved its sessions into the database, and any missing there since were purged
or expired on purpose.

Not imported: other tables (``schedules``, ``schedule_executions``), unknown columns and fields
(ignored), ``token_estimate``. Nothing is dropped silently: a record that does not match
PicoBot's schema (a missing table column, JSON that does not parse or ends early, a wrong type,
a memory key breaking the key rules) is a Skipped with ``file:line`` for the
snapshot or ``file:table:rowid`` for the database and the reason. A broken session is skipped
whole; one bad message row is skipped alone and the rest of its conversation kept, in order. The
limits MemoryHub itself sets (content size, NUL characters) are the sink's to check: a memory
over the API's 8 KiB is kept whole up to the import limit, cut with a marker beyond. A re-run
appends the messages a session gained, and a memory whose content changed since (newer
``updated_at``) gets a new version (the sink).

Streaming: the snapshot is scanned in chunks, holding one session's JSON at a time; the
database is read through cursors, one session's messages at a time, inside one read
transaction so that a bot writing meanwhile cannot tear a session.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from facts_app.models import (
    MEMORY_KEY_MAX_LENGTH,
    MEMORY_KEY_PATTERN,
    RESERVED_MEMORY_KEY_PREFIXES,
)
from memoryhub.transfer.formats.base import Unreadable, required_time, skipped
from memoryhub.transfer.types import (
    Changed,
    ImportedMemory,
    ImportedMessage,
    ImportedSession,
    ImportedSummary,
    Item,
    Origin,
    Skipped,
)

SNAPSHOT_NAME = "sessions.json"
DATABASE_NAME = "conversations.db"  # PicoBot's `data/conversations.db`
DATABASE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
SQLITE_HEADER = b"SQLite format 3\x00"
ROLES = ("system", "user", "assistant", "tool")  # PicoBot's CHECK on messages.message_type
# Where an assistant message keeps tool calls of a shape MemoryHub cannot carry as tool_calls.
RAW_TOOL_CALLS_KEY = "picobot_tool_calls"
SNAPSHOT_ROLES = {"System": "system", "User": "user", "Assistant": "assistant", "Tool": "tool"}

# PicoBot's columns, by table; others are ignored. Only `sessions` must exist: a store from
# before memories or summaries simply has none.
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": (
        "id",
        "channel_type",
        "channel_id",
        "user_id",
        "permissions_json",
        "created_at",
        "last_active",
        "state_json",
        "summary",
    ),
    "messages": (
        "session_id",
        "message_type",
        "content",
        "tool_call_id",
        "created_at",
        "seq_order",
    ),
    "user_memories": (
        "user_id",
        "key",
        "content",
        "source_session_id",
        "created_at",
        "updated_at",
    ),
    "session_summaries": ("session_id", "summary", "message_count", "created_at", "updated_at"),
}

SNAPSHOT_CHUNK_CHARS = 1 << 16


# --- values ---------------------------------------------------------------------------------------
_TYPE_NAMES: dict[type, str] = {
    bytes: "a blob",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    str: "text",
    dict: "an object",
    list: "a list",
}


def _type_name(value: object) -> str:
    return "null" if value is None else _TYPE_NAMES.get(type(value), type(value).__name__)


def _text(value: object, *, what: str) -> str:
    if not isinstance(value, str):
        raise Unreadable(f"{what} is {_type_name(value)}, not text.")
    return value


def _optional_text(value: object, *, what: str) -> str | None:
    return None if value is None else _text(value, what=what)


def _timestamp(value: object, *, what: str) -> dt.datetime:
    # Naive times are UTC: SQLite's datetime('now') and CURRENT_TIMESTAMP write UTC.
    return required_time(text=_text(value, what=what), what=what)


def _json_column(value: object, *, what: str) -> Any:
    try:
        return json.loads(_text(value, what=what))
    except json.JSONDecodeError as error:
        raise Unreadable(f"{what} is not JSON: {error.msg}.") from None


def _channel_type(value: object) -> Any:
    # PicoBot writes serde_json::to_string(&channel_type), i.e. '"whatsapp"'; its schema only says
    # TEXT, so plain text is kept as it is.
    text = _text(value, what="channel_type")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _memory_key(value: object) -> str:
    """PicoBot's memory key rules (which MemoryHub shares): a row breaking them was not written by
    PicoBot's memory tool and would not be accepted by MemoryHub's API either."""
    key = _text(value, what="key")
    if len(key) > MEMORY_KEY_MAX_LENGTH or not re.match(MEMORY_KEY_PATTERN, key):
        raise Unreadable(
            f"memory key {key!r} is not {MEMORY_KEY_PATTERN} "
            f"of at most {MEMORY_KEY_MAX_LENGTH} characters."
        )
    if key.startswith(RESERVED_MEMORY_KEY_PREFIXES):
        raise Unreadable(
            f"memory key {key!r} starts with a reserved prefix "
            f"({', '.join(RESERVED_MEMORY_KEY_PREFIXES)})."
        )
    return key


def _session_metadata(
    *, session_id: str, channel_type: Any, channel_id: str, permissions: Any, state: Any
) -> dict[str, Any]:
    return {
        "picobot_session_id": session_id,
        "channel_type": channel_type,
        "channel_id": channel_id,
        "permissions": permissions,
        "session_state": state,
    }


def _summary_covering(
    *, message_count: object, imported_messages: int, text: str, created_at: dt.datetime | None
) -> ImportedSummary:
    if isinstance(message_count, bool) or not isinstance(message_count, int):
        raise Unreadable(f"message_count is {_type_name(message_count)}, not an integer.")
    if imported_messages == 0:
        raise Unreadable("the session has no messages for this summary to cover.")
    if message_count < 1:
        raise Unreadable(f"message_count {message_count} covers no message.")
    return ImportedSummary(
        text=text, through_seq=min(message_count, imported_messages), created_at=created_at
    )


# --- the database -------------------------------------------------------------------------------
def _is_sqlite(path: Path) -> bool:
    with path.open("rb") as file:
        return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER


class _Database:
    """A PicoBot database opened read-only, inside one read transaction."""

    def __init__(self, *, path: Path, connection: sqlite3.Connection, tables: set[str]) -> None:
        self.path = path
        self.connection = connection
        self.tables = tables

    @classmethod
    def open(cls, *, path: Path) -> _Database:
        """Raises Unreadable when the file is not a PicoBot database with its tables."""
        try:
            connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        except sqlite3.Error as error:
            raise Unreadable(f"cannot open the database: {error}.") from None
        connection.isolation_level = None  # we issue BEGIN ourselves
        connection.row_factory = sqlite3.Row
        try:
            # One read transaction for the whole import: a consistent view, even while the bot
            # writes (WAL), so both passes over a session's messages see the same rows.
            connection.execute("BEGIN")
            tables = {
                row["name"]
                for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if "sessions" not in tables:
                raise Unreadable("not a PicoBot database: it has no sessions table.")
            for table, needed in TABLE_COLUMNS.items():
                if table not in tables:
                    continue
                # Table names come from TABLE_COLUMNS, never from the file.
                found = {row["name"] for row in connection.execute(f"PRAGMA table_info({table})")}
                missing = [column for column in needed if column not in found]
                if missing:
                    raise Unreadable(
                        f"table {table} lacks the seed's column(s) {', '.join(missing)}."
                    )
        except sqlite3.Error as error:
            connection.close()
            raise Unreadable(f"cannot read the database: {error}.") from None
        except Unreadable:
            connection.close()
            raise
        return cls(path=path, connection=connection, tables=tables & set(TABLE_COLUMNS))

    def origin(self, *, table: str, row_id: int) -> Origin:
        return Origin(f"{self.path}:{table}", row_id)

    def has_session(self, session_id: str) -> bool:
        query = "SELECT 1 FROM sessions WHERE id = ?"
        return self.connection.execute(query, (session_id,)).fetchone() is not None

    # sessions ---------------------------------------------------------------------------------
    def sessions(self) -> Iterator[Item]:
        rows = self.connection.execute(
            "SELECT rowid AS row_id, id, channel_type, channel_id, user_id, permissions_json, "
            "created_at, last_active, state_json, summary FROM sessions ORDER BY rowid"
        )
        for row in rows:
            origin = self.origin(table="sessions", row_id=row["row_id"])
            try:
                session = self._session(row=row, origin=origin)
            except Unreadable as error:
                yield skipped(kind="sessions", origin=origin, error=error)
                continue
            # First pass: report the unreadable rows and count the rest, which the summary's
            # range needs before the session is handed over.
            imported_messages = 0
            for result in self._message_rows(session.source_id):
                if isinstance(result, Skipped):
                    yield result
                else:
                    imported_messages += 1
            summary = self._summary(
                session=session, inline=row["summary"], imported_messages=imported_messages
            )
            if isinstance(summary, Skipped):
                yield summary
            elif summary is not None:
                session.summaries = [summary]
            # Second pass, lazily, while the sink writes: one chunk of rows in memory at a time.
            session.messages = (
                result
                for result in self._message_rows(session.source_id)
                if isinstance(result, ImportedMessage)
            )
            yield session

    def _session(self, *, row: sqlite3.Row, origin: Origin) -> ImportedSession:
        session_id = _text(row["id"], what="id")
        if not session_id:
            raise Unreadable("id is empty.")
        return ImportedSession(
            source_id=session_id,
            origin=origin,
            user_id=_text(row["user_id"], what="user_id"),
            metadata=_session_metadata(
                session_id=session_id,
                channel_type=_channel_type(row["channel_type"]),
                channel_id=_text(row["channel_id"], what="channel_id"),
                permissions=_json_column(row["permissions_json"], what="permissions_json"),
                state=_json_column(row["state_json"], what="state_json"),
            ),
            created_at=_timestamp(row["created_at"], what="created_at"),
            last_active_at=_timestamp(row["last_active"], what="last_active"),
        )

    def _message_rows(self, session_id: str) -> Iterator[ImportedMessage | Skipped]:
        if "messages" not in self.tables:
            return
        rows = self.connection.execute(
            "SELECT rowid AS row_id, message_type, content, tool_call_id, created_at, seq_order "
            "FROM messages WHERE session_id = ? ORDER BY seq_order, rowid",
            (session_id,),
        )
        for row in rows:
            origin = self.origin(table="messages", row_id=row["row_id"])
            try:
                role = _text(row["message_type"], what="message_type")
                if isinstance(row["seq_order"], bool) or not isinstance(row["seq_order"], int):
                    raise Unreadable(
                        f"seq_order is {_type_name(row['seq_order'])}, not an integer."
                    )
                message = ImportedMessage(
                    role=role,
                    content=_text(row["content"], what="content"),
                    tool_call_id=_optional_text(row["tool_call_id"], what="tool_call_id") or "",
                    created_at=_timestamp(row["created_at"], what="created_at"),
                )
            except Unreadable as error:
                yield skipped(kind="messages", origin=origin, error=error)
                continue
            yield message

    def _summary(
        self, *, session: ImportedSession, inline: object, imported_messages: int
    ) -> ImportedSummary | Skipped | None:
        """The session's summary from session_summaries, else from the inline column."""
        row = None
        if "session_summaries" in self.tables:
            row = self.connection.execute(
                "SELECT rowid AS row_id, summary, message_count, updated_at "
                "FROM session_summaries WHERE session_id = ?",
                (session.source_id,),
            ).fetchone()
        if row is not None:
            origin = self.origin(table="session_summaries", row_id=row["row_id"])
            try:
                return _summary_covering(
                    message_count=row["message_count"],
                    imported_messages=imported_messages,
                    text=_text(row["summary"], what="summary"),
                    created_at=_timestamp(row["updated_at"], what="updated_at"),
                )
            except Unreadable as error:
                return skipped(kind="summaries", origin=origin, error=error)
        if inline is None or (isinstance(inline, str) and not inline.strip()):
            return None
        try:
            return _summary_covering(
                message_count=imported_messages,
                imported_messages=imported_messages,
                text=_text(inline, what="summary"),
                created_at=session.last_active_at,
            )
        except Unreadable as error:
            return Skipped(kind="summaries", origin=session.origin, reason=f"summary: {error}")

    # memories ---------------------------------------------------------------------------------
    def memories(self) -> Iterator[Item]:
        if "user_memories" not in self.tables:
            return
        rows = self.connection.execute(
            "SELECT rowid AS row_id, user_id, key, content, source_session_id, created_at, "
            "updated_at FROM user_memories ORDER BY rowid"
        )
        for row in rows:
            origin = self.origin(table="user_memories", row_id=row["row_id"])
            try:
                user_id = _text(row["user_id"], what="user_id")
                key = _memory_key(row["key"])
                memory = ImportedMemory(
                    source_id=f"memory:{user_id}:{key}",
                    origin=origin,
                    key=key,
                    content=_text(row["content"], what="content"),
                    user_id=user_id,
                    source_session_id=_optional_text(
                        row["source_session_id"], what="source_session_id"
                    ),
                    created_at=_timestamp(row["created_at"], what="created_at"),
                    updated_at=_timestamp(row["updated_at"], what="updated_at"),
                )
            except Unreadable as error:
                yield skipped(kind="user_memories", origin=origin, error=error)
                continue
            yield memory

    def orphans(self) -> Iterator[Item]:
        """Rows whose session is not in the sessions table (SQLite enforces foreign keys only
        where a connection turns them on): reported, as there is nothing to attach them to."""
        for table, kind in (("messages", "messages"), ("session_summaries", "summaries")):
            if table not in self.tables:
                continue
            # `table` comes from the tuple above, never from the file.
            rows = self.connection.execute(
                f"SELECT session_id, COUNT(*) AS count, MIN(rowid) AS first_row FROM {table} "  # noqa: S608
                "WHERE session_id NOT IN (SELECT id FROM sessions WHERE id IS NOT NULL) "
                "GROUP BY session_id ORDER BY first_row"
            )
            for row in rows:
                yield Skipped(
                    kind=kind,
                    origin=self.origin(table=table, row_id=row["first_row"]),
                    reason=(
                        f"{row['count']} row(s) of session {row['session_id']!r}, which is not "
                        "in the sessions table."
                    ),
                )


# --- the snapshot ---------------------------------------------------------------------------------
@dataclass
class _Entry:
    """One element of the snapshot's sessions list: its JSON text and its first line."""

    line: int
    text: str


@dataclass
class _Problem:
    line: int
    reason: str


# Outside strings: a structural character, or a run of a bare value (number, true, null…).
_SYMBOL = re.compile(r'[{}\[\]",:]|[^\s{}\[\]",:]+')
_STRING_STOP = re.compile(r'["\\]')


class _SnapshotScanner:
    """Finds the elements of `{"sessions": [...]}` in text fed in chunks, without parsing what it
    does not need: the scan keeps one element's text, the nesting depth and the line number.

    Other top-level keys are skipped; anything else at the top level is reported and ends the scan.
    """

    def __init__(self) -> None:
        self.line = 1
        self.depth = 0
        self.top = "start"  # start -> object -> done | broken
        self.in_string = False
        self.escape_pending = False
        self.expect = "key"  # in the top-level object: key, value or comma
        self.key: str | None = None
        self.sessions = "none"  # none -> in -> done
        self.parts: list[str] | None = None  # the text being captured (a key or an element)
        self.capture_from = 0
        self.capture_line = 0
        self.capturing_key = False

    def _advance(self, chunk: str, start: int, end: int) -> int:
        self.line += chunk.count("\n", start, end)
        return end

    def _start_capture(self, at: int) -> None:
        self.parts = []
        self.capture_from = at
        self.capture_line = self.line

    def _end_capture(self, chunk: str, end: int) -> str:
        assert self.parts is not None  # only called while capturing
        text = "".join(self.parts) + chunk[self.capture_from : end]
        self.parts = None
        return text

    def feed(self, chunk: str) -> Iterator[_Entry | _Problem]:
        position = 0
        while position < len(chunk) and self.top != "broken":
            if self.in_string:
                if self.escape_pending:  # the escaped character opens this chunk
                    self.escape_pending = False
                    position = self._advance(chunk, position, position + 1)
                    continue
                stop = _STRING_STOP.search(chunk, position)
                if stop is None:
                    position = self._advance(chunk, position, len(chunk))
                    break
                if stop.group() == "\\":
                    if stop.end() == len(chunk):
                        self.escape_pending = True
                    position = self._advance(chunk, position, min(stop.end() + 1, len(chunk)))
                    continue
                self.in_string = False
                position = self._advance(chunk, position, stop.end())
                yield from self._string_ended(chunk, position)
                continue
            symbol = _SYMBOL.search(chunk, position)
            if symbol is None:
                position = self._advance(chunk, position, len(chunk))
                break
            self._advance(chunk, position, symbol.start())
            position = symbol.end()
            yield from self._symbol(chunk, symbol.group(), symbol.start())
        if self.parts is not None:
            self.parts.append(chunk[self.capture_from :])
            self.capture_from = 0

    def _string_ended(self, chunk: str, end: int) -> Iterator[_Entry | _Problem]:
        if self.capturing_key:
            self.capturing_key = False
            raw = self._end_capture(chunk, end)
            try:
                self.key = json.loads(raw)
            except json.JSONDecodeError:
                self.key = raw
            self.expect = "colon"
        elif self.depth == 1:
            self.expect = "comma"
        elif self.depth == 2 and self.sessions == "in" and self.parts is not None:
            yield _Entry(line=self.capture_line, text=self._end_capture(chunk, end))

    def _symbol(self, chunk: str, symbol: str, at: int) -> Iterator[_Entry | _Problem]:
        if self.depth == 0:
            yield from self._top_level(symbol)
        elif self.depth == 1:
            yield from self._in_object(symbol, at)
        elif self.depth == 2 and self.sessions == "in":
            yield from self._in_sessions(chunk, symbol, at)
        elif symbol == '"':
            self.in_string = True
        elif symbol in "{[":
            self.depth += 1
        elif symbol in "}]":
            self.depth -= 1
            if self.depth == 2 and self.sessions == "in" and self.parts is not None:
                yield _Entry(line=self.capture_line, text=self._end_capture(chunk, at + 1))
            elif self.depth == 1:
                self.expect = "comma"  # the end of another key's nested value

    def _top_level(self, symbol: str) -> Iterator[_Problem]:
        if self.top == "start" and symbol == "{":
            self.top, self.depth, self.expect = "object", 1, "key"
            return
        ended, self.top = self.top == "done", "broken"
        if ended:
            yield _Problem(self.line, f"unexpected {symbol[:20]!r} after the snapshot's end.")
        else:
            yield _Problem(
                self.line,
                'not a PicoBot sessions.json snapshot: it must be a JSON object with a "sessions" '
                f"list, not start with {symbol[:20]!r}.",
            )

    def _in_object(self, symbol: str, at: int) -> Iterator[_Problem]:
        if self.key == "sessions" and self.expect == "value":
            if symbol == "[":
                self.depth, self.sessions = 2, "in"
            else:
                self.top = "broken"
                yield _Problem(
                    self.line, f'"sessions" must be a list, not start with {symbol[:20]!r}.'
                )
        elif symbol == '"':
            self.in_string = True
            if self.expect == "key":
                self.capturing_key = True
                self._start_capture(at)  # with its quotes: the key is decoded as JSON
        elif symbol == ":":
            self.expect = "value"
        elif symbol == ",":
            self.expect, self.key = "key", None
        elif symbol == "}":
            self.depth, self.top = 0, "done"
        elif symbol in "{[":
            self.depth += 1
        elif symbol == "]":
            self.top = "broken"
            yield _Problem(self.line, "unbalanced ']' in the snapshot's top-level object.")
        else:
            self.expect = "comma"  # a bare value of another key

    def _in_sessions(self, chunk: str, symbol: str, at: int) -> Iterator[_Entry | _Problem]:
        if symbol in "{[":
            self._start_capture(at)
            self.depth = 3
        elif symbol == '"':
            self._start_capture(at)
            self.in_string = True
        elif symbol == "]":
            self.depth, self.sessions, self.expect = 1, "done", "comma"
        elif symbol == "}":
            self.top = "broken"
            yield _Problem(self.line, 'unbalanced "}" in the sessions list.')
        elif symbol == ",":
            pass
        elif symbol == ":":
            yield _Problem(self.line, "unexpected ':' between two sessions.")
        else:
            yield _Entry(line=self.line, text=symbol)

    def finish(self) -> Iterator[_Problem]:
        if self.top == "broken":
            return
        if self.parts is not None and not self.capturing_key:
            yield _Problem(
                self.capture_line,
                "the file ends inside this session: the snapshot is truncated.",
            )
        elif self.top == "start":
            yield _Problem(self.line, "the file is empty: no snapshot in it.")
        elif self.top == "object":
            yield _Problem(
                self.line,
                "the file ends before the snapshot's closing brace: it is truncated.",
            )
        elif self.sessions == "none":
            yield _Problem(1, 'no "sessions" list in this snapshot.')


def _openai_tool_call(call: object) -> dict[str, Any] | None:
    """A tool call in OpenAI's shape, from that shape or PicoBot's flat `{"id", "name",
    "arguments"}`; None for anything else."""
    if not isinstance(call, dict) or not isinstance(call.get("id"), str):
        return None
    function = call.get("function")
    if isinstance(function, dict):
        name, arguments = function.get("name"), function.get("arguments")
    else:
        name, arguments = call.get("name"), call.get("arguments")
    if not isinstance(name, str) or not name:
        return None
    return {
        "id": call["id"],
        "type": "function",
        "function": {
            "name": name,
            # OpenAI carries arguments as JSON text; a store may keep the JSON value itself.
            "arguments": arguments
            if isinstance(arguments, str)
            else json.dumps({} if arguments is None else arguments, separators=(",", ":")),
        },
    }


def _snapshot_tool_calls(
    *, fields: dict[str, Any]
) -> tuple[list[dict[str, Any]] | None, dict[str, Any]]:
    """An assistant entry's `tool_calls`: in OpenAI's shape, kept on the message; calls of
    another shape are kept as they are in its metadata (`picobot_tool_calls`, which the report
    names). Never dropped."""
    raw = fields.get("tool_calls")
    if raw is None or raw == []:
        return None, {}
    calls = raw if isinstance(raw, list) else [raw]
    converted = [_openai_tool_call(call) for call in calls]
    if all(call is not None for call in converted):
        return [call for call in converted if call is not None], {}
    return None, {RAW_TOOL_CALLS_KEY: raw}


def _snapshot_message(*, entry: object, index: int, created_at: dt.datetime) -> ImportedMessage:
    where = f"conversation[{index}]"
    if not isinstance(entry, dict) or len(entry) != 1:
        raise Unreadable(f'{where} is not a one-key object like {{"User": {{"content": ...}}}}.')
    ((variant, fields),) = entry.items()
    if not isinstance(fields, dict):
        raise Unreadable(f"{where}: {variant} holds {_type_name(fields)}, not an object.")
    tool_call_id = ""
    tool_calls: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] = {}
    if variant == "Tool":
        tool_call_id = _text(fields.get("tool_call_id"), what=f"{where} tool_call_id")
    elif variant == "Assistant":
        tool_calls, metadata = _snapshot_tool_calls(fields=fields)
    content = fields.get("content")
    return ImportedMessage(
        # Another variant is passed on as it is: the sink stores it under a role MemoryHub
        # knows, the original in the message's metadata, and the report says so.
        role=SNAPSHOT_ROLES.get(str(variant), str(variant)),
        # An assistant turn that only calls tools may carry no text.
        content=""
        if content is None and (tool_calls or metadata)
        else _text(content, what=f"{where} content"),
        tool_call_id=tool_call_id,
        tool_calls=tool_calls,
        metadata=metadata,
        created_at=created_at,
    )


def _snapshot_session(*, record: object, origin: Origin) -> list[Item]:
    """One snapshot entry: its unreadable messages (Skipped), then its session; raises
    Unreadable for an entry that is not a session, before anything of it is reported."""
    if not isinstance(record, dict):
        raise Unreadable(f"this session is {_type_name(record)}, not an object.")
    session_id = _text(record.get("id"), what="id")
    if not session_id:
        raise Unreadable("id is empty.")
    conversation = record.get("conversation")
    if not isinstance(conversation, list):
        raise Unreadable(f"conversation is {_type_name(conversation)}, not a list.")
    created_at = _timestamp(record.get("created_at"), what="created_at")
    session = ImportedSession(
        source_id=session_id,
        origin=origin,
        user_id=_text(record.get("user_id"), what="user_id"),
        metadata=_session_metadata(
            session_id=session_id,
            channel_type=record.get("channel_type"),
            channel_id=_text(record.get("channel_id"), what="channel_id"),
            permissions=record.get("permissions"),
            state=record.get("state"),
        ),
        created_at=created_at,
        last_active_at=_timestamp(record.get("last_active"), what="last_active"),
    )
    items: list[Item] = []
    messages = []
    for index, entry in enumerate(conversation):
        try:
            # Dated here, not left to the sink, which would date them at the import.
            message = _snapshot_message(entry=entry, index=index, created_at=created_at)
        except Unreadable as error:
            reason = f"session {session_id!r}: {error}"
            items.append(Skipped(kind="messages", origin=origin, reason=reason))
            continue
        messages.append(message)
        if RAW_TOOL_CALLS_KEY in message.metadata:
            items.append(
                Changed(
                    kind="messages",
                    origin=origin,
                    change=f"session {session_id!r}: conversation[{index}]'s tool_calls are "
                    "neither {id, name, arguments} nor OpenAI's shape; kept as they are in the "
                    f"message metadata ({RAW_TOOL_CALLS_KEY}).",
                )
            )
    session.messages = messages
    items.append(session)
    return items


def _snapshot_events(path: Path) -> Iterator[_Entry | _Problem]:
    scanner = _SnapshotScanner()
    with path.open(encoding="utf-8-sig") as file:
        while True:
            try:
                chunk = file.read(SNAPSHOT_CHUNK_CHARS)
            except UnicodeDecodeError as error:
                reason = f"the file is not UTF-8 text past this line: {error.reason}."
                yield _Problem(scanner.line, reason)
                return
            if not chunk:
                break
            yield from scanner.feed(chunk)
            if scanner.top == "broken":
                return  # the rest cannot be located: stop reading
    yield from scanner.finish()


def _snapshot(*, path: Path, in_database: Callable[[str], bool]) -> Iterator[Item]:
    for event in _snapshot_events(path):
        origin = Origin(str(path), event.line)
        if isinstance(event, _Problem):
            yield Skipped(kind="sessions", origin=origin, reason=event.reason)
            continue
        try:
            record = json.loads(event.text)
        except json.JSONDecodeError as error:
            origin = Origin(str(path), event.line + error.lineno - 1)
            yield Skipped(kind="sessions", origin=origin, reason=f"not valid JSON: {error.msg}.")
            continue
        session_id = record.get("id") if isinstance(record, dict) else None
        if isinstance(session_id, str) and in_database(session_id):
            continue  # the database's copy of this session is imported instead
        try:
            yield from _snapshot_session(record=record, origin=origin)
        except Unreadable as error:
            yield skipped(kind="sessions", origin=origin, error=error)


# --- the entry point ------------------------------------------------------------------------------
def _inputs(path: Path) -> tuple[Path | None, Path | None]:
    """The snapshot and the database PATH names; raises Unreadable when it names neither."""
    if path.is_file():
        return (None, path) if _is_sqlite(path) else (path, None)
    snapshot = path / SNAPSHOT_NAME
    databases = sorted(
        candidate
        for candidate in path.iterdir()
        if candidate.suffix in DATABASE_SUFFIXES and candidate.is_file() and _is_sqlite(candidate)
    )
    if (path / DATABASE_NAME) in databases:
        databases = [path / DATABASE_NAME]
    if len(databases) > 1:
        names = ", ".join(database.name for database in databases)
        raise Unreadable(
            f"several SQLite databases here ({names}) and none is {DATABASE_NAME}: "
            "import the one that is PicoBot's."
        )
    database = databases[0] if databases else None
    if database is None and not snapshot.is_file():
        raise Unreadable(
            f"no {SNAPSHOT_NAME} and no SQLite database ({DATABASE_NAME}, "
            f"*{', *'.join(DATABASE_SUFFIXES)}) in this directory."
        )
    return (snapshot if snapshot.is_file() else None), database


def read(path: Path) -> Iterator[Item]:
    """Sessions from the database, then the snapshot's sessions that are not in it, then the
    memories (last, so that their source sessions are already imported)."""
    try:
        snapshot, database_path = _inputs(path)
    except Unreadable as error:
        yield skipped(kind="sessions", origin=Origin(str(path)), error=error)
        return
    database = None
    if database_path is not None:
        try:
            database = _Database.open(path=database_path)
        except Unreadable as error:
            yield skipped(kind="sessions", origin=Origin(str(database_path)), error=error)
    if database is None:
        if snapshot is not None:
            yield from _snapshot(path=snapshot, in_database=lambda _: False)
        return
    with closing(database.connection):
        yield from database.sessions()
        if snapshot is not None:
            yield from _snapshot(path=snapshot, in_database=database.has_session)
        yield from database.memories()
        yield from database.orphans()
