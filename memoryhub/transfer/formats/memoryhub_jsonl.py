"""Reads MemoryHub's own export (memoryhub.transfer.export): a .jsonl or .jsonl.gz file, or the
.json document `GET /users/{id}/export/` returns (the same records under "records").

Ids: sessions, memories, facts and notes get new ids in the importing tenant. The export's ids
are the source ids (so importing the same file again adds nothing), and references between
records (a fact's source session, the fact that superseded it, a memory's source session) are
followed to the new ids. Message seqs, timestamps, versions and token counts are kept as they are.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from memoryhub.transfer.export import EXPORT_FORMAT, EXPORT_SCHEMA_VERSION
from memoryhub.transfer.formats.base import Unreadable, required_time, skipped
from memoryhub.transfer.sink import RecordRejected
from memoryhub.transfer.types import (
    ImportedEndUser,
    ImportedFact,
    ImportedMemory,
    ImportedMemoryVersion,
    ImportedMessage,
    ImportedNote,
    ImportedNoteVersion,
    ImportedPlan,
    ImportedPolicy,
    ImportedSession,
    ImportedStateEntry,
    ImportedSummary,
    ImportedTaskContext,
    Item,
    Origin,
    Skipped,
)

_SESSION_CHILDREN = ("state", "summary")


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def _time(value: Any, *, field: str) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise Unreadable(f"{field} is not a timestamp string.")
    return required_time(text=value, what=field)


def _date(value: Any, *, field: str) -> dt.date | None:
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise Unreadable(f"{field} {value!r} is not a date.") from None


def _get(
    record: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = ...
) -> Any:
    if name not in record or record[name] is None:
        if default is ...:
            raise Unreadable(f"{name} is missing.")
        return default
    value = record[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise Unreadable(f"{name} has the wrong type ({type(value).__name__}).")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


class _Lines:
    """(origin, record) pairs with one of look-ahead; a line that is not a JSON object comes
    back as (origin, Unreadable)."""

    def __init__(self, path: Path, lines: Iterator[str]) -> None:
        self._path = str(path)
        self._lines = enumerate(lines, start=1)
        self._peeked: tuple[Origin, dict[str, Any] | Unreadable] | None = None

    def _read(self) -> tuple[Origin, dict[str, Any] | Unreadable] | None:
        for number, line in self._lines:
            if not line.strip():
                continue
            origin = Origin(self._path, number)
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                return origin, Unreadable(f"not JSON ({error.msg} at column {error.colno}).")
            if not isinstance(record, dict) or not isinstance(record.get("type"), str):
                return origin, Unreadable("not a record: a JSON object with a 'type' is expected.")
            return origin, record
        return None

    def peek(self) -> tuple[Origin, dict[str, Any] | Unreadable] | None:
        if self._peeked is None:
            self._peeked = self._read()
        return self._peeked

    def next(self) -> tuple[Origin, dict[str, Any] | Unreadable] | None:
        found = self.peek()
        self._peeked = None
        return found

    def next_if_child_of(
        self, session_id: str, types: tuple[str, ...]
    ) -> tuple[Origin, dict[str, Any] | Unreadable] | None:
        """The next line if it belongs to this session and is of `types` (a broken line between
        a session's records is taken as the session's: it cannot say otherwise)."""
        found = self.peek()
        if found is None:
            return None
        _, record = found
        if isinstance(record, Unreadable) or (
            record["type"] in types and record.get("session_id") == session_id
        ):
            return self.next()
        return None


def read(path: Path) -> Iterator[Item]:
    if path.suffix == ".json":
        yield from _read_document(path)
        return
    with _open(path) as handle:
        yield from _read_lines(_Lines(path, iter(handle)))


def _read_document(path: Path) -> Iterator[Item]:
    """An API export: the header's fields and "records" in one JSON document (one person's
    memory, small enough to read whole)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        yield Skipped(kind="file", origin=Origin(str(path)), reason=f"not a JSON document: {error}")
        return
    if not isinstance(document, dict) or not isinstance(document.get("records"), list):
        yield Skipped(kind="file", origin=Origin(str(path)), reason="no 'records' list.")
        return
    header = {key: value for key, value in document.items() if key != "records"}
    lines = [json.dumps({**header, "type": "header"})] + [
        json.dumps(record) for record in document["records"]
    ]
    yield from _read_lines(_Lines(path, iter(lines)))


