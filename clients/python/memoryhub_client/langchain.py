"""A LangChain chat history kept in MemoryHub (install the `langchain` extra).

    history = MemoryHubChatMessageHistory("tg:42:main", client=hub, user_id="tg:42")
    history.add_messages([HumanMessage("Hi, I am Sachi."), AIMessage("Hello Sachi!")])
    history.messages  # [HumanMessage(...), AIMessage(...)], oldest first

One history is one MemoryHub session, found (or created, on first use) by its external key; the
messages are the session's, so MemoryHub's context, summaries, search and fact extraction see
them. The async methods (`aget_messages`, `aadd_messages`, `aclear`) go through
`AsyncMemoryHub`, not a thread pool.

Messages map to MemoryHub roles: human → user, ai → assistant (tool calls in OpenAI's format),
system → system, tool → tool (with its tool_call_id); a ChatMessage keeps its role when it is
one of these four. What a role cannot hold — content blocks, `additional_kwargs`, the message's
own id — travels in the stored message's `metadata` under `lc_…` keys, so it comes back as it
went in. `response_metadata` (token usage and the like) is not kept.

`clear()`: MemoryHub has no "delete a session's messages" call, so clearing deletes the session
— with its state, summaries, plans and task contexts — and the next use creates a new, empty
session under the same external key. Keep working state you want to outlive a clear elsewhere.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from memoryhub_client._client import AsyncMemoryHub, MemoryHub
from memoryhub_client.errors import NotFoundError
from memoryhub_client.types import JSON, Message

# The most messages one append takes (the server's MEMORYHUB_LIMITS default).
BATCH = 100

_ROLE_OF_TYPE = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_ROLES = frozenset(_ROLE_OF_TYPE.values())


def message_to_memoryhub(message: BaseMessage) -> JSON:
    """A LangChain message as a MemoryHub message (an OpenAI-style dict)."""
    if isinstance(message, ChatMessage):
        role = message.role if message.role in _ROLES else None
    else:
        role = _ROLE_OF_TYPE.get(message.type)
    if role is None:
        raise ValueError(
            f"MemoryHub stores system, user, assistant and tool messages, not {message.type!r}"
        )
    metadata: JSON = {}
    if isinstance(message.content, str):
        content = message.content
    else:
        content = _text_of(message.content)
        metadata["lc_content"] = message.content
    out: JSON = {"role": role, "content": content}
    if message.name:
        out["name"] = message.name
    if isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
        if message.status != "success":
            metadata["lc_status"] = message.status
    if isinstance(message, AIMessage) and message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.get("id") or f"call_{index}",
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["args"])},
            }
            for index, call in enumerate(message.tool_calls)
        ]
    extra = {key: value for key, value in message.additional_kwargs.items() if key != "tool_calls"}
    if extra:
        metadata["lc_additional_kwargs"] = extra
    if message.id:
        metadata["lc_id"] = message.id
    if metadata:
        json.dumps(metadata)  # fail here, with the message at hand, on what JSON cannot hold
        out["metadata"] = metadata
    return out


def message_from_memoryhub(message: Message) -> BaseMessage:
    """A stored MemoryHub message as the LangChain message it was (or would have been)."""
    metadata = message.metadata
    content: Any = metadata.get("lc_content", message.content)
    kwargs: dict[str, Any] = {
        "content": content,
        "id": metadata.get("lc_id") or str(message.id),
        "additional_kwargs": dict(metadata.get("lc_additional_kwargs") or {}),
    }
    if message.name:
        kwargs["name"] = message.name
    if message.role == "user":
        return HumanMessage(**kwargs)
    if message.role == "system":
        return SystemMessage(**kwargs)
    if message.role == "tool":
        status = metadata.get("lc_status", "success")
        return ToolMessage(tool_call_id=message.tool_call_id, status=status, **kwargs)
    return AIMessage(
        tool_calls=[
            {
                "name": call["function"]["name"],
                "args": _arguments(call["function"].get("arguments")),
                "id": call.get("id"),
                "type": "tool_call",
            }
            for call in message.tool_calls or []
        ],
        **kwargs,
    )


def _text_of(blocks: list[Any]) -> str:
    parts = [
        block if isinstance(block, str) else str(block.get("text", ""))
        for block in blocks
        if isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
    ]
    return "\n".join(part for part in parts if part)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw or "{}")
    except ValueError:
        return {"__raw__": raw}
    return parsed if isinstance(parsed, dict) else {"__value__": parsed}


class MemoryHubChatMessageHistory(BaseChatMessageHistory):
    """The messages of the MemoryHub session holding `external_key` (created on first use, for
    `user_id` and `agent_id`). Pass `client` and/or `async_client`; a missing one is made from
    the other's base URL, key, timeout and retries (or from `base_url`/`api_key`, or the
    MEMORYHUB_URL/MEMORYHUB_API_KEY environment, when neither is given)."""

    def __init__(
        self,
        external_key: str,
        *,
        client: MemoryHub | None = None,
        async_client: AsyncMemoryHub | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
    ) -> None:
        if not external_key:
            raise ValueError("external_key is required")
        self.external_key = external_key
        self.user_id = user_id
        self.agent_id = agent_id
        self._client = client
        self._async_client = async_client
        self._base_url = base_url
        self._api_key = api_key
        self._session_id: str | None = None

    # --- clients and the session ---------------------------------------------------------------

    @property
    def client(self) -> MemoryHub:
        if self._client is None:
            source = self._async_client
            self._client = (
                MemoryHub(
                    source.base_url,
                    source.api_key,
                    timeout=source.timeout,
                    max_retries=source.max_retries,
                )
                if source is not None
                else MemoryHub(self._base_url, self._api_key)
            )
        return self._client

    @property
    def async_client(self) -> AsyncMemoryHub:
        if self._async_client is None:
            source = self._client
            self._async_client = (
                AsyncMemoryHub(
                    source.base_url,
                    source.api_key,
                    timeout=source.timeout,
                    max_retries=source.max_retries,
                )
                if source is not None
                else AsyncMemoryHub(self._base_url, self._api_key)
            )
        return self._async_client

    def _session_fields(self) -> dict[str, Any]:
        return {
            "external_key": self.external_key,
            "user_id": self.user_id,
            "agent_id": self.agent_id,
        }

    @property
    def session_id(self) -> str:
        """The session's id (found or created by its external key on first use)."""
        if self._session_id is None:
            self._session_id = self.client.create_session(**self._session_fields()).id
        return self._session_id

    async def asession_id(self) -> str:
        if self._session_id is None:
            session = await self.async_client.create_session(**self._session_fields())
            self._session_id = session.id
        return self._session_id

    # --- BaseChatMessageHistory ----------------------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """Every message of the session, oldest first."""
        return [message_from_memoryhub(m) for m in self.client.iter_messages(self.session_id)]

    async def aget_messages(self) -> list[BaseMessage]:
        session_id = await self.asession_id()
        return [
            message_from_memoryhub(message)
            async for message in self.async_client.iter_messages(session_id)
        ]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append in order, 100 per request, each request with its own Idempotency-Key (a
        retried request is stored once). When the agent's memory policy has memory off, the
        server accepts and drops them, as it does for any bot."""
        payload = [message_to_memoryhub(message) for message in messages]
        for start in range(0, len(payload), BATCH):
            self.client.append_messages(self.session_id, payload[start : start + BATCH])

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        payload = [message_to_memoryhub(message) for message in messages]
        session_id = await self.asession_id()
        for start in range(0, len(payload), BATCH):
            await self.async_client.append_messages(session_id, payload[start : start + BATCH])

    def clear(self) -> None:
        """Delete the session (see the module's docstring); the next use starts a new one."""
        if self._session_id is None:
            self._session_id = self.client.create_session(**self._session_fields()).id
        with contextlib.suppress(NotFoundError):  # already gone: cleared either way
            self.client.delete_session(self._session_id)
        self._session_id = None

    async def aclear(self) -> None:
        session_id = await self.asession_id()
        with contextlib.suppress(NotFoundError):
            await self.async_client.delete_session(session_id)
        self._session_id = None
