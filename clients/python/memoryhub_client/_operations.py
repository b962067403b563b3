"""Every MemoryHub API call, written once as a `Call` builder (no I/O). `MemoryHub` and
`AsyncMemoryHub` expose each builder under the same name, sync or async.

Writes the server makes idempotent (session create, message appends, plan and task-context
create, daily notes) get an `Idempotency-Key` generated here, so their retries are safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Literal, TypeVar

from memoryhub_client._base import (
    NOT_GIVEN,
    Answer,
    Call,
    NotGiven,
    body,
    body_without_none,
    cursor_of,
    json_value,
    new_idempotency_key,
    params_of,
    segment,
)
from memoryhub_client.types import (
    JSON,
    AppendResult,
    Context,
    Fact,
    Memory,
    MemoryVersions,
    Message,
    MessagePage,
    Note,
    NoteRecall,
    Page,
    Plan,
    PlanStatus,
    PurgeResult,
    Role,
    SearchMode,
    SearchResults,
    Session,
    StateEntry,
    StateList,
    Summary,
    TaskContext,
    User,
)

T = TypeVar("T")

MessageInput = Mapping[str, Any]
When = datetime | str


def _parse(read: Callable[[Any], T]) -> Callable[[Answer], T]:
    return lambda answer: read(answer.body)


def _nothing(answer: Answer) -> None:
    return None


def _page(read: Callable[[Any], T]) -> Callable[[Answer], Page[T]]:
    def parse(answer: Answer) -> Page[T]:
        data = answer.body
        return Page(
            results=[read(item) for item in data["results"]],
            next_cursor=cursor_of(data.get("next")),
            previous_cursor=cursor_of(data.get("previous")),
        )

    return parse


def _if_match(etag: str | None) -> tuple[tuple[str, str], ...]:
    return (("If-Match", etag),) if etag else ()


def _message_json(message: MessageInput) -> JSON:
    allowed = ("role", "content", "name", "tool_call_id", "tool_calls", "metadata", "created_at")
    unknown = set(message) - set(allowed)
    if unknown:
        raise ValueError(f"unknown message fields: {sorted(unknown)}")
    return {key: json_value(message[key]) for key in allowed if message.get(key) is not None}


# --- sessions ------------------------------------------------------------------------------------


def create_session(
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    external_key: str | None = None,
    metadata: JSON | None = None,
    idempotency_key: str | None = None,
) -> Call[Session]:
    """Create a session, or get the one already holding `external_key` (`.created` says which).
    A key held by another person's session is a ConflictError."""
    return Call(
        "POST",
        "sessions/",
        lambda answer: Session.from_json(answer.body, created=answer.status == 201),
        json=body_without_none(
            user_id=user_id, agent_id=agent_id, external_key=external_key, metadata=metadata
        ),
        idempotency_key=idempotency_key or new_idempotency_key(),
    )


def get_session(session_id: str) -> Call[Session]:
    return Call("GET", f"sessions/{segment(session_id)}/", _parse(Session.from_json))


def list_sessions(
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    active_since: When | None = None,
    active_before: When | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[Session]]:
    """One page of sessions, newest activity first."""
    return Call(
        "GET",
        "sessions/",
        _page(Session.from_json),
        params=params_of(
            user_id=user_id,
            agent_id=agent_id,
            active_since=active_since,
            active_before=active_before,
            limit=limit,
            cursor=cursor,
        ),
    )


def update_session(
    session_id: str,
    *,
    agent_id: str | NotGiven = NOT_GIVEN,
    external_key: str | NotGiven | None = NOT_GIVEN,
    metadata: JSON | NotGiven = NOT_GIVEN,
) -> Call[Session]:
    """Change what is given; `external_key=None` clears it; `metadata` is replaced whole."""
    return Call(
        "PATCH",
        f"sessions/{segment(session_id)}/",
        _parse(Session.from_json),
        json=body(agent_id=agent_id, external_key=external_key, metadata=metadata),
    )


