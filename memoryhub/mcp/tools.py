"""The MCP tools, named as bots expect from other memory servers.

Each translates its arguments into the REST API's serializers and one selector or service call,
and answers with the API's output shapes. The tenant is the caller's (server.caller); a person
(`user_id`) and a conversation (`session_key`) are the bot's own ids, as in the API.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any, Literal

from django.db import transaction
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field
from rest_framework import exceptions, serializers

from facts_app.api.facts import FactInputSerializer, FactOutputSerializer
from facts_app.api.memories import (
    USER_MEMORIES_OFF_BODY,
    MemoryInputSerializer,
    MemoryOutputSerializer,
    validated_memory_key,
)
from facts_app.api.notes import (
    NoteDailyInputSerializer,
    NoteDailyOutputSerializer,
    NoteLongTermInputSerializer,
    NoteRecallOutputSerializer,
    NoteRecallQuerySerializer,
    NoteVersionOutputSerializer,
)
from facts_app.models import Fact, UserMemory
from facts_app.selectors.facts import (
    FactFilters,
    fact_get_for_tenant,
    fact_list_for_tenant,
    fact_search_result,
)
from facts_app.selectors.memories import memory_get, memory_list
from facts_app.selectors.notes import (
    RECALL_DAYS_DEFAULT,
    RECALL_DAYS_MAX,
    note_recall,
    query_words,
)
from facts_app.services import notes as note_services
from facts_app.services.facts import fact_create, fact_delete
from facts_app.services.memories import memory_delete, memory_save
from memoryhub.accounts.idempotency import (
    ERASED_STATUS,
    IdempotencyKeyErased,
    Performed,
    idempotency_key_checked,
    request_fingerprint,
    run_idempotent,
)
from memoryhub.accounts.models import (
    END_USER_ID_MAX_LENGTH,
    ApiKeyScope,
    EndUser,
    Tenant,
)
from memoryhub.accounts.redaction import rows_redacted, search_redactor
from memoryhub.accounts.selectors import end_user_get_for_tenant, memory_policy_for
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.context import render_markdown
from memoryhub.context.api import MAX_TOKENS_RANGE, ContextQuerySerializer
from memoryhub.context.session_context import session_context_for_tenant
from memoryhub.core.errors import InvalidInput, ResourceNotFound
from memoryhub.core.search import MAX_QUERY_CHARS, EmptySearchQuery
from memoryhub.mcp.server import Caller, caller, tool
from sessions_app import recall, selectors, services
from sessions_app.api.serializers import (
    MessageBatchInputSerializer,
    SessionCreateInputSerializer,
    message_data,
)
from sessions_app.models import EXTERNAL_KEY_MAX_LENGTH

READ, WRITE = ApiKeyScope.READ, ApiKeyScope.WRITE
SEARCH_LIMIT_MAX = 50
# Its own scope: a tool call's arguments and answer are not a REST append's body and response.
MCP_ADD_MESSAGES_SCOPE = "mcp.add_messages"
LIST_LIMIT_MAX = 200

# --- arguments: their descriptions are what the model reads ---------------------------------

UserId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=END_USER_ID_MAX_LENGTH,
        description=(
            "The person: your own stable id for them (e.g. `telegram:12345`). Use the same id "
            "in every call about this person."
        ),
    ),
]
OwnerId = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=END_USER_ID_MAX_LENGTH,
        description=(
            "The person the memory belongs to (your stable id for them, e.g. `telegram:12345`). "
            "Leave it out only for a tenant-wide memory, which every person's context shows "
            "(changing those needs the global-memory scope)."
        ),
    ),
]
SessionKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=EXTERNAL_KEY_MAX_LENGTH,
        description=(
            "Your own stable key for this conversation (e.g. `telegram:chat:42`). Reuse it in "
            "every add_messages and get_context call of the conversation."
        ),
    ),
]
MemoryKey = Annotated[
    str | None,
    Field(
        description=(
            "A memory's key: lowercase letters, digits and _, starting with a letter (e.g. "
            "`favourite_tea`). Reuse the `key` that add_memory, get_memories or search_memories "
            "returned."
        ),
    ),
]
FactId = Annotated[
    int | None,
    Field(
        ge=1,
        description=(
            "A fact's `id`, as add_memory, get_memories or search_memories returned it. Give "
            "either `key` or `fact_id`."
        ),
    ),
]
Content = Annotated[
    str,
    Field(description="One self-contained statement (e.g. `Prefers green tea, no sugar`)."),
]


class MessageIn(BaseModel):
    role: Literal["user", "assistant", "system"]
    content: str = Field(description="What was said, verbatim.")
    name: str | None = Field(
        default=None,
        max_length=128,
        description="Who said it, when several people share the conversation (e.g. `Alice`).",
    )


# --- helpers --------------------------------------------------------------------------------


def _validated(serializer_class: type[serializers.Serializer[Any]], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _invalid(field: str, message: str, code: str) -> exceptions.ValidationError:
    return exceptions.ValidationError({field: [exceptions.ErrorDetail(message, code)]})


def _key_or_fact_id(key: str | None, fact_id: int | None) -> None:
    if (key is None) == (fact_id is None):
        raise _invalid("key", "Give either `key` (a memory) or `fact_id` (a fact).", "one_of")


def _person(who: Caller, *, user_id: str | None) -> EndUser | None:
    """An existing person (ResourceNotFound otherwise), or None for the tenant-wide memories."""
    if user_id is None:
        return None
    return end_user_get_for_tenant(tenant=who.tenant, external_id=user_id)


def _person_for_write(who: Caller, *, user_id: str | None) -> EndUser | None:
    """The person, created on first write as the API creates them; None: tenant-wide."""
    if user_id is None:
        return None
    return end_user_get_or_create(tenant=who.tenant, external_id=user_id)


def _global_scope_for(ctx: Context[Any, Any], *, user_id: str | None) -> None:
    # Tenant-wide knowledge reaches every person's context: changing it needs its own scope.
    if user_id is None:
        caller(ctx, ApiKeyScope.GLOBAL_MEMORY)


def _fact_of(who: Caller, *, fact_id: int, user_id: str | None) -> Fact:
    """The tenant's fact; with `user_id`, only if it is that person's (else not found)."""
    fact = fact_get_for_tenant(tenant=who.tenant, fact_id=fact_id)
    owner = fact.end_user.external_id if fact.end_user else None
    if user_id is not None and owner != user_id:
        raise ResourceNotFound("No such fact.")
    return fact


def _memory(memory: UserMemory) -> dict[str, Any]:
    return dict(MemoryOutputSerializer(memory).data)


def _facts(facts: list[Fact]) -> list[dict[str, Any]]:
    return [dict(item) for item in FactOutputSerializer(facts, many=True).data]


def _fact(fact: Fact) -> dict[str, Any]:
    return dict(FactOutputSerializer(fact).data)


def _memories_matching(memories: list[UserMemory], *, query: str) -> list[UserMemory]:
    """Memories that hold any word of `query` in their key or text, most words first."""
    words = query_words(query)
    scored = []
    for memory in memories:
        text = f"{memory.key.replace('_', ' ')} {memory.content}".lower()
        matched = sum(1 for word in words if word in text)
        if matched:
            scored.append((matched, memory))
    scored.sort(key=lambda pair: -pair[0])  # stable: pinned first, then by key, among equals
    return [memory for _, memory in scored]


def _session_keys(*, tenant: Tenant, session_ids: set[uuid.UUID]) -> dict[uuid.UUID, str | None]:
    rows = (
        selectors.session_list_for_tenant(tenant=tenant)
        .filter(pk__in=session_ids)
        .values_list("pk", "external_key")
    )
    return dict(rows)


def _session_id_for_key(*, tenant: Tenant, session_key: str) -> uuid.UUID:
    found = (
        selectors.session_list_for_tenant(tenant=tenant)
        .filter(external_key=session_key)
        .values_list("pk", flat=True)
        .first()
    )
    if found is None:
        raise ResourceNotFound("No session with this session_key.")
    return found


# --- memories and facts ---------------------------------------------------------------------


@tool(title="Add a memory", read_only=False, idempotent=True)
def add_memory(
    ctx: Context[Any, Any],
    content: Content,
    user_id: OwnerId = None,
    key: Annotated[
        str | None,
        Field(
            description=(
                "Give a key (e.g. `favourite_tea`: lowercase letters, digits and _) for an "
                "explicit memory that is always in the person's context; saving under an "
                "existing key replaces its text (the old text is kept as a version), so reuse "
                "the key get_memories shows to change a memory. Leave it out to store a fact."
            )
        ),
    ] = None,
    pinned: Annotated[
        bool | None, Field(description="Memories only: show it first in the context.")
    ] = None,
    tags: Annotated[
        list[str] | None, Field(description="Facts only: labels to filter and search by.")
    ] = None,
) -> dict[str, Any]:
    """Remember something about a person.

    With a `key`: an explicit memory under that key, always in the person's context. Without:
    a fact, found by search_memories and put in the context when relevant; the same statement
    twice is one fact. Returns the memory (reuse its `key`) or the fact (reuse its `id`) to
    update or delete it later."""
    who = caller(ctx, WRITE)
    _global_scope_for(ctx, user_id=user_id)
    if key is None:
        if pinned is not None:
            raise _invalid("pinned", "Only a memory with a key can be pinned.", "key_required")
        data = _validated(
            FactInputSerializer, {"content": content, "user_id": user_id, "tags": tags or []}
        )
        data.pop("user_id", None)
        end_user = _person_for_write(who, user_id=user_id)
        fact, created = fact_create(tenant=who.tenant, end_user=end_user, **data)
        return {"kind": "fact", "created": created, "fact": _fact(fact)}
    if tags is not None:
        raise _invalid(
            "tags", "Memories have no tags: leave out the key to store a fact.", "invalid"
        )
    memory_key = validated_memory_key(key)
    fields = {"content": content} | ({"pinned": pinned} if pinned is not None else {})
    data = _validated(MemoryInputSerializer, fields)
    if user_id is not None and not memory_policy_for(tenant=who.tenant).enable_user_memories:
        return {"kind": "memory", "created": False, **USER_MEMORIES_OFF_BODY}
    end_user = _person_for_write(who, user_id=user_id)
    memory, created = memory_save(tenant=who.tenant, end_user=end_user, key=memory_key, **data)
    return {"kind": "memory", "created": created, "memory": _memory(memory)}


@tool(title="Search memories", read_only=True, idempotent=True)
def search_memories(
    ctx: Context[Any, Any],
    query: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_QUERY_CHARS,
            description="What you want to know, in plain words (e.g. `what tea does she like`).",
        ),
    ],
    user_id: UserId,
    limit: Annotated[
        int, Field(ge=1, le=SEARCH_LIMIT_MAX, description="At most this many of each kind.")
    ] = 10,
) -> dict[str, Any]:
    """Search what is known about a person: their facts and past messages (by words and by
    meaning, best first), and their memories and the tenant-wide ones (by words).

    A fact's `id` and a memory's `key` can be passed to update_memory or delete_memory; a
    message's `session_key` to get_context. A person nothing is known about has no results."""
    who = caller(ctx, READ)
    tenant_wide = list(memory_list(tenant=who.tenant, end_user=None))
    try:
        end_user = _person(who, user_id=user_id)
    except ResourceNotFound:
        end_user = None
    if end_user is None:
        memories = _memories_matching(tenant_wide, query=query)[:limit]
        return {"facts": [], "memories": [_memory(item) for item in memories], "messages": []}
    try:
        facts = fact_search_result(
            tenant=who.tenant,
            query=query,
            filters=FactFilters(user_id=user_id),
            top_k=limit,
            mode="hybrid",
        )
        messages = recall.messages_search(
            tenant=who.tenant, query=query, mode="hybrid", top_k=limit, user_id=user_id
        )
    except EmptySearchQuery as error:
        raise _invalid("query", str(error), "empty_query") from None
    except InvalidInput as error:
        raise _invalid(error.field, error.message, error.code) from None
    personal = list(memory_list(tenant=who.tenant, end_user=end_user))
    memories = _memories_matching(personal + tenant_wide, query=query)[:limit]
    keys = _session_keys(
        tenant=who.tenant, session_ids={item.message.session_id for item in messages.hits}
    )
    # Data stored before the policy's redaction was switched on is masked on the way out.
    redact = search_redactor(tenant_id=who.tenant.pk)
    fact_data = rows_redacted(_facts([hit.fact for hit in facts.hits]), redact=redact)
    return {
        "facts": [
            {"score": hit.score, "fact": data}
            for hit, data in zip(facts.hits, fact_data, strict=True)
        ],
        "memories": rows_redacted([_memory(item) for item in memories], redact=redact),
        "messages": [
            {
                "score": item.hit.score,
                "session_key": keys.get(item.message.session_id),
                "message": rows_redacted([message_data(item.message)], redact=redact)[0],
            }
            for item in messages.hits
        ],
    }


