"""MCP with a person-bound token: the tools act for the token's person and see nothing of
anyone else's, whatever user_id a model puts in the arguments."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from django.conf import settings

from memoryhub.accounts.models import Actor, EndUser, Tenant
from memoryhub.core.rls import rls_scope
from memoryhub.credentials.services import person_token_mint
from tests.mcp.helpers import call, call_error, connected


def _token_for(tenant: Tenant, user_id: str) -> str:
    # A thread of its own: scoped to the tenant as a request with its key would be.
    with rls_scope(tenant_id=tenant.pk):
        end_user, _ = EndUser.objects.get_or_create(tenant=tenant, external_id=user_id)
        return person_token_mint(
            tenant=tenant,
            end_user=end_user,
            scopes=["read", "write", "purge"],
            ttl_seconds=settings.MEMORYHUB_PERSON_TOKEN_TTL_SECONDS,
            actor=Actor.system("test"),
        ).token


def test_a_person_token_reaches_only_its_person(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str, destructive_tools: None
) -> None:
    owner_secret = make_key(tenant)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connected(mcp_url, owner_secret) as owner:
            for who in ("ada", "bob"):
                await call(
                    owner,
                    "add_messages",
                    session_key=f"{who}:chat",
                    user_id=who,
                    messages=[{"role": "user", "content": f"{who} has a cat called Pixel."}],
                )
                await call(owner, "add_memory", user_id=who, key="cat", content=f"{who}'s cat")
        token = await asyncio.to_thread(_token_for, tenant, "ada")
        async with connected(mcp_url, token) as ada:
            seen["own"] = await call(ada, "get_memories", user_id="ada")
            seen["search_bob"] = await call(ada, "search_memories", user_id="bob", query="cat")
            seen["get_bob"] = await call_error(ada, "get_memories", user_id="bob")
            seen["write_bob"] = await call_error(
                ada, "add_memory", user_id="bob", key="x", content="planted"
            )
            seen["context_bob"] = await call_error(ada, "get_context", session_key="bob:chat")
            seen["delete_bob"] = await call(ada, "delete_all_memories", user_id="bob", confirm=True)
            seen["messages_bob"] = await call_error(
                ada,
                "add_messages",
                session_key="bob:chat",
                user_id="bob",
                messages=[{"role": "user", "content": "planted"}],
            )
        async with connected(mcp_url, owner_secret) as owner:
            seen["bob_after"] = await call(owner, "get_memories", user_id="bob")
        return seen

    seen = asyncio.run(scenario())
    assert [memory["content"] for memory in seen["own"]["memories"]] == ["ada's cat"]
    assert "bob" not in str(seen["search_bob"])
    for refused in ("get_bob", "write_bob", "context_bob", "messages_bob"):
        assert seen[refused]["code"] == "not_found", (refused, seen[refused])
    assert seen["delete_bob"] == {"deleted": {"memories": 0, "facts": 0}}
    assert [memory["content"] for memory in seen["bob_after"]["memories"]] == ["bob's cat"]