def delete_session(session_id: str) -> Call[None]:
    """Delete a session with its messages, state and summaries."""
    return Call("DELETE", f"sessions/{segment(session_id)}/", _nothing)


# --- messages ------------------------------------------------------------------------------------


def _append(session_id: str, payload: JSON, idempotency_key: str | None) -> Call[AppendResult]:
    return Call(
        "POST",
        f"sessions/{segment(session_id)}/messages/",
        lambda answer: AppendResult.from_json(answer.body, replayed=answer.replayed),
        json=payload,
        idempotency_key=idempotency_key or new_idempotency_key(),
    )


def append_message(
    session_id: str,
    *,
    role: Role,
    content: str | None,
    name: str | None = None,
    tool_call_id: str | None = None,
    tool_calls: list[JSON] | None = None,
    metadata: JSON | None = None,
    created_at: When | None = None,
    idempotency_key: str | None = None,
) -> Call[AppendResult]:
    """Append one message. An Idempotency-Key is generated (or pass your own, e.g. the chat
    platform's message id), so a retry never stores it twice."""
    message = _message_json(
        {
            "role": role,
            "content": content,
            "name": name,
            "tool_call_id": tool_call_id,
            "tool_calls": tool_calls,
            "metadata": metadata,
            "created_at": created_at,
        }
    )
    if content is None:
        # An assistant turn that only calls tools: the API takes a null content.
        message["content"] = None
    return _append(session_id, message, idempotency_key)


def append_messages(
    session_id: str,
    messages: Sequence[MessageInput],
    *,
    idempotency_key: str | None = None,
) -> Call[AppendResult]:
    """Append a batch (at most 100, all or nothing) of OpenAI-style message dicts: `role`,
    `content` and optionally `name`, `tool_call_id`, `tool_calls`, `metadata`, `created_at`."""
    if not messages:
        raise ValueError("messages is empty")
    return _append(
        session_id,
        {"messages": [_message_json(message) for message in messages]},
        idempotency_key,
    )


def list_messages(
    session_id: str,
    *,
    last: int | None = None,
    after_seq: int | None = None,
    limit: int | None = None,
) -> Call[MessagePage]:
    """The last `last` messages, or those after `after_seq` (at most `limit`), in seq order."""
    return Call(
        "GET",
        f"sessions/{segment(session_id)}/messages/",
        _parse(MessagePage.from_json),
        params=params_of(last=last, after_seq=after_seq, limit=limit),
    )


# --- state ---------------------------------------------------------------------------------------


def list_state(session_id: str) -> Call[StateList]:
    return Call("GET", f"sessions/{segment(session_id)}/state/", _parse(StateList.from_json))


def get_state(session_id: str, key: str) -> Call[StateEntry]:
    return Call(
        "GET",
        f"sessions/{segment(session_id)}/state/{segment(key)}/",
        _parse(StateEntry.from_json),
    )


def set_state(session_id: str, key: str, value: Any) -> Call[StateEntry]:
    """Set a key to any JSON value; `.evicted` lists the oldest keys the cap pushed out."""

    def parse(answer: Answer) -> StateEntry:
        if answer.status == 202:
            return StateEntry(key=key, value=value, updated_at=None, stored=False)
        return StateEntry.from_json(answer.body)

    return Call(
        "PUT",
        f"sessions/{segment(session_id)}/state/{segment(key)}/",
        parse,
        json={"value": value},
    )


def delete_state(session_id: str, key: str) -> Call[None]:
    return Call("DELETE", f"sessions/{segment(session_id)}/state/{segment(key)}/", _nothing)


# --- context and summary -------------------------------------------------------------------------


