"""The official MCP client, as the tests use it: connected with a bearer key, calling tools."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def connected(url: str, secret: str) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session that sends `secret` as its bearer key."""
    headers = {"Authorization": f"Bearer {secret}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, name: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result, asserting it is not an error."""
    result = await session.call_tool(name, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def call_error(session: ClientSession, name: str, **arguments: Any) -> dict[str, Any]:
    """A tool error's body (`code`, `message`, `fields`), asserting the call was refused."""
    result = await session.call_tool(name, arguments)
    assert result.is_error, result.structured_content
    assert result.structured_content is not None, result.content
    error: dict[str, Any] = result.structured_content["error"]
    return error
