"""What the API returns, as typed objects: each has `from_json(data)` and keeps the raw JSON in
`raw`, so a field the server adds later is readable before this package knows its name."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")

JSON = dict[str, Any]
Role = Literal["system", "user", "assistant", "tool"]
SearchMode = Literal["hybrid", "lexical", "semantic"]
PlanStatus = Literal["running", "completed", "failed", "cancelled"]


def _dt(value: Any) -> datetime | None:
    # Python 3.11's fromisoformat reads the API's "Z" suffix and its microseconds.
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _date(value: Any) -> date | None:
    return date.fromisoformat(value) if isinstance(value, str) and value else None


def _required_dt(value: Any) -> datetime:
    parsed = _dt(value)
    if parsed is None:
        raise ValueError(f"expected an ISO 8601 date-time, got {value!r}")
    return parsed


@dataclass(frozen=True)
class Session:
    id: str
    user_id: str | None
    agent_id: str
    external_key: str | None
    metadata: JSON
    created_at: datetime
    updated_at: datetime
    last_active_at: datetime
    message_count: int
    token_count: int
    last_seq: int
    plan_count: int = 0
    task_context_count: int = 0
    # POST /sessions/ only: True when this call created the session (201), False when it found
    # the one already holding the external key (200).
    created: bool | None = None
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, created: bool | None = None) -> Session:
        return cls(
            id=data["id"],
            user_id=data.get("user_id"),
            agent_id=data.get("agent_id", ""),
            external_key=data.get("external_key"),
            metadata=data.get("metadata") or {},
            created_at=_required_dt(data["created_at"]),
            updated_at=_required_dt(data["updated_at"]),
            last_active_at=_required_dt(data["last_active_at"]),
            message_count=data.get("message_count", 0),
            token_count=data.get("token_count", 0),
            last_seq=data.get("last_seq", 0),
            plan_count=data.get("plan_count", 0),
            task_context_count=data.get("task_context_count", 0),
            created=created,
            raw=dict(data),
        )


@dataclass(frozen=True)
class Message:
    id: int
    session_id: str
    seq: int
    role: Role
    content: str
    name: str
    tool_call_id: str
    tool_calls: list[JSON] | None
    metadata: JSON
    token_count: int
    created_at: datetime
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Message:
        return cls(
            id=data["id"],
            session_id=data["session_id"],
            seq=data["seq"],
            role=data["role"],
            content=data.get("content") or "",
            name=data.get("name") or "",
            tool_call_id=data.get("tool_call_id") or "",
            tool_calls=data.get("tool_calls") or None,
            metadata=data.get("metadata") or {},
            token_count=data.get("token_count", 0),
            created_at=_required_dt(data["created_at"]),
            raw=dict(data),
        )

    def to_openai(self) -> JSON:
        """The message as OpenAI's chat API takes it: optional keys only when set."""
        out: JSON = {"role": self.role, "content": self.content}
        if self.name:
            out["name"] = self.name
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        return out


@dataclass(frozen=True)
class AppendResult:
    """What an append did. `stored` is False (and `messages` empty) when the agent's memory
    policy has memory off: the server accepted the request and kept nothing (202)."""

    messages: list[Message]
    stored: bool = True
    reason: str | None = None
    replayed: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, replayed: bool = False) -> AppendResult:
        if data.get("stored") is False:
            return cls(messages=[], stored=False, reason=data.get("reason"), replayed=replayed)
        items = data.get("messages", [data])
        return cls(messages=[Message.from_json(item) for item in items], replayed=replayed)


@dataclass(frozen=True)
class MessagePage:
    """Messages in seq order; `has_more` says whether later ones exist past this page."""

    results: list[Message]
    has_more: bool
    last_seq: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MessagePage:
        return cls(
            results=[Message.from_json(item) for item in data["results"]],
            has_more=bool(data.get("has_more")),
            last_seq=data.get("last_seq", 0),
        )


@dataclass(frozen=True)
class StateEntry:
    key: str
    value: Any
    updated_at: datetime | None
    # Set by set_state: the oldest keys the cap pushed out. `stored` is False when memory is off.
    evicted: list[str] = field(default_factory=list)
    stored: bool = True

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StateEntry:
        return cls(
            key=data["key"],
            value=data.get("value"),
            updated_at=_dt(data.get("updated_at")),
            evicted=list(data.get("evicted") or []),
        )


@dataclass(frozen=True)
class StateList:
    results: list[StateEntry]
    count: int
    cap: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StateList:
        return cls(
            results=[StateEntry.from_json(item) for item in data["results"]],
            count=data.get("count", 0),
            cap=data.get("cap", 0),
        )

    def as_dict(self) -> JSON:
        return {entry.key: entry.value for entry in self.results}


