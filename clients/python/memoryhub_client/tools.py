"""MemoryHub as tools a model can call: OpenAI function-calling schemas and a resolver.

    tools = openai_tools()
    reply = openai.chat.completions.create(model=…, messages=messages, tools=tools)
    messages += [reply.choices[0].message,
                 *resolve_tool_calls(hub, reply.choices[0].message.tool_calls, user_id="tg:42",
                                     session_external_key="tg:42:main")]

The tools have the names of MemoryHub's MCP tools (and of other memory servers'): add_memory,
search_memories, get_memories, get_memory, update_memory, delete_memory, delete_all_memories,
add_messages, get_context, save_note, recall_notes.

Whose memory: the tenant is the client's API key and the person is the resolver's `user_id`;
neither is a tool argument, so no model output can reach another person's memory. The session of
add_messages/get_context is the resolver's `session_external_key` when given (the model's
`session_key` is then ignored); a key held by another person's session is refused by the server.

The arguments and answers are those of the MCP tools, less `user_id`: a memory is named by its
`key`, a fact by its `fact_id` (the `id` a tool returned), a conversation by its `session_key`;
memories, facts, messages and notes come back as the REST API shows them.

Destructive tools (delete_memory, delete_all_memories) run only with `allow_destructive=True`;
delete_all_memories also needs `confirm: true` from the model. Every failure — an unknown tool,
arguments that are not JSON, a refusal, a MemoryHub error — becomes the tool message
`{"error": {"code", "message"}}` with MemoryHub's error code, never an exception, so the model
can read it and recover.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memoryhub_client._bridge import AwaitableHub, run_sync
from memoryhub_client._client import AsyncMemoryHub, MemoryHub
from memoryhub_client.errors import MemoryHubError, NotFoundError, ValidationError
from memoryhub_client.types import JSON, Fact, Memory, Session

MEMORY_KEY: JSON = {
    "type": "string",
    "description": (
        "A memory's key: lowercase letters, digits and _, starting with a letter (e.g. "
        "`favourite_tea`). Reuse the `key` that add_memory, get_memories or search_memories "
        "returned."
    ),
}
FACT_ID: JSON = {
    "type": "integer",
    "minimum": 1,
    "description": (
        "A fact's `id`, as add_memory, get_memories or search_memories returned it. Give either "
        "`key` or `fact_id`."
    ),
}
CONTENT: JSON = {
    "type": "string",
    "description": "One self-contained statement (e.g. `Prefers green tea, no sugar`).",
}
SESSION_KEY: JSON = {
    "type": "string",
    "description": (
        "Your own stable key for this conversation (e.g. `telegram:chat:42`); leave it out to "
        "use the current conversation."
    ),
}
SEARCH_LIMIT_MAX = 50
LIST_LIMIT_MAX = 200
FACTS_PAGE = 200


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its JSON schema and description (for OpenAI's `tools` and MCP's tool list),
    and the hints MCP shows as annotations."""

    name: str
    description: str
    parameters: JSON
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    def openai(self) -> JSON:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def _object(properties: JSON, required: Sequence[str] = ()) -> JSON:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "add_memory",
        "Remember something about the person. With a `key`: an explicit memory under that key, "
        "always in the person's context (saving under an existing key replaces its text; the "
        "old text is kept as a version). Without: a fact, found by search_memories and put in "
        "the context when relevant; the same statement twice is one fact. Returns the memory "
        "(reuse its `key`) or the fact (reuse its `id`) to update or delete it later.",
        _object(
            {
                "content": CONTENT,
                "key": {
                    "type": "string",
                    "pattern": "^[a-z][a-z0-9_]*$",
                    "maxLength": 64,
                    "description": (
                        "Give a key (e.g. `favourite_tea`) for an explicit memory; leave it out "
                        "to store a fact."
                    ),
                },
                "pinned": {
                    "type": "boolean",
                    "description": "Memories only: show it first in the context.",
                },
                "tags": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Facts only: labels to filter and search by.",
                },
            },
            ["content"],
        ),
        idempotent=True,
    ),
    ToolSpec(
        "search_memories",
        "Search what is known about the person: their facts and past messages (by words and by "
        "meaning, best first), and their memories and the tenant-wide ones (by words). A "
        "fact's `id` and a memory's `key` can be passed to get_memory, update_memory or "
        "delete_memory.",
        _object(
            {
                "query": {
                    "type": "string",
                    "description": "What you want to know, in plain words (e.g. `what tea "
                    "does she like`).",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": SEARCH_LIMIT_MAX,
                    "description": "At most this many of each kind (default 10).",
                },
            },
            ["query"],
        ),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        "get_memories",
        "Everything kept about the person: their memories, their current facts (newest first) "
        "and the tenant-wide memories. Reuse a memory's `key` or a fact's `id` with "
        "get_memory, update_memory or delete_memory.",
        _object(
            {
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": LIST_LIMIT_MAX,
                    "description": "At most this many of each kind (default 50).",
                }
            }
        ),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        "get_memory",
        "One memory by its `key`, or one fact by its `fact_id`.",
        _object({"key": MEMORY_KEY, "fact_id": FACT_ID}),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        "update_memory",
        "Change what a memory or a fact says. Nothing is lost: a memory keeps its earlier text "
        "as a version; a fact is replaced by a new fact (a new `id`: use it from now on) and "
        "the old one stays in the history as superseded.",
        _object(
            {
                "content": CONTENT,
                "key": MEMORY_KEY,
                "fact_id": FACT_ID,
                "pinned": {
                    "type": "boolean",
                    "description": "Memories only: show it first in the context.",
                },
            },
            ["content"],
        ),
        idempotent=True,
    ),
    ToolSpec(
        "delete_memory",
        "Delete one memory (by `key`, with its versions) or one fact (by `fact_id`), for good "
        "(when the person asks you to forget it, or it is wrong).",
        _object({"key": MEMORY_KEY, "fact_id": FACT_ID}),
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        "delete_all_memories",
        "Delete every memory and every fact (current and superseded) of the person, for good. "
        "Only when the person explicitly asks to forget everything. Their conversations and "
        "notes stay.",
        _object(
            {
                "confirm": {
                    "type": "boolean",
                    "description": "Must be true: this deletes every memory and fact of the "
                    "person.",
                }
            },
            ["confirm"],
        ),
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        "add_messages",
        "Append turns to a conversation (the first call creates it). Call it after every turn: "
        "MemoryHub summarizes long conversations and learns facts about the person from them.",
        _object(
            {
                "messages": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 100,
                    "description": "The new turns, oldest first.",
                    "items": _object(
                        {
                            "role": {"type": "string", "enum": ["user", "assistant", "system"]},
                            "content": {"type": "string", "description": "What was said."},
                            "name": {
                                "type": "string",
                                "description": "Who said it, when several people share the "
                                "conversation.",
                            },
                        },
                        ["role", "content"],
                    ),
                },
                "session_key": SESSION_KEY,
            },
            ["messages"],
        ),
    ),
    ToolSpec(
        "get_context",
        "What to know before answering in this conversation — the person's memories, the facts "
        "relevant to `query`, notes, the summary and the recent messages — as one block within "
        "`max_tokens`.",
        _object(
            {
                "query": {
                    "type": "string",
                    "description": "The question at hand, to pick the relevant facts.",
                },
                "max_tokens": {
                    "type": "integer",
                    "minimum": 200,
                    "maximum": 200000,
                    "description": "The budget (default: the tenant's policy, 4000).",
                },
                "session_key": SESSION_KEY,
            },
        ),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        "save_note",
        "Write to the person's notes: `daily` (default) appends to the day's note (a work log); "
        "`long_term` replaces the whole long-term document, so read it with recall_notes first "
        "and send all of it. Earlier versions are kept.",
        _object(
            {
                "content": {"type": "string", "description": "The note's text (markdown is fine)."},
                "kind": {"type": "string", "enum": ["daily", "long_term"]},
                "day": {
                    "type": "string",
                    "format": "date",
                    "description": "daily only: the day (YYYY-MM-DD); today (UTC) when left out.",
                },
            },
            ["content"],
        ),
    ),
    ToolSpec(
        "recall_notes",
        "The person's long-term document and their recent daily notes, newest day first.",
        _object(
            {
                "days": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 365,
                    "description": "Daily notes of the last N days, today included (default 7).",
                },
                "query": {
                    "type": "string",
                    "description": "Keep only notes holding any of these words.",
                },
            },
        ),
        read_only=True,
        idempotent=True,
    ),
)
TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOL_SPECS}
DESTRUCTIVE_TOOLS = frozenset(spec.name for spec in TOOL_SPECS if spec.destructive)


