"""sclaw's `memory.db`, the SQLite backend of its two-tier memory (format: /shared/seeds 004,
sclaw).

PATH is one `memory.db`, or a data directory holding `memory.db` and/or per-agent stores at
`agents/<name>/memory.db` (sclaw's layout; each is read in turn). The store is opened read-only,
inside one read transaction, so a store that sclaw is still writing is read as one snapshot.

What becomes what:

- `messages` rows sharing a `session_id` (sclaw's persistence key `channel:chatID:threadID`,
  which survives session-id rotation) become one **session** whose `external_key` is that key,
  so a bot moving to MemoryHub keeps finding the conversation by the same key. Its messages keep
  their order (`seq`) and are numbered 1, 2, 3... again; `role`, `content` and `name` are kept,
  `tool_id` becomes `tool_call_id`, `tool_calls` (`[{"id", "name", "arguments"}]`) becomes
  OpenAI's shape (`[{"id", "type": "function", "function": {"name", "arguments": "<JSON>"}}]`),
  and `is_error = 1` becomes message metadata `{"is_error": true}`. The session starts at its
  first message and was last active at its last message (or its summary, if later).
- The **end user** is `channel:chatID` (the thread left out, so threads of one chat are one
  person): the person in a direct chat, the group in a group chat - sclaw keys memory by chat,
  so nothing finer exists. A key that is not `channel:chatID:threadID` gives a session with no
  end user. Session metadata records `channel`, `chat_id` and `thread_id`.
- The **agent** is `<name>` for a store at `agents/<name>/memory.db`, else empty. It is part of
  every source id, because two agents' stores may hold the same persistence key; MemoryHub keys
  sessions by tenant and key alone, so the second such session is reported as skipped.
- A `summaries` row (sclaw keeps one per session, replaced at each compaction) becomes the
  session's **summary**, dated `updated_at`, with model "sclaw". sclaw does not record which
  messages it covers: it is taken to cover the messages written up to `updated_at` (its
  `through_seq` is the last of them).
- A `facts` row becomes a **fact** with its `content`, `tags` (JSON array), `metadata` (JSON
  object, kept as it is, plus `sclaw_source` = the row's `source` when it has one) and
  `created_at`. It points at the imported session whose key is its `source`, if the store has
  one. When `source` is a persistence key, the fact belongs to that chat's end user; any other
  source (empty, or an old session UUID) names no person, so the fact is tenant-wide.

Timestamps: sclaw writes UTC ISO-8601 strings (`2025-03-01T09:30:00.000Z` from SQLite,
RFC 3339 with nanoseconds from Go). An offset is kept; a string without one is taken as UTC.

Not imported: `facts_fts` and its triggers (MemoryHub indexes facts itself), `schema_version`
(the reader looks at the columns it needs instead), and columns it does not know (ignored).

A role sclaw does not write is passed on: the sink stores it under a role MemoryHub knows,
keeping the original in the message metadata, and reports it. Each fact keeps sclaw's id as
`metadata.sclaw_fact_id` and as its external_id `sclaw:<id>` (`sclaw:<agent>/<id>` for an
agent's store), the API's fact id.

Nothing is dropped silently: a row it cannot read (text that is not text, broken
JSON, a timestamp that is not one) is reported as skipped with `<store>:<table>:<rowid>` and why,
and the rest goes on - a bad message leaves its session otherwise whole; a session none of whose
messages can be read, a summary whose session has no messages, a table without a column it
needs, or a file that is not an SQLite database is reported the same way.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from facts_app.models import FACT_EXTERNAL_ID_MAX_LENGTH
from memoryhub.transfer.formats.base import Unreadable, parse_time, skipped
from memoryhub.transfer.types import (
    ImportedFact,
    ImportedMessage,
    ImportedSession,
    ImportedSummary,
    Item,
    Origin,
    Skipped,
)

STORE_FILE_NAME = "memory.db"
AGENTS_DIRECTORY_NAME = "agents"
SUMMARY_MODEL = "sclaw"

# The columns each table must have, and the ones an older or trimmed store may lack, with the
# value sclaw's schema gives them by default.
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "messages": ("session_id", "seq", "role", "content", "created_at"),
    "summaries": ("session_id", "summary", "updated_at"),
    "facts": ("id", "content", "created_at"),
}
OPTIONAL_COLUMNS: dict[str, dict[str, str]] = {
    "messages": {"name": "''", "tool_id": "''", "tool_calls": "'[]'", "is_error": "0"},
    "summaries": {},
    "facts": {"source": "''", "tags": "'[]'", "metadata": "'{}'"},
}
MESSAGE_COLUMNS = (
    "rowid",
    "seq",
    "role",
    "content",
    "name",
    "tool_id",
    "tool_calls",
    "is_error",
    "created_at",
)
FACT_COLUMNS = ("rowid", "id", "content", "source", "tags", "metadata", "created_at")


@dataclass(frozen=True)
class SclawStore:
    """One `memory.db`: where it is, how the report names it, and whose agent it is."""

    path: Path
    label: str
    agent_id: str

    def origin(self, *, table: str, rowid: int = 0) -> Origin:
        return Origin(f"{self.label}:{table}", rowid)

    def source_id(self, *, kind: str, identity: str) -> str:
        # Two agents' stores may share persistence keys and fact ids: the agent keeps them apart.
        prefix = f"{self.agent_id}/" if self.agent_id else ""
        return f"{prefix}{kind}:{identity}"


@dataclass(frozen=True)
class PersistenceKey:
    channel: str
    chat_id: str
    thread_id: str

    @property
    def end_user_id(self) -> str:
        return f"{self.channel}:{self.chat_id}"


def read(path: Path) -> Iterator[Item]:
    """Every session, summary and fact of the sclaw store(s) at `path`, streamed."""
    stores = sclaw_stores_at(path=path)
    if not stores:
        yield Skipped(
            kind="stores",
            origin=Origin(str(path)),
            reason=(
                f"no {STORE_FILE_NAME} here, nor under "
                f"{AGENTS_DIRECTORY_NAME}/<name>/{STORE_FILE_NAME}."
            ),
        )
    for store in stores:
        yield from read_store(store=store)


def sclaw_stores_at(*, path: Path) -> list[SclawStore]:
    if path.is_file():
        # sclaw's per-agent layout: {data_dir}/agents/<name>/memory.db.
        in_agent_directory = path.parent.parent.name == AGENTS_DIRECTORY_NAME
        return [
            SclawStore(
                path=path,
                label=path.name,
                agent_id=path.parent.name if in_agent_directory else "",
            )
        ]
    stores = []
    if (path / STORE_FILE_NAME).is_file():
        stores.append(SclawStore(path=path / STORE_FILE_NAME, label=STORE_FILE_NAME, agent_id=""))
    agents = path / AGENTS_DIRECTORY_NAME
    if agents.is_dir():
        for agent_directory in sorted(agents.iterdir()):
            store_path = agent_directory / STORE_FILE_NAME
            if store_path.is_file():
                stores.append(
                    SclawStore(
                        path=store_path,
                        label=str(store_path.relative_to(path)),
                        agent_id=agent_directory.name,
                    )
                )
    return stores


def read_store(*, store: SclawStore) -> Iterator[Item]:
    try:
        connection = sqlite3.connect(
            f"{store.path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None
        )
    except sqlite3.Error as error:
        yield Skipped(kind="stores", origin=Origin(store.label), reason=f"cannot open: {error}")
        return
    try:
        try:
            # One snapshot for the whole read: each session is read twice (see session_items).
            connection.execute("BEGIN")
            problems = {
                table: table_problem(connection=connection, table=table)
                for table in REQUIRED_COLUMNS
            }
        except sqlite3.DatabaseError as error:
            yield Skipped(
                kind="stores",
                origin=Origin(store.label),
                reason=f"not a readable SQLite database: {error}",
            )
            return
        for table, problem in problems.items():
            if problem is not None:
                yield Skipped(kind=table, origin=store.origin(table=table), reason=problem)
        if problems["messages"] is None:
            yield from sessions_of(
                connection=connection, store=store, summaries_readable=not problems["summaries"]
            )
        if problems["summaries"] is None:
            yield from summaries_without_messages(
                connection=connection, store=store, messages_readable=not problems["messages"]
            )
        if problems["facts"] is None:
            yield from facts_of(connection=connection, store=store)
    finally:
        connection.close()


def table_problem(*, connection: sqlite3.Connection, table: str) -> str | None:
    """Why `table` cannot be read (missing, or without a column the import needs), or None."""
    columns = {row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')}
    if not columns:
        return f"the store has no `{table}` table."
    missing = [column for column in REQUIRED_COLUMNS[table] if column not in columns]
    if missing:
        return f"the `{table}` table has no column {', '.join(missing)}."
    return None


def select_list(*, connection: sqlite3.Connection, table: str, columns: tuple[str, ...]) -> str:
    """The SELECT list for `columns`, sclaw's default standing in for an optional column the
    store lacks (names come from this module's constants, never from the store)."""
    present = {row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')}
    defaults = OPTIONAL_COLUMNS[table]
    return ", ".join(
        f'"{column}"'
        if column == "rowid" or column in present
        else f'{defaults[column]} AS "{column}"'
        for column in columns
    )


# --- sessions -------------------------------------------------------------------------------------


def sessions_of(
    *, connection: sqlite3.Connection, store: SclawStore, summaries_readable: bool
) -> Iterator[Item]:
    """One session per persistence key, in the order their first messages were written."""
    keys = connection.execute(
        "SELECT session_id, MIN(rowid) FROM messages GROUP BY session_id ORDER BY MIN(rowid)"
    )
    for key, first_rowid in keys:
        yield from session_items(
            connection=connection,
            store=store,
            key=key,
            origin=store.origin(table="messages", rowid=first_rowid),
            summaries_readable=summaries_readable,
        )


def session_items(
    *,
    connection: sqlite3.Connection,
    store: SclawStore,
    key: Any,
    origin: Origin,
    summaries_readable: bool,
) -> Iterator[Item]:
    """The skipped rows of one session, then the session, whose messages are read again as the
    sink consumes them: only the session's numbers are held, never its messages."""
    if not isinstance(key, str) or not key:
        yield Skipped(
            kind="sessions",
            origin=origin,
            reason=f"persistence key {key!r} is not a non-empty text.",
        )
        return
    summary_row = (
        connection.execute(
            "SELECT rowid, summary, updated_at FROM summaries WHERE session_id = ?", (key,)
        ).fetchone()
        if summaries_readable
        else None
    )
    summary_time: dt.datetime | None = None
    summary_problem: str | None = None
    if summary_row is not None:
        try:
            summary_time = parse_timestamp(value=summary_row[2], what="updated_at")
            if not isinstance(summary_row[1], str) or not summary_row[1].strip():
                raise Unreadable("summary is empty or not text.")
        except Unreadable as error:
            summary_problem = str(error)

    # First pass: check every message, number the readable ones, find the summary's reach.
    readable = total = through_seq = 0
    first_at: dt.datetime | None = None
    last_at: dt.datetime | None = None
    for row in message_rows(connection=connection, key=key):
        total += 1
        try:
            message = message_from_row(row=row)
        except Unreadable as error:
            yield skipped(
                kind="messages", origin=store.origin(table="messages", rowid=row[0]), error=error
            )
            continue
        readable += 1
        at = message.created_at
        assert at is not None  # message_from_row always sets it
        first_at = at if first_at is None else min(first_at, at)
        last_at = at if last_at is None else max(last_at, at)
        if summary_time is not None and at <= summary_time:
            through_seq = readable

    summary_origin = (
        store.origin(table="summaries", rowid=summary_row[0]) if summary_row is not None else None
    )
    if readable == 0:
        yield Skipped(
            kind="sessions",
            origin=origin,
            reason=f"none of the {total} message(s) of {key!r} could be read (listed above).",
        )
        if summary_origin is not None:
            yield Skipped(
                kind="summaries",
                origin=summary_origin,
                reason=f"its session {key!r} was skipped.",
            )
        return

    summaries: list[ImportedSummary] = []
    if summary_row is not None and summary_origin is not None:
        if summary_problem is None and through_seq == 0:
            summary_problem = f"it was written before any message of {key!r} it could cover."
        if summary_problem is not None:
            yield Skipped(kind="summaries", origin=summary_origin, reason=summary_problem)
        else:
            summaries.append(
                ImportedSummary(
                    text=summary_row[1],
                    through_seq=through_seq,
                    model=SUMMARY_MODEL,
                    created_at=summary_time,
                )
            )

    persistence_key = parse_persistence_key(key=key)
    metadata: dict[str, Any] = {}
    if persistence_key is not None:
        metadata = {
            "channel": persistence_key.channel,
            "chat_id": persistence_key.chat_id,
            "thread_id": persistence_key.thread_id,
        }
    if summaries and summary_time is not None and last_at is not None:
        last_at = max(last_at, summary_time)
    yield ImportedSession(
        source_id=store.source_id(kind="session", identity=key),
        origin=origin,
        user_id=persistence_key.end_user_id if persistence_key is not None else None,
        agent_id=store.agent_id,
        external_key=key,
        metadata=metadata,
        created_at=first_at,
        last_active_at=last_at,
        summaries=summaries,
        messages=readable_messages(connection=connection, key=key),
    )


def message_rows(*, connection: sqlite3.Connection, key: str) -> Iterator[tuple[Any, ...]]:
    columns = select_list(connection=connection, table="messages", columns=MESSAGE_COLUMNS)
    yield from connection.execute(
        f"SELECT {columns} FROM messages WHERE session_id = ? ORDER BY seq",  # noqa: S608
        (key,),
    )


def readable_messages(*, connection: sqlite3.Connection, key: str) -> Iterator[ImportedMessage]:
    """The second pass: the rows the first pass found unreadable were reported there."""
    for row in message_rows(connection=connection, key=key):
        try:
            yield message_from_row(row=row)
        except Unreadable:
            continue


def message_from_row(*, row: tuple[Any, ...]) -> ImportedMessage:
    _rowid, seq, role, content, name, tool_id, tool_calls, is_error, created_at = row
    if not isinstance(seq, int):
        raise Unreadable(f"seq {seq!r} is not an integer.")
    if not isinstance(role, str) or not role:
        raise Unreadable(f"message {seq}: role is {type_name(value=role)}, not text.")
    # A role sclaw does not write is passed on as it is: the sink stores it under a role
    # MemoryHub knows, the original in the message's metadata, and the report says so.
    for what, value in (("content", content), ("name", name), ("tool_id", tool_id)):
        if not isinstance(value, str):
            raise Unreadable(f"message {seq}: {what} is {type_name(value=value)}, not text.")
    if is_error not in (0, 1):
        raise Unreadable(f"message {seq}: is_error is {is_error!r}, not 0 or 1.")
    return ImportedMessage(
        role=role,
        content=content,
        created_at=parse_timestamp(value=created_at, what=f"message {seq}: created_at"),
        name=name,
        tool_call_id=tool_id,
        tool_calls=openai_tool_calls(raw=tool_calls, seq=seq),
        metadata={"is_error": True} if is_error else {},
    )


def openai_tool_calls(*, raw: Any, seq: int) -> list[dict[str, Any]] | None:
    """sclaw's `[{"id", "name", "arguments": <JSON>}]` in OpenAI's shape, which MemoryHub keeps."""
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise Unreadable(f"message {seq}: tool_calls is {type_name(value=raw)}, not JSON text.")
    try:
        calls = json.loads(raw)
    except json.JSONDecodeError as error:
        raise Unreadable(f"message {seq}: tool_calls is not valid JSON: {error}.") from None
    if calls is None:
        return None
    if not isinstance(calls, list):
        raise Unreadable(f"message {seq}: tool_calls is not a JSON array.")
    converted = []
    for position, call in enumerate(calls):
        if not (
            isinstance(call, dict)
            and isinstance(call.get("id"), str)
            and isinstance(call.get("name"), str)
        ):
            raise Unreadable(
                f"message {seq}: tool call {position} is not an object with a text id and name."
            )
        arguments = call.get("arguments")
        converted.append(
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["name"],
                    # OpenAI carries arguments as JSON text; sclaw as the JSON value itself.
                    "arguments": arguments
                    if isinstance(arguments, str)
                    else json.dumps(
                        {} if arguments is None else arguments,
                        ensure_ascii=False,
                        separators=(",", ":"),
                    ),
                },
            }
        )
    return converted or None