@tool(title="Get a person's memories", read_only=True, idempotent=True)
def get_memories(
    ctx: Context[Any, Any],
    user_id: UserId,
    limit: Annotated[
        int, Field(ge=1, le=LIST_LIMIT_MAX, description="At most this many of each kind.")
    ] = 50,
) -> dict[str, Any]:
    """Everything kept about a person: their memories (pinned first, by key), their current
    facts (newest first) and the tenant-wide memories every person's context shows.

    Reuse a memory's `key` or a fact's `id` with get_memory, update_memory or delete_memory."""
    who = caller(ctx, READ)
    memories = memory_list(tenant=who.tenant, end_user=_person(who, user_id=user_id))
    facts = fact_list_for_tenant(tenant=who.tenant, filters=FactFilters(user_id=user_id))
    tenant_wide = memory_list(tenant=who.tenant, end_user=None)
    return {
        "user_id": user_id,
        "memories": [_memory(item) for item in memories[:limit]],
        "facts": _facts(list(facts.order_by("-created_at", "-pk")[:limit])),
        "tenant_memories": [_memory(item) for item in tenant_wide[:limit]],
    }


@tool(title="Get a memory", read_only=True, idempotent=True)
def get_memory(
    ctx: Context[Any, Any],
    key: MemoryKey = None,
    fact_id: FactId = None,
    user_id: OwnerId = None,
) -> dict[str, Any]:
    """One memory by its `key` (with the person's `user_id`; without, a tenant-wide memory), or
    one fact by its `fact_id`."""
    who = caller(ctx, READ)
    _key_or_fact_id(key, fact_id)
    if fact_id is not None:
        return {"kind": "fact", "fact": _fact(_fact_of(who, fact_id=fact_id, user_id=user_id))}
    assert key is not None
    memory = memory_get(
        tenant=who.tenant, end_user=_person(who, user_id=user_id), key=validated_memory_key(key)
    )
    return {"kind": "memory", "memory": _memory(memory)}