def _read_lines(lines: _Lines) -> Iterator[Item]:
    first = lines.next()
    if first is None:
        return
    origin, header = first
    problem = _header_problem(header)
    if problem:
        yield Skipped(kind="file", origin=origin, reason=problem)
        return
    while (found := lines.next()) is not None:
        origin, record = found
        if isinstance(record, Unreadable):
            yield skipped(kind="records", origin=origin, error=record)
            continue
        kind = record["type"]
        try:
            if kind == "session":
                yield from _session(record, origin=origin, lines=lines)
            elif kind == "memory_policy":
                yield _policy(record, origin=origin)
            elif kind == "end_user":
                yield _end_user(record, origin=origin)
            elif kind == "memory":
                yield _memory(record, origin=origin)
            elif kind == "fact":
                yield _fact(record, origin=origin)
            elif kind == "note":
                yield _note(record, origin=origin)
            elif kind == "plan":
                yield _plan(record, origin=origin)
            elif kind == "task_context":
                yield _task_context(record, origin=origin)
            elif kind in (*_SESSION_CHILDREN, "message"):
                yield Skipped(
                    kind=f"{kind}s",
                    origin=origin,
                    reason="not right after its session's record; the export keeps them together.",
                )
            else:
                yield Skipped(
                    kind="records", origin=origin, reason=f"unknown record type {kind!r}."
                )
        except Unreadable as error:
            yield skipped(kind=_KINDS.get(kind, "records"), origin=origin, error=error)


_KINDS = {
    "session": "sessions",
    "memory_policy": "memory_policies",
    "end_user": "end_users",
    "memory": "user_memories",
    "fact": "facts",
    "note": "notes",
    "plan": "plans",
    "task_context": "task_contexts",
}


def _header_problem(header: dict[str, Any] | Unreadable) -> str | None:
    if isinstance(header, Unreadable):
        return f"the first line must be the export's header: {header}"
    if header.get("type") != "header" or header.get("format") != EXPORT_FORMAT:
        return f"the first line must be a {EXPORT_FORMAT} header record."
    version = header.get("schema_version")
    if not isinstance(version, int) or not 1 <= version <= EXPORT_SCHEMA_VERSION:
        supported = f"1-{EXPORT_SCHEMA_VERSION}"
        return f"schema_version {version!r} is not one this MemoryHub reads ({supported})."
    return None


def _session(record: dict[str, Any], *, origin: Origin, lines: _Lines) -> Iterator[Item]:
    session_id = _get(record, "id", str)
    try:
        yield _session_item(record, session_id=session_id, origin=origin, lines=lines)
    finally:
        # Whatever the sink took, the rest of the session's records are its own: a rejected
        # session is reported once, not once per message.
        while lines.next_if_child_of(session_id, (*_SESSION_CHILDREN, "message")) is not None:
            pass


def _session_item(
    record: dict[str, Any], *, session_id: str, origin: Origin, lines: _Lines
) -> ImportedSession:
    state: list[ImportedStateEntry] = []
    summaries: list[ImportedSummary] = []
    problems: list[str] = []
    while (child := lines.next_if_child_of(session_id, _SESSION_CHILDREN)) is not None:
        child_origin, child_record = child
        try:
            if isinstance(child_record, Unreadable):
                raise child_record
            if child_record["type"] == "state":
                state.append(
                    ImportedStateEntry(
                        key=_get(child_record, "key", str),
                        value=child_record.get("value"),
                        updated_at=_time(child_record.get("updated_at"), field="updated_at"),
                    )
                )
            else:
                summaries.append(
                    ImportedSummary(
                        text=_get(child_record, "text", str),
                        through_seq=_get(child_record, "through_seq", int),
                        model=_get(child_record, "model", str, "imported"),
                        created_at=_time(child_record.get("created_at"), field="created_at"),
                    )
                )
        except Unreadable as error:
            problems.append(f"line {child_origin.line}: {error}")

    def messages() -> Iterator[ImportedMessage]:
        if problems:
            raise RecordRejected(problems[0])
        while (line := lines.next_if_child_of(session_id, ("message",))) is not None:
            message_origin, message = line
            try:
                if isinstance(message, Unreadable):
                    raise message
                yield _message(message)
            except Unreadable as error:
                raise RecordRejected(f"line {message_origin.line}: {error}") from None

    return ImportedSession(
        source_id=session_id,
        origin=origin,
        user_id=_get(record, "user_id", str, None),
        agent_id=_get(record, "agent_id", str, ""),
        external_key=_get(record, "external_key", str, None),
        metadata=_get(record, "metadata", dict, {}),
        created_at=_time(record.get("created_at"), field="created_at"),
        last_active_at=_time(record.get("last_active_at"), field="last_active_at"),
        pinned=_get(record, "pinned", bool, False),
        state=state,
        state_cap=_get(record, "state_cap", int, None),
        summaries=summaries,
        messages=messages(),
        exported_id=session_id,
    )