def get_context(
    session_id: str,
    *,
    max_tokens: int | None = None,
    max_messages: int | None = None,
    max_memories: int | None = None,
    query: str | None = None,
    format: Literal["markdown", "messages"] = "markdown",
) -> Call[Context]:
    """What to put in front of the model for this session, within `max_tokens`: a `<memory>`
    block (format="markdown") or an OpenAI messages array (format="messages"). `sections` says
    what each part included and dropped."""
    return Call(
        "GET",
        f"sessions/{segment(session_id)}/context/",
        _parse(Context.from_json),
        params=params_of(
            max_tokens=max_tokens,
            max_messages=max_messages,
            max_memories=max_memories,
            query=query,
            format=format,
        ),
    )


def context_messages(
    session_id: str,
    *,
    system: str | None = None,
    user_message: str | None = None,
    max_tokens: int | None = None,
    max_messages: int | None = None,
    max_memories: int | None = None,
    query: str | None = None,
) -> Call[list[JSON]]:
    """An OpenAI `messages` list ready to send: your `system` prompt first, then the session's
    memory block and recent messages, then `user_message` (the turn not stored yet, which also
    picks the relevant facts unless `query` is given)."""
    context = get_context(
        session_id,
        max_tokens=max_tokens,
        max_messages=max_messages,
        max_memories=max_memories,
        query=query if query is not None else user_message,
        format="messages",
    )

    def parse(answer: Answer) -> list[JSON]:
        messages: list[JSON] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.extend(Context.from_json(answer.body).messages or [])
        if user_message is not None:
            messages.append({"role": "user", "content": user_message})
        return messages

    return Call(context.method, context.path, parse, params=context.params)


def get_summary(session_id: str) -> Call[Summary]:
    """The current summary (NotFoundError when there is none yet)."""
    return Call("GET", f"sessions/{segment(session_id)}/summary/", _parse(Summary.from_json))


def set_summary(session_id: str, text: str) -> Call[Summary]:
    return Call(
        "PUT",
        f"sessions/{segment(session_id)}/summary/",
        _parse(Summary.from_json),
        json={"text": text},
    )


def request_summary(session_id: str) -> Call[str]:
    """Ask the worker to summarize now; returns the task id (the summary comes later)."""
    return Call(
        "POST",
        f"sessions/{segment(session_id)}/summarize/",
        lambda answer: str(answer.body["task_id"]),
    )


# --- people --------------------------------------------------------------------------------------


def list_users(*, limit: int | None = None, cursor: str | None = None) -> Call[Page[User]]:
    return Call(
        "GET", "users/", _page(User.from_json), params=params_of(limit=limit, cursor=cursor)
    )


def get_user(user_id: str) -> Call[User]:
    return Call("GET", f"users/{segment(user_id)}/", _parse(User.from_json))


def export_user(user_id: str) -> Call[JSON]:
    """Everything kept about a person, as one versioned JSON document."""
    return Call("GET", f"users/{segment(user_id)}/export/", lambda answer: dict(answer.body))


def erase_user(user_id: str) -> Call[dict[str, int]]:
    """Erase a person and everything kept about them (needs the `purge` scope); returns the
    counts per kind."""
    return Call(
        "DELETE",
        f"users/{segment(user_id)}/",
        lambda answer: dict((answer.body or {}).get("erased") or {}),
    )


# --- memories ------------------------------------------------------------------------------------


def _memories_path(user_id: str | None) -> str:
    return "memories/" if user_id is None else f"users/{segment(user_id)}/memories/"


def _list_memories(user_id: str | None) -> Call[list[Memory]]:
    return Call(
        "GET",
        _memories_path(user_id),
        lambda answer: [Memory.from_json(item) for item in answer.body["results"]],
    )


def _get_memory(user_id: str | None, key: str) -> Call[Memory]:
    return Call("GET", f"{_memories_path(user_id)}{segment(key)}/", _parse(Memory.from_json))


def _put_memory(
    user_id: str | None,
    key: str,
    content: str,
    pinned: bool | None,
    expires_at: When | None,
    source_session_id: str | None,
) -> Call[Memory]:
    return Call(
        "PUT",
        f"{_memories_path(user_id)}{segment(key)}/",
        lambda answer: Memory.from_json(answer.body, created=answer.status == 201),
        json=body_without_none(
            content=content,
            pinned=pinned,
            expires_at=expires_at,
            source_session_id=source_session_id,
        ),
    )