@dataclass(frozen=True)
class ContextSection:
    name: str
    tokens: int
    included: list[str]
    # [{"item": "message:12", "reason": "budget"}, …]
    dropped: list[dict[str, str]]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContextSection:
        return cls(
            name=data["name"],
            tokens=data.get("tokens", 0),
            included=list(data.get("included") or []),
            dropped=list(data.get("dropped") or []),
        )


@dataclass(frozen=True)
class Context:
    """The context for a session's next model call: `content` (a `<memory>` block, for
    format="markdown") or `messages` (an OpenAI messages array, for format="messages")."""

    format: Literal["markdown", "messages"]
    content: str | None
    messages: list[JSON] | None
    tokens: int
    max_tokens: int
    memory_enabled: bool
    sections: list[ContextSection]
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Context:
        return cls(
            format=data["format"],
            content=data.get("content"),
            messages=data.get("messages"),
            tokens=data.get("tokens", 0),
            max_tokens=data.get("max_tokens", 0),
            memory_enabled=bool(data.get("memory_enabled", True)),
            sections=[ContextSection.from_json(item) for item in data.get("sections") or []],
            raw=dict(data),
        )

    def section(self, name: str) -> ContextSection | None:
        return next((section for section in self.sections if section.name == name), None)


@dataclass(frozen=True)
class Summary:
    text: str
    through_seq: int
    token_count: int
    model: str
    created_at: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Summary:
        return cls(
            text=data["text"],
            through_seq=data.get("through_seq", 0),
            token_count=data.get("token_count", 0),
            model=data.get("model", ""),
            created_at=_required_dt(data["created_at"]),
        )


@dataclass(frozen=True)
class User:
    """A person the tenant's bots talk to; `counts` (what is kept about them) comes with
    get_user only."""

    user_id: str
    display_name: str
    metadata: JSON
    created_at: datetime
    counts: dict[str, int] | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> User:
        return cls(
            user_id=data["user_id"],
            display_name=data.get("display_name") or "",
            metadata=data.get("metadata") or {},
            created_at=_required_dt(data["created_at"]),
            counts=data.get("counts"),
        )


@dataclass(frozen=True)
class Memory:
    """An explicit memory by key: a person's (`user_id` set) or the tenant's (`user_id` None)."""

    key: str
    user_id: str | None
    content: str
    pinned: bool
    expires_at: datetime | None
    source_session_id: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    created: bool | None = None
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, created: bool | None = None) -> Memory:
        return cls(
            key=data["key"],
            user_id=data.get("user_id"),
            content=data["content"],
            pinned=bool(data.get("pinned")),
            expires_at=_dt(data.get("expires_at")),
            source_session_id=data.get("source_session_id"),
            version=data.get("version", 1),
            created_at=_required_dt(data["created_at"]),
            updated_at=_required_dt(data["updated_at"]),
            created=created,
            raw=dict(data),
        )


@dataclass(frozen=True)
class MemoryVersion:
    version: int
    content: str
    source_session_id: str | None
    created_at: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemoryVersion:
        return cls(
            version=data["version"],
            content=data["content"],
            source_session_id=data.get("source_session_id"),
            created_at=_required_dt(data["created_at"]),
        )


@dataclass(frozen=True)
class MemoryVersions:
    current: Memory
    versions: list[MemoryVersion]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemoryVersions:
        return cls(
            current=Memory.from_json(data["current"]),
            versions=[MemoryVersion.from_json(item) for item in data.get("versions") or []],
        )


@dataclass(frozen=True)
class Fact:
    id: int
    user_id: str | None
    content: str
    tags: list[str]
    metadata: JSON
    source_session_id: str | None
    source_message_ids: list[int]
    created_at: datetime
    updated_at: datetime
    valid_until: datetime | None
    superseded_by: int | None
    # create_fact only: False when the same text already existed for this person (200).
    created: bool | None = None
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, created: bool | None = None) -> Fact:
        return cls(
            id=data["id"],
            user_id=data.get("user_id"),
            content=data["content"],
            tags=list(data.get("tags") or []),
            metadata=data.get("metadata") or {},
            source_session_id=data.get("source_session_id"),
            source_message_ids=list(data.get("source_message_ids") or []),
            created_at=_required_dt(data["created_at"]),
            updated_at=_required_dt(data["updated_at"]),
            valid_until=_dt(data.get("valid_until")),
            superseded_by=data.get("superseded_by"),
            created=created,
            raw=dict(data),
        )