@tool(title="Update a memory", read_only=False, idempotent=True)
def update_memory(
    ctx: Context[Any, Any],
    content: Content,
    key: MemoryKey = None,
    fact_id: FactId = None,
    user_id: OwnerId = None,
    pinned: Annotated[
        bool | None, Field(description="Memories only: show it first in the context.")
    ] = None,
) -> dict[str, Any]:
    """Change what a memory or a fact says. Nothing is lost: a memory keeps its earlier text as
    a version; a fact is replaced by a new fact (a new `id`: use it from now on) and the old
    one stays in the history as superseded (`replaces`). If the person already has a fact
    saying the new text, that fact is returned and nothing is replaced."""
    who = caller(ctx, WRITE)
    _key_or_fact_id(key, fact_id)
    if fact_id is not None:
        old = _fact_of(who, fact_id=fact_id, user_id=user_id)
        _global_scope_for(ctx, user_id=old.end_user.external_id if old.end_user else None)
        data = _validated(FactInputSerializer, {"content": content})
        fact, created = fact_create(
            tenant=who.tenant,
            end_user=old.end_user,
            content=data["content"],
            tags=old.tags,
            metadata=old.metadata,
            supersedes=old,
        )
        # The person already had a fact saying this (perhaps the old one): nothing replaced.
        return {"kind": "fact", "replaces": old.pk if created else None, "fact": _fact(fact)}
    assert key is not None
    _global_scope_for(ctx, user_id=user_id)
    end_user = _person(who, user_id=user_id)
    current = memory_get(tenant=who.tenant, end_user=end_user, key=validated_memory_key(key))
    fields = {"content": content} | ({"pinned": pinned} if pinned is not None else {})
    data = _validated(MemoryInputSerializer, fields)
    memory, _ = memory_save(tenant=who.tenant, end_user=end_user, key=current.key, **data)
    return {"kind": "memory", "memory": _memory(memory)}