def _delete_memory(user_id: str | None, key: str) -> Call[None]:
    return Call("DELETE", f"{_memories_path(user_id)}{segment(key)}/", _nothing)


def _memory_versions(user_id: str | None, key: str) -> Call[MemoryVersions]:
    return Call(
        "GET",
        f"{_memories_path(user_id)}{segment(key)}/versions/",
        _parse(MemoryVersions.from_json),
    )


def list_memories(user_id: str) -> Call[list[Memory]]:
    """A person's explicit memories."""
    return _list_memories(user_id)


def get_memory(user_id: str, key: str) -> Call[Memory]:
    return _get_memory(user_id, key)


def put_memory(
    user_id: str,
    key: str,
    *,
    content: str,
    pinned: bool | None = None,
    expires_at: When | None = None,
    source_session_id: str | None = None,
) -> Call[Memory]:
    """Create or replace a person's memory by key (`^[a-z][a-z0-9_]*$`); a changed text keeps
    the old one as a version."""
    return _put_memory(user_id, key, content, pinned, expires_at, source_session_id)


def delete_memory(user_id: str, key: str) -> Call[None]:
    return _delete_memory(user_id, key)


def memory_versions(user_id: str, key: str) -> Call[MemoryVersions]:
    return _memory_versions(user_id, key)


def list_tenant_memories() -> Call[list[Memory]]:
    """The tenant-wide memories every person's context sees."""
    return _list_memories(None)


def get_tenant_memory(key: str) -> Call[Memory]:
    return _get_memory(None, key)


def put_tenant_memory(
    key: str,
    *,
    content: str,
    pinned: bool | None = None,
    expires_at: When | None = None,
    source_session_id: str | None = None,
) -> Call[Memory]:
    """Create or replace a tenant-wide memory (needs the `global-memory` scope)."""
    return _put_memory(None, key, content, pinned, expires_at, source_session_id)


def delete_tenant_memory(key: str) -> Call[None]:
    return _delete_memory(None, key)


def tenant_memory_versions(key: str) -> Call[MemoryVersions]:
    return _memory_versions(None, key)


# --- facts ---------------------------------------------------------------------------------------


def create_fact(
    content: str,
    *,
    user_id: str | None = None,
    tags: list[str] | None = None,
    metadata: JSON | None = None,
    source_session_id: str | None = None,
    source_message_ids: list[int] | None = None,
    valid_until: When | None = None,
    supersedes: int | None = None,
) -> Call[Fact]:
    """Store a fact; the same normalised text for the same person returns the existing one
    (`.created` False). `supersedes=<id>` replaces an older fact without deleting it. A fact
    without `user_id` is tenant-wide (needs the `global-memory` scope)."""
    return Call(
        "POST",
        "facts/",
        lambda answer: Fact.from_json(answer.body, created=answer.status == 201),
        json=body_without_none(
            content=content,
            user_id=user_id,
            tags=tags,
            metadata=metadata,
            source_session_id=source_session_id,
            source_message_ids=source_message_ids,
            valid_until=valid_until,
            supersedes=supersedes,
        ),
    )