def openai_tools(
    *, names: Iterable[str] | None = None, include_destructive: bool = True
) -> list[JSON]:
    """The tools in OpenAI's function-calling format (`tools=` of chat completions). Pass
    `include_destructive=False` when the resolver will not get `allow_destructive=True`, so the
    model is not offered tools it cannot use."""
    wanted = set(names) if names is not None else None
    if wanted is not None and wanted - TOOLS_BY_NAME.keys():
        raise ValueError(f"unknown tools: {sorted(wanted - TOOLS_BY_NAME.keys())}")
    return [
        spec.openai()
        for spec in TOOL_SPECS
        if (wanted is None or spec.name in wanted) and (include_destructive or not spec.destructive)
    ]


# --- the resolver --------------------------------------------------------------------------------


class ToolError(Exception):
    """A refusal of the resolver itself, answered to the model as `{"error": {...}}`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class _Scope:
    user_id: str
    session_external_key: str | None
    agent_id: str | None
    allow_destructive: bool


def resolve_tool_calls(
    client: MemoryHub,
    tool_calls: Iterable[Any] | None,
    *,
    user_id: str,
    session_external_key: str | None = None,
    agent_id: str | None = None,
    allow_destructive: bool = False,
) -> list[JSON]:
    """Run a model's tool calls (OpenAI format, as dicts or the openai package's objects) for
    the person `user_id`, in order, and return one `{"role": "tool", "tool_call_id",
    "content"}` message per call."""
    scope = _Scope(user_id, session_external_key, agent_id, allow_destructive)
    hub = AwaitableHub(client)
    return [run_sync(_resolve_one(hub, call, scope)) for call in tool_calls or []]


async def aresolve_tool_calls(
    client: AsyncMemoryHub,
    tool_calls: Iterable[Any] | None,
    *,
    user_id: str,
    session_external_key: str | None = None,
    agent_id: str | None = None,
    allow_destructive: bool = False,
) -> list[JSON]:
    """`resolve_tool_calls` over AsyncMemoryHub."""
    scope = _Scope(user_id, session_external_key, agent_id, allow_destructive)
    return [await _resolve_one(client, call, scope) for call in tool_calls or []]


def _call_parts(call: Any) -> tuple[str, str, Any]:
    if not isinstance(call, Mapping):
        call = call.model_dump() if hasattr(call, "model_dump") else vars(call)
    function = call.get("function") or {}
    return str(call.get("id") or ""), str(function.get("name") or ""), function.get("arguments")


async def _resolve_one(hub: Any, call: Any, scope: _Scope) -> JSON:
    call_id, name, raw_arguments = _call_parts(call)
    try:
        result = await _dispatch(hub, name, raw_arguments, scope)
        content: JSON = result
    except ToolError as error:
        content = {"error": {"code": error.code, "message": error.message}}
    except MemoryHubError as error:
        refused: JSON = {"code": error.code, "message": error.message}
        if error.fields:
            refused["fields"] = error.fields
        content = {"error": refused}
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": json.dumps(content, ensure_ascii=False, default=str),
    }


async def _dispatch(hub: Any, name: str, raw_arguments: Any, scope: _Scope) -> JSON:
    spec = TOOLS_BY_NAME.get(name)
    if spec is None:
        raise ToolError("unknown_tool", f"There is no tool named {name!r}.")
    arguments = _arguments(raw_arguments)
    unknown = set(arguments) - set(spec.parameters["properties"])
    missing = [field for field in spec.parameters["required"] if field not in arguments]
    if unknown or missing:
        raise ToolError(
            "invalid_arguments",
            f"Unknown arguments {sorted(unknown)}, missing {missing}."
            if unknown and missing
            else f"Unknown arguments: {sorted(unknown)}."
            if unknown
            else f"Missing arguments: {missing}.",
        )
    if spec.destructive and not scope.allow_destructive:
        raise ToolError("destructive_tool_refused", f"{name} is turned off for this assistant.")
    handler = _HANDLERS[name]
    return await handler(hub, arguments, scope)


def _arguments(raw: Any) -> JSON:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        parsed = json.loads(raw)
    except (TypeError, ValueError) as error:
        raise ToolError("invalid_arguments", f"The arguments are not valid JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise ToolError("invalid_arguments", "The arguments must be a JSON object.")
    return parsed


def _text(arguments: JSON, name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ToolError("invalid_arguments", f"`{name}` must be a non-empty string.")
    return value


def _optional_int(arguments: JSON, name: str) -> int | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError("invalid_arguments", f"`{name}` must be an integer.")
    return value


# --- what each tool does -------------------------------------------------------------------------


def _key_or_fact_id(arguments: JSON) -> tuple[str | None, int | None]:
    key, fact_id = arguments.get("key"), arguments.get("fact_id")
    if (key is None) == (fact_id is None):
        raise ToolError("invalid_arguments", "Give either `key` or `fact_id`.")
    if key is not None and (not isinstance(key, str) or not key):
        raise ToolError("invalid_arguments", "`key` must be a memory key.")
    if fact_id is not None and (isinstance(fact_id, bool) or not isinstance(fact_id, int)):
        raise ToolError("invalid_arguments", "`fact_id` must be a fact's id (a number).")
    return key, fact_id


async def _fact_of_person(hub: Any, fact_id: int, scope: _Scope) -> Fact:
    fact: Fact = await hub.get_fact(fact_id)
    # A fact id is tenant-wide: never show, change or delete another person's (or a
    # tenant-wide) fact through the tools, and answer as if it did not exist.
    if fact.user_id != scope.user_id:
        raise ToolError("not_found", "Not found.")
    return fact


def _limit(arguments: JSON, *, default: int, most: int) -> int:
    return min(max(_optional_int(arguments, "limit") or default, 1), most)


async def _add_memory(hub: Any, arguments: JSON, scope: _Scope) -> JSON:
    content = _text(arguments, "content")
    key = arguments.get("key")
    if key is None:
        if arguments.get("pinned") is not None:
            raise ToolError("key_required", "Only a memory with a key can be pinned.")
        tags = arguments.get("tags")
        fact: Fact = await hub.create_fact(
            content, user_id=scope.user_id, tags=list(tags) if tags else None
        )
        return {"kind": "fact", "created": bool(fact.created), "fact": fact.raw}
    if arguments.get("tags") is not None:
        raise ToolError("invalid_arguments", "Memories have no tags: leave out the key.")
    memory: Memory = await hub.put_memory(
        scope.user_id, str(key), content=content, pinned=arguments.get("pinned")
    )
    return {"kind": "memory", "created": bool(memory.created), "memory": memory.raw}


# Words that say nothing about which memory is meant ("what does the user like?").
_STOP_TEXT = (
    "about also and any are can did does for from has have how into its may not our she that "
    "the their them they this was what when where which who why will with would you your user "
    "users he him his her"
)
_STOP_WORDS = frozenset(_STOP_TEXT.split())


def _words(text: str) -> set[str]:
    return {
        word
        for word in re.findall(r"\w+", text.lower())
        if len(word) >= 3 and word not in _STOP_WORDS
    }


def _mentions(query_words: set[str], memory: Memory) -> bool:
    """Whether a memory shares a word with the query, a plural or -ing form included
    (memories are few and kept whole: facts and messages get the server's ranked search)."""
    return any(
        word == query_word or (min(len(word), len(query_word)) >= 4 and word[:4] == query_word[:4])
        for word in _words(f"{memory.key.replace('_', ' ')} {memory.content}")
        for query_word in query_words
    )


async def _search_memories(hub: Any, arguments: JSON, scope: _Scope) -> JSON:
    query = _text(arguments, "query")
    limit = _limit(arguments, default=10, most=SEARCH_LIMIT_MAX)
    words = _words(query)
    tenant_wide = await hub.list_tenant_memories()
    try:
        personal = await hub.list_memories(scope.user_id)
    except NotFoundError:  # a person nothing is known about: no results
        personal = None
    candidates = [*(personal or []), *tenant_wide]
    memories = [memory.raw for memory in candidates if _mentions(words, memory)][:limit]
    if personal is None:
        return {"facts": [], "memories": memories, "messages": []}
    try:
        facts = await hub.search_facts(query, user_id=scope.user_id, top_k=limit)
        messages = await hub.search_messages(query, user_id=scope.user_id, top_k=limit)
    except ValidationError:  # no searchable word in the query
        return {"facts": [], "memories": memories, "messages": []}
    return {
        "facts": [{"score": hit.score, "fact": hit.item.raw} for hit in facts.hits],
        "memories": memories,
        "messages": [
            {"score": hit.score, "session_id": hit.item.session_id, "message": hit.item.raw}
            for hit in messages.hits
        ],
    }


async def _get_memories(hub: Any, arguments: JSON, scope: _Scope) -> JSON:
    limit = _limit(arguments, default=50, most=LIST_LIMIT_MAX)
    memories = await hub.list_memories(scope.user_id)
    facts = await hub.list_facts(user_id=scope.user_id, limit=limit)
    tenant_wide = await hub.list_tenant_memories()
    return {
        "memories": [memory.raw for memory in memories[:limit]],
        "facts": [fact.raw for fact in facts.results],
        "tenant_memories": [memory.raw for memory in tenant_wide[:limit]],
    }


async def _get_memory(hub: Any, arguments: JSON, scope: _Scope) -> JSON:
    key, fact_id = _key_or_fact_id(arguments)
    if fact_id is not None:
        return {"kind": "fact", "fact": (await _fact_of_person(hub, fact_id, scope)).raw}
    return {"kind": "memory", "memory": (await hub.get_memory(scope.user_id, key)).raw}


async def _update_memory(hub: Any, arguments: JSON, scope: _Scope) -> JSON:
    key, fact_id = _key_or_fact_id(arguments)
    content = _text(arguments, "content")
    if fact_id is not None:
        old = await _fact_of_person(hub, fact_id, scope)
        fact: Fact = await hub.create_fact(
            content,
            user_id=scope.user_id,
            tags=old.tags or None,
            metadata=old.metadata or None,
            supersedes=old.id,
        )
        return {"kind": "fact", "replaces": old.id, "fact": fact.raw}
    await hub.get_memory(scope.user_id, key)  # an update, not a create: 404 when unknown
    memory: Memory = await hub.put_memory(
        scope.user_id, str(key), content=content, pinned=arguments.get("pinned")
    )
    return {"kind": "memory", "memory": memory.raw}


async def _delete_memory(hub: Any, arguments: JSON, scope: _Scope) -> JSON:
    key, fact_id = _key_or_fact_id(arguments)
    if fact_id is not None:
        await _fact_of_person(hub, fact_id, scope)
        await hub.delete_fact(fact_id)
        return {"deleted": {"kind": "fact", "id": fact_id}}
    await hub.delete_memory(scope.user_id, key)
    return {"deleted": {"kind": "memory", "key": key}}


async def _delete_all_memories(hub: Any, arguments: JSON, scope: _Scope) -> JSON:
    if arguments.get("confirm") is not True:
        raise ToolError("confirm_required", "Set confirm to true to delete everything.")
    memories = await hub.list_memories(scope.user_id)
    for memory in memories:
        await hub.delete_memory(scope.user_id, memory.key)
    fact_ids: list[int] = []
    cursor: str | None = None
    while True:
        page = await hub.list_facts(
            user_id=scope.user_id, include_superseded=True, limit=FACTS_PAGE, cursor=cursor
        )
        fact_ids.extend(fact.id for fact in page.results)
        cursor = page.next_cursor
        if cursor is None:
            break
    for fact_id in fact_ids:
        await hub.delete_fact(fact_id)
    return {"deleted": {"memories": len(memories), "facts": len(fact_ids)}}


async def _session(hub: Any, arguments: JSON, scope: _Scope) -> Session:
    key = scope.session_external_key or arguments.get("session_key")
    if not key or not isinstance(key, str):
        raise ToolError("session_required", "Which conversation? Pass `session_key`.")
    session: Session = await hub.create_session(
        user_id=scope.user_id, external_key=key, agent_id=scope.agent_id
    )
    return session


async def _add_messages(hub: Any, arguments: JSON, scope: _Scope) -> JSON:
    messages = arguments.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ToolError("invalid_arguments", "`messages` must be a non-empty list.")
    allowed = {"role", "content", "name"}
    if not all(isinstance(item, dict) and set(item) <= allowed for item in messages):
        raise ToolError(
            "invalid_arguments", "Each message is an object with role, content and name only."
        )
    session = await _session(hub, arguments, scope)
    result = await hub.append_messages(session.id, messages)
    answer: JSON = {
        "session_key": session.external_key,
        "session_created": bool(session.created),
        "stored": len(result.messages),
        "seqs": [message.seq for message in result.messages],
    }
    if not result.stored:
        answer["reason"] = result.reason
    return answer


async def _get_context(hub: Any, arguments: JSON, scope: _Scope) -> JSON:
    session = await _session(hub, arguments, scope)
    query = arguments.get("query")
    context = await hub.get_context(
        session.id,
        max_tokens=_optional_int(arguments, "max_tokens"),
        query=query if isinstance(query, str) and query else None,
    )
    return {
        "session_key": session.external_key,
        "content": context.content or "",
        "tokens": context.tokens,
        "max_tokens": context.max_tokens,
    }


async def _save_note(hub: Any, arguments: JSON, scope: _Scope) -> JSON:
    content = _text(arguments, "content")
    kind = arguments.get("kind") or "daily"
    day = arguments.get("day")
    if kind == "long_term":
        if day:
            raise ToolError("invalid_arguments", "A long-term note has no day.")
        note = await hub.put_long_term_note(scope.user_id, content)
    elif kind == "daily":
        note = await hub.add_daily_note(scope.user_id, content, day=day or None)
    else:
        raise ToolError("invalid_arguments", "`kind` is daily or long_term.")
    return {"kind": kind, "note": note.raw}


async def _recall_notes(hub: Any, arguments: JSON, scope: _Scope) -> JSON:
    query = arguments.get("query")
    recalled = await hub.recall_notes(
        scope.user_id,
        days=_optional_int(arguments, "days"),
        q=query if isinstance(query, str) and query.strip() else None,
    )
    return dict(recalled.raw)


_Handler = Callable[[Any, JSON, _Scope], Awaitable[JSON]]
_HANDLERS: dict[str, _Handler] = {
    "add_memory": _add_memory,
    "search_memories": _search_memories,
    "get_memories": _get_memories,
    "get_memory": _get_memory,
    "update_memory": _update_memory,
    "delete_memory": _delete_memory,
    "delete_all_memories": _delete_all_memories,
    "add_messages": _add_messages,
    "get_context": _get_context,
    "save_note": _save_note,
    "recall_notes": _recall_notes,
}