@dataclass(frozen=True)
class SearchHit(Generic[T]):
    """One ranked result: `item` is a Fact (search_facts) or a Message (search_messages)."""

    item: T
    score: float
    lexical_score: float | None
    dense_score: float | None
    signals: dict[str, bool]


@dataclass(frozen=True)
class SearchResults(Generic[T]):
    """The hits, best first, and the `mode` that actually ran (a person without vectors yet
    runs hybrid as lexical)."""

    mode: SearchMode
    hits: list[SearchHit[T]]

    @classmethod
    def parse(
        cls, data: Mapping[str, Any], *, kind: str, item: Callable[[Mapping[str, Any]], T]
    ) -> SearchResults[T]:
        return cls(
            mode=data["mode"],
            hits=[
                SearchHit(
                    item=item(hit[kind]),
                    score=hit["score"],
                    lexical_score=hit.get("lexical_score"),
                    dense_score=hit.get("dense_score"),
                    signals=dict(hit.get("signals") or {}),
                )
                for hit in data["results"]
            ],
        )

    def __iter__(self) -> Iterator[SearchHit[T]]:
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    @property
    def items(self) -> list[T]:
        return [hit.item for hit in self.hits]


@dataclass(frozen=True)
class Note:
    """A note version: the long-term document (`day` None) or a daily note. get_daily_note
    also fills `history` (newest first)."""

    content: str
    version: int
    updated_at: datetime
    day: date | None = None
    history: list[Note] = field(default_factory=list)
    has_more_history: bool = False
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Note:
        return cls(
            content=data["content"],
            version=data.get("version", 0),
            updated_at=_required_dt(data["updated_at"]),
            day=_date(data.get("day")),
            history=[Note.from_json(item) for item in data.get("history") or []],
            has_more_history=bool(data.get("has_more_history")),
            raw=dict(data),
        )


@dataclass(frozen=True)
class NoteRecall:
    long_term: Note | None
    daily: list[Note]
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NoteRecall:
        long_term = data.get("long_term")
        return cls(
            long_term=Note.from_json(long_term) if long_term else None,
            daily=[Note.from_json(item) for item in data.get("daily") or []],
            raw=dict(data),
        )


@dataclass(frozen=True)
class Plan:
    plan_id: str
    user_id: str
    session_id: str | None
    goal_event: str
    goal_data: JSON
    status: PlanStatus
    state: JSON
    # Pass it back as `if_match=` so a write cannot undo a change made since this read.
    etag: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        return cls(
            plan_id=data["plan_id"],
            user_id=data["user_id"],
            session_id=data.get("session_id"),
            goal_event=data["goal_event"],
            goal_data=data.get("goal_data") or {},
            status=data["status"],
            state=data.get("state") or {},
            etag=data["etag"],
            created_at=_required_dt(data["created_at"]),
            updated_at=_required_dt(data["updated_at"]),
        )


@dataclass(frozen=True)
class TaskContext:
    task_id: str
    plan_id: str | None
    session_id: str | None
    event_type: str
    response_event: str
    response_topic: str
    data: JSON
    sub_tasks: list[str]
    state: JSON
    etag: str
    created_at: datetime
    updated_at: datetime
    # update_task_context only: what this request changed. `removed_sub_tasks` non-empty with
    # `sub_tasks` empty means this request removed the last sub-task.
    added_sub_tasks: list[str] = field(default_factory=list)
    removed_sub_tasks: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskContext:
        return cls(
            task_id=data["task_id"],
            plan_id=data.get("plan_id"),
            session_id=data.get("session_id"),
            event_type=data["event_type"],
            response_event=data.get("response_event", ""),
            response_topic=data.get("response_topic", ""),
            data=data.get("data") or {},
            sub_tasks=list(data.get("sub_tasks") or []),
            state=data.get("state") or {},
            etag=data["etag"],
            created_at=_required_dt(data["created_at"]),
            updated_at=_required_dt(data["updated_at"]),
            added_sub_tasks=list(data.get("added_sub_tasks") or []),
            removed_sub_tasks=list(data.get("removed_sub_tasks") or []),
        )


@dataclass(frozen=True)
class PurgeResult:
    scope: str
    dry_run: bool
    counts: dict[str, int]
    total: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PurgeResult:
        return cls(
            scope=data["scope"],
            dry_run=bool(data["dry_run"]),
            counts=dict(data.get("counts") or {}),
            total=data.get("total", 0),
        )


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a cursor-paginated list. Pass `next_cursor` as `cursor=` for the next one,
    or use the matching `iter_…` method, which follows the cursors for you."""

    results: list[T]
    next_cursor: str | None
    previous_cursor: str | None

    def __iter__(self) -> Iterator[T]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)