def list_facts(
    *,
    user_id: str | None = None,
    tag: str | Iterable[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    created_after: When | None = None,
    created_before: When | None = None,
    valid_at: When | None = None,
    include_superseded: bool | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[Fact]]:
    return Call(
        "GET",
        "facts/",
        _page(Fact.from_json),
        params=params_of(
            user_id=user_id,
            tag=[tag] if isinstance(tag, str) else list(tag) if tag is not None else None,
            metadata=metadata,
            created_after=created_after,
            created_before=created_before,
            valid_at=valid_at,
            include_superseded=include_superseded,
            limit=limit,
            cursor=cursor,
        ),
    )


def get_fact(fact_id: int) -> Call[Fact]:
    return Call("GET", f"facts/{segment(fact_id)}/", _parse(Fact.from_json))


def update_fact(
    fact_id: int,
    *,
    content: str | NotGiven = NOT_GIVEN,
    tags: list[str] | NotGiven = NOT_GIVEN,
    metadata: JSON | NotGiven = NOT_GIVEN,
    valid_until: When | NotGiven | None = NOT_GIVEN,
) -> Call[Fact]:
    return Call(
        "PATCH",
        f"facts/{segment(fact_id)}/",
        _parse(Fact.from_json),
        json=body(content=content, tags=tags, metadata=metadata, valid_until=valid_until),
    )


def delete_fact(fact_id: int) -> Call[None]:
    return Call("DELETE", f"facts/{segment(fact_id)}/", _nothing)


def search_facts(
    q: str,
    *,
    user_id: str | None = None,
    mode: SearchMode | None = None,
    tag: str | Iterable[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    created_after: When | None = None,
    created_before: When | None = None,
    valid_at: When | None = None,
    include_superseded: bool | None = None,
    top_k: int | None = None,
) -> Call[SearchResults[Fact]]:
    """Ranked search in natural language ("does the user like dark mode?")."""
    return Call(
        "GET",
        "facts/search/",
        lambda answer: SearchResults.parse(answer.body, kind="fact", item=Fact.from_json),
        params=params_of(
            q=q,
            user_id=user_id,
            mode=mode,
            tag=[tag] if isinstance(tag, str) else list(tag) if tag is not None else None,
            metadata=metadata,
            created_after=created_after,
            created_before=created_before,
            valid_at=valid_at,
            include_superseded=include_superseded,
            top_k=top_k,
        ),
    )


def search_messages(
    q: str,
    *,
    user_id: str | None = None,
    session_id: str | None = None,
    mode: SearchMode | None = None,
    role: Role | None = None,
    speaker: str | None = None,
    since: When | None = None,
    until: When | None = None,
    top_k: int | None = None,
) -> Call[SearchResults[Message]]:
    """ "When did we talk about X": search a person's past messages; each hit's `item` is the
    Message (with its session_id and seq)."""
    return Call(
        "GET",
        "messages/search/",
        lambda answer: SearchResults.parse(answer.body, kind="message", item=Message.from_json),
        params=params_of(
            q=q,
            user_id=user_id,
            session_id=session_id,
            mode=mode,
            role=role,
            speaker=speaker,
            since=since,
            until=until,
            top_k=top_k,
        ),
    )


# --- notes ---------------------------------------------------------------------------------------


def _notes(user_id: str) -> str:
    return f"users/{segment(user_id)}/notes/"


def get_long_term_note(user_id: str) -> Call[Note]:
    return Call("GET", f"{_notes(user_id)}long-term/", _parse(Note.from_json))


def put_long_term_note(user_id: str, content: str) -> Call[Note]:
    """Replace the long-term document as a new version (the same text again writes nothing)."""
    return Call(
        "PUT", f"{_notes(user_id)}long-term/", _parse(Note.from_json), json={"content": content}
    )


def long_term_note_history(
    user_id: str, *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[Note]]:
    """The long-term document's versions, newest first."""
    return Call(
        "GET",
        f"{_notes(user_id)}long-term/history/",
        _page(Note.from_json),
        params=params_of(limit=limit, cursor=cursor),
    )


def add_daily_note(
    user_id: str, content: str, *, day: date | str | None = None, idempotency_key: str | None = None
) -> Call[Note]:
    """Append to a day's note (today, UTC, by default); a newline joins the entries."""
    return Call(
        "POST",
        f"{_notes(user_id)}daily/",
        _parse(Note.from_json),
        json=body_without_none(content=content, day=day),
        idempotency_key=idempotency_key or new_idempotency_key(),
    )


def get_daily_note(
    user_id: str, day: date | str, *, history_limit: int | None = None
) -> Call[Note]:
    """That day's note with its `history` of versions."""
    return Call(
        "GET",
        f"{_notes(user_id)}daily/{segment(json_value(day))}/",
        _parse(Note.from_json),
        params=params_of(history_limit=history_limit),
    )


def recall_notes(
    user_id: str, *, days: int | None = None, q: str | None = None
) -> Call[NoteRecall]:
    """The long-term note and the daily notes of the last `days` days, newest first; `q` keeps
    the notes containing any of its words."""
    return Call(
        "GET", _notes(user_id), _parse(NoteRecall.from_json), params=params_of(days=days, q=q)
    )


def clear_notes(user_id: str) -> Call[int]:
    """Write an empty version of every non-empty note (history is kept); returns how many."""
    return Call("POST", f"{_notes(user_id)}clear/", lambda answer: int(answer.body["cleared"]))


# --- plans ---------------------------------------------------------------------------------------


def create_plan(
    plan_id: str,
    *,
    goal_event: str,
    user_id: str | None = None,
    session_id: str | None = None,
    goal_data: JSON | None = None,
    status: PlanStatus | None = None,
    state: JSON | None = None,
    idempotency_key: str | None = None,
) -> Call[Plan]:
    return Call(
        "POST",
        "plans/",
        _parse(Plan.from_json),
        json=body_without_none(
            plan_id=plan_id,
            goal_event=goal_event,
            user_id=user_id,
            session_id=session_id,
            goal_data=goal_data,
            status=status,
            state=state,
        ),
        idempotency_key=idempotency_key or new_idempotency_key(),
    )


def get_plan(plan_id: str) -> Call[Plan]:
    return Call("GET", f"plans/{segment(plan_id)}/", _parse(Plan.from_json))


def list_plans(
    *,
    status: PlanStatus | Literal["active"] | None = None,
    user_id: str | None = None,
    session_id: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[Plan]]:
    return Call(
        "GET",
        "plans/",
        _page(Plan.from_json),
        params=params_of(
            status=status, user_id=user_id, session_id=session_id, limit=limit, cursor=cursor
        ),
    )


def replace_plan(
    plan_id: str,
    *,
    if_match: str,
    goal_event: str,
    status: PlanStatus,
    goal_data: JSON | None = None,
    state: JSON | None = None,
) -> Call[Plan]:
    """Replace the whole plan; `if_match` is the ETag you read (`"*"`: whatever is there)."""
    return Call(
        "PUT",
        f"plans/{segment(plan_id)}/",
        _parse(Plan.from_json),
        json=body_without_none(
            goal_event=goal_event, status=status, goal_data=goal_data, state=state
        ),
        headers=_if_match(if_match),
    )


def update_plan(
    plan_id: str,
    *,
    status: PlanStatus | NotGiven = NOT_GIVEN,
    state: JSON | NotGiven = NOT_GIVEN,
    goal_event: str | NotGiven = NOT_GIVEN,
    goal_data: JSON | NotGiven = NOT_GIVEN,
    if_match: str | None = None,
) -> Call[Plan]:
    """Change the status and merge `state`/`goal_data` (JSON merge patch: None removes a key),
    atomically; with `if_match`, only if nobody changed the plan since you read that ETag."""
    return Call(
        "PATCH",
        f"plans/{segment(plan_id)}/",
        _parse(Plan.from_json),
        json=body(status=status, state=state, goal_event=goal_event, goal_data=goal_data),
        headers=_if_match(if_match),
    )


def delete_plan(plan_id: str, *, if_match: str | None = None) -> Call[None]:
    """Delete a plan with its task contexts."""
    return Call("DELETE", f"plans/{segment(plan_id)}/", _nothing, headers=_if_match(if_match))


# --- task contexts -------------------------------------------------------------------------------


def create_task_context(
    task_id: str,
    *,
    event_type: str,
    response_event: str | None = None,
    response_topic: str | None = None,
    data: JSON | None = None,
    sub_tasks: list[str] | None = None,
    state: JSON | None = None,
    plan_id: str | None = None,
    session_id: str | None = None,
    idempotency_key: str | None = None,
) -> Call[TaskContext]:
    return Call(
        "POST",
        "task-contexts/",
        _parse(TaskContext.from_json),
        json=body_without_none(
            task_id=task_id,
            event_type=event_type,
            response_event=response_event,
            response_topic=response_topic,
            data=data,
            sub_tasks=sub_tasks,
            state=state,
            plan_id=plan_id,
            session_id=session_id,
        ),
        idempotency_key=idempotency_key or new_idempotency_key(),
    )


def get_task_context(task_id: str) -> Call[TaskContext]:
    return Call("GET", f"task-contexts/{segment(task_id)}/", _parse(TaskContext.from_json))


def task_context_by_subtask(subtask_id: str) -> Call[TaskContext]:
    """The task waiting for this sub-task."""
    return Call(
        "GET",
        f"task-contexts/by-subtask/{segment(subtask_id)}/",
        _parse(TaskContext.from_json),
    )


def list_task_contexts(
    *,
    session_id: str | None = None,
    plan_id: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[TaskContext]]:
    return Call(
        "GET",
        "task-contexts/",
        _page(TaskContext.from_json),
        params=params_of(session_id=session_id, plan_id=plan_id, limit=limit, cursor=cursor),
    )


def replace_task_context(
    task_id: str,
    *,
    if_match: str,
    event_type: str,
    response_event: str | None = None,
    response_topic: str | None = None,
    data: JSON | None = None,
    sub_tasks: list[str] | None = None,
    state: JSON | None = None,
    plan_id: str | None = None,
    session_id: str | None = None,
) -> Call[TaskContext]:
    return Call(
        "PUT",
        f"task-contexts/{segment(task_id)}/",
        _parse(TaskContext.from_json),
        json=body_without_none(
            event_type=event_type,
            response_event=response_event,
            response_topic=response_topic,
            data=data,
            sub_tasks=sub_tasks,
            state=state,
            plan_id=plan_id,
            session_id=session_id,
        ),
        headers=_if_match(if_match),
    )


def update_task_context(
    task_id: str,
    *,
    add_sub_tasks: list[str] | NotGiven = NOT_GIVEN,
    remove_sub_tasks: list[str] | NotGiven = NOT_GIVEN,
    state: JSON | NotGiven = NOT_GIVEN,
    data: JSON | NotGiven = NOT_GIVEN,
    event_type: str | NotGiven = NOT_GIVEN,
    response_event: str | NotGiven = NOT_GIVEN,
    response_topic: str | NotGiven = NOT_GIVEN,
    if_match: str | None = None,
) -> Call[TaskContext]:
    """Remove then add sub-tasks and merge `state`/`data`, atomically. The answer's
    `removed_sub_tasks` non-empty with `sub_tasks` empty: this call removed the last one."""
    return Call(
        "PATCH",
        f"task-contexts/{segment(task_id)}/",
        _parse(TaskContext.from_json),
        json=body(
            add_sub_tasks=add_sub_tasks,
            remove_sub_tasks=remove_sub_tasks,
            state=state,
            data=data,
            event_type=event_type,
            response_event=response_event,
            response_topic=response_topic,
        ),
        headers=_if_match(if_match),
    )


def delete_task_context(task_id: str, *, if_match: str | None = None) -> Call[None]:
    return Call(
        "DELETE", f"task-contexts/{segment(task_id)}/", _nothing, headers=_if_match(if_match)
    )


# --- purge ---------------------------------------------------------------------------------------


def purge(
    scope: Literal["session", "user", "older_than"],
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    days: int | None = None,
    dry_run: bool = False,
) -> Call[PurgeResult]:
    """Remove a session, a person or old history (needs the `purge` scope); `dry_run=True`
    only counts."""
    return Call(
        "POST",
        "purge/",
        _parse(PurgeResult.from_json),
        json=body_without_none(
            scope=scope, session_id=session_id, user_id=user_id, days=days, dry_run=dry_run
        ),
    )
