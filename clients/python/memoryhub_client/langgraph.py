"""A LangGraph store over MemoryHub's explicit memories (install the `langgraph` extra).

    store = MemoryHubStore(hub)
    store.put(("memories", "tg:42"), "diet", {"content": "Vegetarian."})
    store.get(("memories", "tg:42"), "diet").value  # {"content": "Vegetarian."}
    graph = builder.compile(store=store)

Namespaces: `(*prefix, user_id)` is that person's memories and `prefix` alone the tenant-wide
ones (`prefix` is `("memories",)` unless you pass another); nothing else can be stored. Keys are
MemoryHub memory keys: `^[a-z][a-z0-9_]*$`, at most 64 characters, not `system_…`/`internal_…`
(another key is a ValidationError from the server). A value `{"content": "<text>"}` is stored as
the memory's text, so MemoryHub's context shows it as it is; any other dict is stored as JSON.
A memory written through the API as plain text reads back as `{"content": text}`.

Search lists the memories of the namespaces under the prefix (for the bare prefix, the
tenant-wide ones and every person's), keeps those equal to `filter` on each given key, and with a
`query` ranks them by shared words (`score`); MemoryHub's own ranked search covers facts and
messages (`search_facts`, `search_messages`), not memories. `index` and `ttl` are ignored; use a
memory's `expires_at` through the client for expiry.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from memoryhub_client._bridge import AwaitableHub, run_sync
from memoryhub_client._client import AsyncMemoryHub, MemoryHub
from memoryhub_client.errors import NotFoundError
from memoryhub_client.types import Memory

DEFAULT_PREFIX = ("memories",)


def value_to_content(value: Mapping[str, Any]) -> str:
    if set(value) == {"content"} and isinstance(value["content"], str):
        return value["content"]
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def content_to_value(content: str) -> dict[str, Any]:
    if content.startswith("{"):
        try:
            parsed = json.loads(content)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"content": content}


class MemoryHubStore(BaseStore):
    """LangGraph's BaseStore over MemoryHub memories; `batch` uses `client`, `abatch`
    `async_client` (a missing one is made from the other's base URL and key)."""

    def __init__(
        self,
        client: MemoryHub | None = None,
        *,
        async_client: AsyncMemoryHub | None = None,
        prefix: tuple[str, ...] = DEFAULT_PREFIX,
    ) -> None:
        if client is None and async_client is None:
            raise ValueError("pass client, async_client or both")
        self._client = client
        self._async_client = async_client
        self.prefix = tuple(prefix)

    @property
    def client(self) -> MemoryHub:
        if self._client is None:
            source = self._async_client
            if source is None:  # unreachable: __init__ wants one of the two
                raise ValueError("no client")
            self._client = MemoryHub(source.base_url, source.api_key, timeout=source.timeout)
        return self._client

    @property
    def async_client(self) -> AsyncMemoryHub:
        if self._async_client is None:
            source = self.client
            self._async_client = AsyncMemoryHub(
                source.base_url, source.api_key, timeout=source.timeout
            )
        return self._async_client

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        hub = AwaitableHub(self.client)
        return [run_sync(self._run(hub, op)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return [await self._run(self.async_client, op) for op in ops]

    # --- one operation, on either client ---------------------------------------------------------

    async def _run(self, hub: Any, op: Op) -> Result:
        if isinstance(op, GetOp):
            return await self._get(hub, op)
        if isinstance(op, PutOp):
            await self._put(hub, op)
            return None
        if isinstance(op, SearchOp):
            return await self._search(hub, op)
        if isinstance(op, ListNamespacesOp):
            return await self._list_namespaces(hub, op)
        raise TypeError(f"unknown store operation: {op!r}")

    def _user_of(self, namespace: tuple[str, ...]) -> str | None:
        """The person a namespace names (None: the tenant-wide memories)."""
        namespace = tuple(namespace)
        if namespace == self.prefix:
            return None
        if len(namespace) == len(self.prefix) + 1 and namespace[:-1] == self.prefix:
            return namespace[-1]
        raise ValueError(
            f"MemoryHubStore keeps {(*self.prefix, '<user_id>')} (a person's memories) and "
            f"{self.prefix} (the tenant's), not {namespace}"
        )

    def _namespace_of(self, user_id: str | None) -> tuple[str, ...]:
        return self.prefix if user_id is None else (*self.prefix, user_id)

    def _item(self, memory: Memory, namespace: tuple[str, ...]) -> Item:
        return Item(
            value=content_to_value(memory.content),
            key=memory.key,
            namespace=namespace,
            created_at=memory.created_at,
            updated_at=memory.updated_at,
        )

    async def _get(self, hub: Any, op: GetOp) -> Item | None:
        user_id = self._user_of(op.namespace)
        try:
            memory = await (
                hub.get_tenant_memory(op.key)
                if user_id is None
                else hub.get_memory(user_id, op.key)
            )
        except NotFoundError:
            return None
        return self._item(memory, tuple(op.namespace))

    async def _put(self, hub: Any, op: PutOp) -> None:
        user_id = self._user_of(op.namespace)
        if op.value is None:
            # Deleting what is not there leaves it not there.
            with contextlib.suppress(NotFoundError):
                await (
                    hub.delete_tenant_memory(op.key)
                    if user_id is None
                    else hub.delete_memory(user_id, op.key)
                )
            return
        content = value_to_content(op.value)
        if user_id is None:
            await hub.put_tenant_memory(op.key, content=content)
        else:
            await hub.put_memory(user_id, op.key, content=content)

    async def _people(self, hub: Any) -> list[str]:
        people: list[str] = []
        cursor: str | None = None
        while True:
            page = await hub.list_users(limit=200, cursor=cursor)
            people.extend(user.user_id for user in page.results)
            cursor = page.next_cursor
            if cursor is None:
                return people

    async def _search(self, hub: Any, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        if prefix == self.prefix[: len(prefix)]:
            owners: list[str | None] = [None, *await self._people(hub)]
        elif len(prefix) == len(self.prefix) + 1 and prefix[:-1] == self.prefix:
            owners = [prefix[-1]]
        else:
            return []
        items: list[Item] = []
        for owner in owners:
            memories = await (
                hub.list_tenant_memories() if owner is None else hub.list_memories(owner)
            )
            namespace = self._namespace_of(owner)
            items.extend(self._item(memory, namespace) for memory in memories)
        if op.filter:
            wanted = op.filter
            items = [
                item
                for item in items
                if all(item.value.get(key) == value for key, value in wanted.items())
            ]
        words = _words(op.query or "")
        scored = [
            (_overlap(words, item.value) if words else None, index, item)
            for index, item in enumerate(items)
        ]
        if words:
            scored.sort(key=lambda entry: (-(entry[0] or 0.0), entry[1]))
        return [
            SearchItem(
                namespace=item.namespace,
                key=item.key,
                value=item.value,
                created_at=item.created_at,
                updated_at=item.updated_at,
                score=score,
            )
            for score, _, item in scored[op.offset : op.offset + op.limit]
        ]

    async def _list_namespaces(self, hub: Any, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = [self.prefix, *(self._namespace_of(user) for user in await self._people(hub))]
        for condition in op.match_conditions or ():
            namespaces = [ns for ns in namespaces if _matches(condition, ns)]
        if op.max_depth is not None:
            namespaces = list(dict.fromkeys(ns[: op.max_depth] for ns in namespaces))
        return namespaces[op.offset : op.offset + op.limit]


def _words(text: str) -> set[str]:
    return {word for word in re.findall(r"\w+", text.lower()) if len(word) >= 3}


def _overlap(words: set[str], value: dict[str, Any]) -> float:
    found = _words(json.dumps(value, ensure_ascii=False))
    return len(words & found) / len(words)


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(path) > len(namespace):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(want in ("*", have) for want, have in zip(path, part, strict=True))
