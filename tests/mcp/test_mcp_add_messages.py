"""add_messages over MCP, through the official client: it requests the messages' embedding as
the REST append does, and an `idempotency_key` makes a retried call store nothing twice, with the
REST API's rules (the same key with other arguments is refused, a key whose write was deleted
since answers `idempotency_key_erased`, a key belongs to its tenant)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from memoryhub.accounts.models import Actor, Tenant
from sessions_app import services
from sessions_app.models import Message, MessageVector, Session
from tests.mcp.helpers import call, call_error, connected

TURNS = [
    {"role": "user", "content": "We adopted a puppy, a golden retriever called Biscuit."},
    {"role": "assistant", "content": "Biscuit is a lovely name."},
]


def add(session_key: str = "chat:1", **arguments: Any) -> dict[str, Any]:
    return {"session_key": session_key, "user_id": "ada", "messages": TURNS, **arguments}


def test_messages_added_over_mcp_get_their_vectors(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str
) -> None:
    secret = make_key(tenant)

    async def scenario() -> dict[str, Any]:
        async with connected(mcp_url, secret) as session:
            return await call(session, "add_messages", **add())

    added = asyncio.run(scenario())

    assert len(added["messages"]) == 2
    # Tests run the worker eagerly after the response, as for a REST append.
    assert MessageVector.objects.filter(tenant=tenant).count() == 2
    assert Session.objects.get(tenant=tenant).embedding_requested_at is None


def test_a_retried_call_with_its_idempotency_key_stores_nothing_twice(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str
) -> None:
    secret = make_key(tenant)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connected(mcp_url, secret) as session:
            seen["first"] = await call(session, "add_messages", **add(idempotency_key="turn-1"))
            seen["retry"] = await call(session, "add_messages", **add(idempotency_key="turn-1"))
            seen["other"] = await call_error(
                session,
                "add_messages",
                **add(idempotency_key="turn-1", messages=TURNS[:1]),
            )
            seen["bad"] = await call_error(
                session, "add_messages", **add(idempotency_key="has a space")
            )
            seen["new"] = await call(session, "add_messages", **add(idempotency_key="turn-2"))
        return seen

    seen = asyncio.run(scenario())

    first, retry = seen["first"], seen["retry"]
    assert first["session_created"] is True
    assert "replayed" not in first
    assert retry["replayed"] is True
    assert retry["messages"] == first["messages"]
    assert retry["session_created"] is True  # the first call's answer, as it was
    assert seen["other"]["code"] == "idempotency_key_reused"
    assert seen["bad"]["code"] == "validation_error"
    assert "idempotency_key" in seen["bad"]["fields"]
    # The retry and the refusals stored nothing; a new key appends again.
    assert [m["seq"] for m in seen["new"]["messages"]] == [3, 4]
    assert Message.objects.filter(tenant=tenant).count() == 4


def test_a_key_whose_messages_were_deleted_since_writes_nothing_again(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str
) -> None:
    secret = make_key(tenant)

    async def first() -> dict[str, Any]:
        async with connected(mcp_url, secret) as session:
            return await call(session, "add_messages", **add(idempotency_key="turn-1"))

    async def retry() -> dict[str, Any]:
        async with connected(mcp_url, secret) as session:
            return await call_error(session, "add_messages", **add(idempotency_key="turn-1"))

    asyncio.run(first())
    services.session_delete(session=Session.objects.get(tenant=tenant), actor=Actor.system("t"))

    refused = asyncio.run(retry())

    assert refused["code"] == "idempotency_key_erased"
    assert not Session.objects.filter(tenant=tenant).exists()
    assert not Message.objects.filter(tenant=tenant).exists()


def test_an_outsiders_same_key_is_its_own_and_replays_nothing_of_another_tenant(
    tenant: Tenant, other_tenant: Tenant, make_key: Callable[..., str], mcp_url: str
) -> None:
    owner_secret, outsider_secret = make_key(tenant), make_key(other_tenant)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with (
            connected(mcp_url, owner_secret) as owner,
            connected(mcp_url, outsider_secret) as outsider,
        ):
            mine = await call(owner, "add_messages", **add(idempotency_key="turn-1"))
            theirs = await call(outsider, "add_messages", **add(idempotency_key="turn-1"))
        return mine, theirs

    mine, theirs = asyncio.run(scenario())

    assert "replayed" not in theirs
    assert theirs["session_created"] is True
    assert {m["id"] for m in theirs["messages"]}.isdisjoint({m["id"] for m in mine["messages"]})
    assert Message.objects.filter(tenant=other_tenant).count() == 2
    assert Message.objects.filter(tenant=tenant).count() == 2