@tool(title="Delete a memory", read_only=False, destructive=True, idempotent=True)
def delete_memory(
    ctx: Context[Any, Any],
    key: MemoryKey = None,
    fact_id: FactId = None,
    user_id: OwnerId = None,
) -> dict[str, Any]:
    """Delete one memory (by `key`, with its versions) or one fact (by `fact_id`), for good."""
    who = caller(ctx, WRITE)
    _key_or_fact_id(key, fact_id)
    if fact_id is not None:
        fact = _fact_of(who, fact_id=fact_id, user_id=user_id)
        fact_delete(fact=fact, actor=who.actor)
        return {"deleted": {"kind": "fact", "id": fact_id}}
    assert key is not None
    _global_scope_for(ctx, user_id=user_id)
    memory = memory_get(
        tenant=who.tenant, end_user=_person(who, user_id=user_id), key=validated_memory_key(key)
    )
    memory_delete(memory=memory, actor=who.actor)
    return {"deleted": {"kind": "memory", "key": memory.key, "user_id": user_id}}


@tool(title="Delete all of a person's memories", read_only=False, destructive=True, idempotent=True)
def delete_all_memories(
    ctx: Context[Any, Any],
    user_id: UserId,
    confirm: Annotated[
        bool,
        Field(description="Must be true: this deletes every memory and fact of the person."),
    ],
) -> dict[str, Any]:
    """Delete every memory and every fact (current and superseded) of one person, for good,
    each in the audit log. Their conversations and notes stay. Needs the purge scope."""
    who = caller(ctx, ApiKeyScope.PURGE)
    if confirm is not True:
        raise _invalid("confirm", "Set confirm to true to delete everything.", "confirm_required")
    try:
        end_user = _person(who, user_id=user_id)
    except ResourceNotFound:
        return {"deleted": {"memories": 0, "facts": 0}}
    facts = fact_list_for_tenant(
        tenant=who.tenant, filters=FactFilters(user_id=user_id, include_superseded=True)
    )
    with transaction.atomic():
        memories = list(memory_list(tenant=who.tenant, end_user=end_user, include_expired=True))
        for memory in memories:
            memory_delete(memory=memory, actor=who.actor)
        removed_facts = list(facts)
        for fact in removed_facts:
            fact_delete(fact=fact, actor=who.actor)
    return {"deleted": {"memories": len(memories), "facts": len(removed_facts)}}


