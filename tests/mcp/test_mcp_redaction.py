"""Redaction through MCP (issue 17): a refusal is the API's 422 body as a tool error, and
search_memories masks what was stored before the policy was switched on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from memoryhub.accounts.models import MemoryPolicy, RedactionMode, Tenant
from sessions_app.models import Message
from tests.mcp.helpers import call, call_error, connected

KEY = "mh_AbCdEf12.abcdefghijklmnopqrstuvwxyz012345"


def test_a_refused_message_is_a_tool_error_naming_field_and_class(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str
) -> None:
    MemoryPolicy.objects.create(tenant=tenant, redaction_mode=RedactionMode.REFUSE)
    secret = make_key(tenant)

    async def refused() -> dict[str, Any]:
        async with connected(mcp_url, secret) as session:
            return await call_error(
                session,
                "add_messages",
                session_key="telegram:chat:1",
                user_id="telegram:ada",
                messages=[{"role": "user", "content": f"my key is {KEY}"}],
            )

    error = asyncio.run(refused())

    assert error["code"] == "redacted_content_refused"
    assert error["classes"] == ["secret"]
    assert KEY not in str(error)
    assert not Message.objects.exists()


def test_search_memories_masks_what_was_stored_before(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str
) -> None:
    secret = make_key(tenant)

    async def store() -> None:
        async with connected(mcp_url, secret) as session:
            await call(
                session,
                "add_memory",
                user_id="telegram:ada",
                key="contact",
                content="Ada's mail is ada@example.org",
            )

    async def search() -> dict[str, Any]:
        async with connected(mcp_url, secret) as session:
            return await call(session, "search_memories", user_id="telegram:ada", query="mail")

    asyncio.run(store())
    MemoryPolicy.objects.create(tenant=tenant, redaction_mode=RedactionMode.MASK, redact_email=True)
    found = asyncio.run(search())

    contents = [row["content"] for row in found["memories"]]
    assert contents == ["Ada's mail is [redacted:email]"]