def parse_persistence_key(*, key: str) -> PersistenceKey | None:
    """`channel:chatID:threadID` (thread possibly empty); a chat id may itself hold colons (a
    Matrix room), so the channel ends at the first colon and the thread starts after the last."""
    channel, separator, rest = key.partition(":")
    chat_id, separator_2, thread_id = rest.rpartition(":")
    if not (separator and separator_2 and channel and chat_id):
        return None
    return PersistenceKey(channel=channel, chat_id=chat_id, thread_id=thread_id)


# --- summaries without a session ----------------------------------------------------------------


def summaries_without_messages(
    *, connection: sqlite3.Connection, store: SclawStore, messages_readable: bool
) -> Iterator[Skipped]:
    """A summary is imported with its session's messages; one without them has nothing to
    belong to (sclaw's Purge removes both, so this is a damaged or hand-edited store)."""
    if messages_readable:
        rows = connection.execute(
            "SELECT rowid, session_id FROM summaries AS s WHERE NOT EXISTS "
            "(SELECT 1 FROM messages AS m WHERE m.session_id = s.session_id) ORDER BY rowid"
        )
        reason = "the store has no messages for {key!r}; a summary comes only with its session."
    else:
        rows = connection.execute("SELECT rowid, session_id FROM summaries ORDER BY rowid")
        reason = "the messages table cannot be read; a summary comes only with its session."
    for rowid, key in rows:
        yield Skipped(
            kind="summaries",
            origin=store.origin(table="summaries", rowid=rowid),
            reason=reason.format(key=key),
        )