# --- conversations --------------------------------------------------------------------------


@tool(title="Add messages to a conversation", read_only=False)
def add_messages(
    ctx: Context[Any, Any],
    session_key: SessionKey,
    messages: Annotated[
        list[MessageIn],
        Field(min_length=1, description="The new turns, oldest first."),
    ],
    user_id: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=END_USER_ID_MAX_LENGTH,
            description=(
                "The person you are talking with (your stable id for them): give it, so that "
                "their memories and facts are found. Needed only when the conversation is new."
            ),
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        Field(
            description=(
                "A key of yours for this call (1-255 printable ASCII characters, no spaces): "
                "calling again with the same key and arguments (a retry after a timeout) "
                "stores nothing twice and returns the first call's answer."
            ),
        ),
    ] = None,
) -> dict[str, Any]:
    """Append turns to a conversation, named by your `session_key`; the first call creates it
    (with the person's `user_id`). Call it after every turn: MemoryHub summarizes long
    conversations and learns facts about the person from them."""
    who = caller(ctx, WRITE)
    key = idempotency_key_checked(idempotency_key, field="idempotency_key")
    session_fields = _validated(
        SessionCreateInputSerializer, {"external_key": session_key, "user_id": user_id}
    )
    batch = _validated(
        MessageBatchInputSerializer,
        {"messages": [message.model_dump(exclude_none=True) for message in messages]},
    )
    inputs = services.message_inputs_counted(
        messages=[services.MessageInput(**item) for item in batch["messages"]]
    )

    def perform() -> Performed:
        session, created = services.session_create_or_get(tenant=who.tenant, **session_fields)
        # A stored answer quotes the messages: their person is held before the append locks
        # the session (the order an erasure locks in), as the REST append does.
        owner = (
            services.session_owner_hold(tenant=who.tenant, session_id=session.pk) if key else None
        )
        stored = services.message_append_batch(
            tenant=who.tenant, session_id=session.pk, messages=inputs
        )
        body = {
            "session_key": session_key,
            "session_created": created,
            # False when the tenant's memory policy turns memory off: then nothing was stored.
            "memory_enabled": bool(stored),
            "messages": [message_data(message) for message in stored],
        }
        return Performed(200, body, owner if stored else None, session.pk)

    try:
        outcome = run_idempotent(
            tenant=who.tenant,
            key=key,
            scope=MCP_ADD_MESSAGES_SCOPE,
            fingerprint=request_fingerprint(
                {
                    "session_key": session_key,
                    "user_id": user_id,
                    "messages": [message.model_dump() for message in messages],
                }
            ),
            perform=perform,
        )
    except services.MessageInputInvalid as error:
        # Named as the API names a bad message of a batch: messages → index → field.
        raise exceptions.ValidationError(
            {
                "messages": {
                    str(error.index): {
                        error.field: [exceptions.ErrorDetail(error.message, error.code)]
                    }
                }
            }
        ) from None
    if outcome.status == ERASED_STATUS:
        raise IdempotencyKeyErased()
    body: dict[str, Any] = outcome.body
    return body | ({"replayed": True} if outcome.replayed else {})