def _message(message: dict[str, Any]) -> ImportedMessage:
    """A message record as the sink takes it. Most of an import's records are messages: the
    usual shape (every field of its type or absent) is checked in one expression, and anything
    else goes the field-by-field way of the other records, which names what is wrong."""
    get = message.get
    role, content, name = get("role"), get("content"), get("name")
    tool_call_id, tool_calls, metadata = get("tool_call_id"), get("tool_calls"), get("metadata")
    seq, token_count, created_at = get("seq"), get("token_count"), get("created_at")
    if (
        type(role) is str
        and (content is None or type(content) is str)
        and (name is None or type(name) is str)
        and (tool_call_id is None or type(tool_call_id) is str)
        and (tool_calls is None or type(tool_calls) is list)
        and (metadata is None or type(metadata) is dict)
        and type(seq) is int
        and (token_count is None or type(token_count) is int)
        and (created_at is None or type(created_at) is str)
    ):
        return ImportedMessage(
            role=role,
            content="" if content is None else content,
            created_at=None
            if created_at is None
            else required_time(text=created_at, what="created_at"),
            name="" if name is None else name,
            tool_call_id="" if tool_call_id is None else tool_call_id,
            tool_calls=tool_calls,
            metadata={} if metadata is None else metadata,
            seq=seq,
            token_count=token_count,
        )
    return ImportedMessage(
        role=_get(message, "role", str),
        content=_get(message, "content", str, ""),
        created_at=_time(message.get("created_at"), field="created_at"),
        name=_get(message, "name", str, ""),
        tool_call_id=_get(message, "tool_call_id", str, ""),
        tool_calls=_get(message, "tool_calls", list, None),
        metadata=_get(message, "metadata", dict, {}),
        seq=_get(message, "seq", int),
        token_count=_get(message, "token_count", int, None),
    )


def _policy(record: dict[str, Any], *, origin: Origin) -> ImportedPolicy:
    agent_id = _get(record, "agent_id", str, "")
    values = {key: value for key, value in record.items() if key not in ("type", "agent_id")}
    return ImportedPolicy(
        source_id=f"policy:{agent_id}", origin=origin, agent_id=agent_id, values=values
    )


def _end_user(record: dict[str, Any], *, origin: Origin) -> ImportedEndUser:
    user_id = _get(record, "user_id", str)
    return ImportedEndUser(
        source_id=f"end_user:{user_id}",
        origin=origin,
        user_id=user_id,
        display_name=_get(record, "display_name", str, ""),
        metadata=_get(record, "metadata", dict, {}),
        created_at=_time(record.get("created_at"), field="created_at"),
    )


def _memory(record: dict[str, Any], *, origin: Origin) -> ImportedMemory:
    versions = []
    for version in _get(record, "versions", list, []):
        if not isinstance(version, dict):
            raise Unreadable("a memory version is not an object.")
        versions.append(
            ImportedMemoryVersion(
                version=_get(version, "version", int),
                content=_get(version, "content", str),
                created_at=_time(version.get("created_at"), field="versions.created_at"),
            )
        )
    return ImportedMemory(
        source_id=f"memory:{_get(record, 'id', (int, str))}",
        origin=origin,
        key=_get(record, "key", str),
        content=_get(record, "content", str),
        user_id=_get(record, "user_id", str, None),
        pinned=_get(record, "pinned", bool, False),
        expires_at=_time(record.get("expires_at"), field="expires_at"),
        created_at=_time(record.get("created_at"), field="created_at"),
        updated_at=_time(record.get("updated_at"), field="updated_at"),
        version=_get(record, "version", int, 1),
        source_session_id=_get(record, "source_session_id", str, None),
        versions=versions,
    )