# --- facts ----------------------------------------------------------------------------------------


def facts_of(*, connection: sqlite3.Connection, store: SclawStore) -> Iterator[Item]:
    columns = select_list(connection=connection, table="facts", columns=FACT_COLUMNS)
    for row in connection.execute(f"SELECT {columns} FROM facts ORDER BY rowid"):  # noqa: S608
        origin = store.origin(table="facts", rowid=row[0])
        try:
            yield fact_from_row(row=row, store=store, origin=origin)
        except Unreadable as error:
            yield skipped(kind="facts", origin=origin, error=error)


SCLAW_EXTERNAL_ID_PREFIX = "sclaw:"


def sclaw_external_id(*, store: SclawStore, fact_id: str) -> str | None:
    """`sclaw:<id>` (`sclaw:<agent>/<id>` for an agent's store: two agents share fact ids), the
    fact's id for the API. One longer than the column holds stays in metadata only."""
    agent = f"{store.agent_id}/" if store.agent_id else ""
    external_id = f"{SCLAW_EXTERNAL_ID_PREFIX}{agent}{fact_id}"
    return external_id if len(external_id) <= FACT_EXTERNAL_ID_MAX_LENGTH else None


def fact_from_row(*, row: tuple[Any, ...], store: SclawStore, origin: Origin) -> ImportedFact:
    _rowid, fact_id, content, source, tags_json, metadata_json, created_at = row
    if not isinstance(fact_id, str) or not fact_id:
        raise Unreadable(f"fact id {fact_id!r} is not a non-empty text.")
    if not isinstance(content, str):
        raise Unreadable(f"fact {fact_id}: content is {type_name(value=content)}, not text.")
    if not isinstance(source, str):
        raise Unreadable(f"fact {fact_id}: source is {type_name(value=source)}, not text.")
    tags = json_column(value=tags_json, what=f"fact {fact_id}: tags", empty=[])
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise Unreadable(f"fact {fact_id}: tags is not a JSON array of texts.")
    metadata = json_column(value=metadata_json, what=f"fact {fact_id}: metadata", empty={})
    if not isinstance(metadata, dict):
        raise Unreadable(f"fact {fact_id}: metadata is not a JSON object.")
    if source:
        metadata.setdefault("sclaw_source", source)
    # sclaw's own id, for whoever looks a fact up by it (its Delete takes it).
    metadata.setdefault("sclaw_fact_id", fact_id)
    persistence_key = parse_persistence_key(key=source) if source else None
    return ImportedFact(
        source_id=store.source_id(kind="fact", identity=fact_id),
        origin=origin,
        content=content,
        user_id=persistence_key.end_user_id if persistence_key is not None else None,
        tags=tags,
        metadata=metadata,
        external_id=sclaw_external_id(store=store, fact_id=fact_id),
        # The sink links it when this (or an earlier) import brought a session of that key.
        source_session_id=store.source_id(kind="session", identity=source) if source else None,
        created_at=parse_timestamp(value=created_at, what=f"fact {fact_id}: created_at"),
    )


# --- values ---------------------------------------------------------------------------------------


def json_column(*, value: Any, what: str, empty: Any) -> Any:
    # Go marshals a nil slice or map as "null": the same as empty.
    if value is None or value in ("", "null"):
        return empty
    if not isinstance(value, str):
        raise Unreadable(f"{what} is {type_name(value=value)}, not JSON text.")
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise Unreadable(f"{what} is not valid JSON: {error}.") from None


def parse_timestamp(*, value: Any, what: str) -> dt.datetime:
    """sclaw's UTC ISO-8601 text; one without an offset is UTC (SQLite's clock is)."""
    if not isinstance(value, str):
        raise Unreadable(f"{what} is {type_name(value=value)}, not an ISO-8601 text.")
    parsed = parse_time(text=value)
    if parsed is None:
        raise Unreadable(f"{what} {value!r} is not an ISO-8601 timestamp.")
    return parsed


def type_name(*, value: Any) -> str:
    """How SQLite would call a value of the wrong type: integer, real, blob, null."""
    if value is None:
        return "null"
    return {bytes: "a blob", int: "an integer", float: "a real"}.get(
        type(value), type(value).__name__
    )