@tool(title="Get the context for a conversation", read_only=True, idempotent=True)
def get_context(
    ctx: Context[Any, Any],
    session_key: SessionKey,
    max_tokens: Annotated[
        int | None,
        Field(
            ge=MAX_TOKENS_RANGE[0],
            le=MAX_TOKENS_RANGE[1],
            description="The most tokens the context may take (default: the tenant's policy).",
        ),
    ] = None,
    query: Annotated[
        str,
        Field(
            max_length=MAX_QUERY_CHARS,
            description="What the next answer is about; without it the latest user message.",
        ),
    ] = "",
) -> dict[str, Any]:
    """What to put in front of your next answer in this conversation: a `<memory>` block
    (markdown) with the person's memories, the relevant facts and notes, relevant earlier
    turns, the summary and the recent messages, within `max_tokens`."""
    who = caller(ctx, READ)
    fields = {"query": query} | ({"max_tokens": max_tokens} if max_tokens is not None else {})
    params = _validated(ContextQuerySerializer, fields)
    built = session_context_for_tenant(
        tenant=who.tenant,
        session_id=_session_id_for_key(tenant=who.tenant, session_key=session_key),
        max_tokens=params.get("max_tokens"),
        query=params.get("query", ""),
    )
    return {
        "session_key": session_key,
        "content": render_markdown(built.context),
        "tokens": built.context.markdown_tokens,
        "max_tokens": built.context.max_tokens,
        "memory_enabled": built.memory_enabled,
    }


# --- notes ----------------------------------------------------------------------------------


@tool(title="Save a note", read_only=False)
def save_note(
    ctx: Context[Any, Any],
    user_id: UserId,
    content: Annotated[str, Field(description="The note's text (markdown is fine).")],
    kind: Annotated[
        Literal["daily", "long_term"],
        Field(
            description=(
                "daily: appended to the day's note (a work log); long_term: replaces the "
                "person's whole long-term document, so send all of it."
            )
        ),
    ] = "daily",
    day: Annotated[
        dt.date | None,
        Field(description="daily only: the day (YYYY-MM-DD); today (UTC) when left out."),
    ] = None,
) -> dict[str, Any]:
    """Write to a person's notes: append to a daily note, or replace the long-term document.
    Earlier versions are kept. Read them back with recall_notes."""
    who = caller(ctx, WRITE)
    if kind == "long_term":
        if day is not None:
            raise _invalid("day", "A long-term note has no day.", "invalid")
        data = _validated(NoteLongTermInputSerializer, {"content": content})
        note = note_services.note_long_term_save(
            tenant=who.tenant,
            end_user=end_user_get_or_create(tenant=who.tenant, external_id=user_id),
            content=data["content"],
        )
        return {"kind": kind, "note": dict(NoteVersionOutputSerializer(note).data)}
    fields = {"content": content} | ({"day": day} if day is not None else {})
    data = _validated(NoteDailyInputSerializer, fields)
    end_user = end_user_get_or_create(tenant=who.tenant, external_id=user_id)
    note = note_services.note_daily_append(
        tenant=who.tenant, end_user=end_user, content=data["content"], day=data.get("day")
    )
    return {"kind": kind, "note": dict(NoteDailyOutputSerializer(note).data)}


@tool(title="Recall notes", read_only=True, idempotent=True)
def recall_notes(
    ctx: Context[Any, Any],
    user_id: UserId,
    days: Annotated[
        int,
        Field(
            ge=1, le=RECALL_DAYS_MAX, description="Daily notes of the last N days, today included."
        ),
    ] = RECALL_DAYS_DEFAULT,
    query: Annotated[
        str,
        Field(
            max_length=MAX_QUERY_CHARS, description="Keep only notes holding any of these words."
        ),
    ] = "",
) -> dict[str, Any]:
    """A person's long-term document and their recent daily notes, newest day first."""
    who = caller(ctx, READ)
    params = _validated(NoteRecallQuerySerializer, {"days": days, "q": query})
    end_user = end_user_get_for_tenant(tenant=who.tenant, external_id=user_id)
    found = note_recall(
        tenant=who.tenant,
        end_user=end_user,
        today=note_services.today_utc(),
        days=params["days"],
        query=params["q"],
    )
    return dict(
        NoteRecallOutputSerializer({"long_term": found.long_term, "daily": found.daily}).data
    )