def _fact(record: dict[str, Any], *, origin: Origin) -> ImportedFact:
    superseded_by = record.get("superseded_by")
    seqs = _get(record, "source_message_seqs", list, [])
    if not all(isinstance(seq, int) and not isinstance(seq, bool) for seq in seqs):
        raise Unreadable("source_message_seqs must be integers.")
    tags = _get(record, "tags", list, [])
    if not all(isinstance(tag, str) for tag in tags):
        raise Unreadable("tags must be strings.")
    metadata = _get(record, "metadata", dict, {})
    # Exports from before the column kept the id in metadata only.
    in_metadata = metadata.get("external_id")
    external_id = _get(record, "external_id", str, None) or (
        in_metadata if isinstance(in_metadata, str) and in_metadata else None
    )
    if isinstance(in_metadata, str) and in_metadata and in_metadata != external_id:
        raise Unreadable("external_id differs from metadata.external_id.")
    return ImportedFact(
        source_id=f"fact:{_get(record, 'id', (int, str))}",
        external_id=external_id,
        origin=origin,
        content=_get(record, "content", str),
        user_id=_get(record, "user_id", str, None),
        tags=tags,
        metadata=metadata,
        source_session_id=_get(record, "source_session_id", str, None),
        source_message_seqs=seqs,
        created_at=_time(record.get("created_at"), field="created_at"),
        valid_until=_time(record.get("valid_until"), field="valid_until"),
        superseded_by_source_id=f"fact:{superseded_by}" if superseded_by is not None else None,
    )


def _note(record: dict[str, Any], *, origin: Origin) -> ImportedNote:
    user_id = _get(record, "user_id", str)
    kind = _get(record, "kind", str)
    if kind not in ("long_term", "daily"):
        raise Unreadable(f"kind {kind!r} is neither 'long_term' nor 'daily'.")
    day = _date(record.get("day"), field="day") if kind == "daily" else None
    if kind == "daily" and day is None:
        raise Unreadable("a daily note needs its day.")
    versions = []
    for version in _get(record, "versions", list):
        if not isinstance(version, dict):
            raise Unreadable("a note version is not an object.")
        versions.append(
            ImportedNoteVersion(
                content=_get(version, "content", str, ""),
                created_at=_time(version.get("created_at"), field="versions.created_at"),
            )
        )
    return ImportedNote(
        source_id=f"note:{user_id}:{kind}:{day}",
        origin=origin,
        user_id=user_id,
        day=day,
        versions=versions,
    )


def _plan(record: dict[str, Any], *, origin: Origin) -> ImportedPlan:
    plan_id = _get(record, "plan_id", str)
    return ImportedPlan(
        source_id=f"plan:{plan_id}",
        origin=origin,
        plan_id=plan_id,
        user_id=_get(record, "user_id", str),
        goal_event=_get(record, "goal_event", str),
        session_source_id=_get(record, "session_id", str, None),
        goal_data=_get(record, "goal_data", dict, {}),
        status=_get(record, "status", str, "running"),
        state=_get(record, "state", dict, {}),
        created_at=_time(record.get("created_at"), field="created_at"),
        updated_at=_time(record.get("updated_at"), field="updated_at"),
    )


def _task_context(record: dict[str, Any], *, origin: Origin) -> ImportedTaskContext:
    task_id = _get(record, "task_id", str)
    sub_tasks = _get(record, "sub_tasks", list, [])
    if not all(isinstance(sub, str) for sub in sub_tasks):
        raise Unreadable("sub_tasks must be strings.")
    return ImportedTaskContext(
        source_id=f"task:{task_id}",
        origin=origin,
        task_id=task_id,
        event_type=_get(record, "event_type", str),
        plan_id=_get(record, "plan_id", str, None),
        session_source_id=_get(record, "session_id", str, None),
        response_event=_get(record, "response_event", str, ""),
        response_topic=_get(record, "response_topic", str, "action-results"),
        data=_get(record, "data", dict, {}),
        state=_get(record, "state", dict, {}),
        sub_tasks=sub_tasks,
        created_at=_time(record.get("created_at"), field="created_at"),
        updated_at=_time(record.get("updated_at"), field="updated_at"),
    )
