"""The MCP server at /mcp/, through the official MCP client over streamable HTTP against a live
MemoryHub: the tools it lists, a conversation a bot would have, and that a key reaches its own
tenant only, within its scopes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from memoryhub.accounts.models import ApiKey, AuditEvent, Tenant
from memoryhub.mcp.server import DESTRUCTIVE_TOOLS
from tests.mcp.helpers import call, call_error, connected

READ_ONLY_TOOLS = {"search_memories", "get_memories", "get_memory", "get_context", "recall_notes"}
WRITE_TOOLS = {"add_memory", "update_memory", "add_messages", "save_note"}
ALL_TOOLS = READ_ONLY_TOOLS | WRITE_TOOLS | DESTRUCTIVE_TOOLS


def test_it_lists_every_tool_with_a_schema_a_description_and_hints(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str, destructive_tools: None
) -> None:
    secret = make_key(tenant)

    async def tools() -> dict[str, Any]:
        async with connected(mcp_url, secret) as session:
            return {tool.name: tool for tool in (await session.list_tools()).tools}

    listed = asyncio.run(tools())

    assert set(listed) == ALL_TOOLS
    for name, tool in listed.items():
        assert tool.description, name
        assert tool.input_schema["type"] == "object", name
        assert tool.annotations is not None, name
        assert tool.annotations.read_only_hint is (name in READ_ONLY_TOOLS), name
        assert tool.annotations.destructive_hint is (name in DESTRUCTIVE_TOOLS), name
    add_memory = listed["add_memory"].input_schema
    assert add_memory["required"] == ["content"]
    assert "reuse" in add_memory["properties"]["key"]["description"].lower()
    assert (
        "same id" in listed["search_memories"].input_schema["properties"]["user_id"]["description"]
    )
    assert listed["delete_all_memories"].input_schema["required"] == ["user_id", "confirm"]
    assert listed["add_messages"].input_schema["required"] == ["session_key", "messages"]


def test_a_bot_remembers_finds_uses_and_forgets_through_mcp(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str, destructive_tools: None
) -> None:
    secret = make_key(tenant)

    async def conversation() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connected(mcp_url, secret) as session:
            seen["appended"] = await call(
                session,
                "add_messages",
                session_key="telegram:chat:42",
                user_id="telegram:ada",
                messages=[
                    {"role": "user", "content": "I only drink green tea, never coffee."},
                    {"role": "assistant", "content": "Noted: green tea it is."},
                ],
            )
            seen["memory"] = await call(
                session,
                "add_memory",
                user_id="telegram:ada",
                key="favourite_drink",
                content="Green tea, no sugar",
            )
            seen["fact"] = await call(
                session, "add_memory", user_id="telegram:ada", content="Ada lives in Lisbon"
            )
            seen["found"] = await call(
                session, "search_memories", user_id="telegram:ada", query="green tea"
            )
            seen["lisbon"] = await call(
                session, "search_memories", user_id="telegram:ada", query="where does she live"
            )
            seen["context"] = await call(
                session, "get_context", session_key="telegram:chat:42", max_tokens=2000
            )
            seen["deleted"] = await call(
                session, "delete_memory", user_id="telegram:ada", key="favourite_drink"
            )
            seen["gone"] = await call_error(
                session, "get_memory", user_id="telegram:ada", key="favourite_drink"
            )
        return seen

    seen = asyncio.run(conversation())

    appended = seen["appended"]
    assert appended["session_created"] is True
    assert [message["seq"] for message in appended["messages"]] == [1, 2]
    assert seen["memory"]["memory"]["key"] == "favourite_drink"
    assert seen["fact"]["kind"] == "fact"
    found = seen["found"]
    assert [memory["key"] for memory in found["memories"]] == ["favourite_drink"]
    assert found["messages"][0]["session_key"] == "telegram:chat:42"
    assert "green tea" in found["messages"][0]["message"]["content"]
    assert seen["fact"]["fact"]["id"] in [hit["fact"]["id"] for hit in seen["lisbon"]["facts"]]
    context = seen["context"]
    assert "Green tea, no sugar" in context["content"]
    assert "I only drink green tea" in context["content"]
    assert 0 < context["tokens"] <= context["max_tokens"] == 2000
    assert seen["deleted"] == {
        "deleted": {"kind": "memory", "key": "favourite_drink", "user_id": "telegram:ada"}
    }
    assert seen["gone"]["code"] == "not_found"
    # Audited as the REST API audits: the key, by its prefix.
    event = AuditEvent.objects.get(object_type="user_memory")
    assert event.object_id == "telegram:ada:favourite_drink"
    assert event.actor == f"api_key:{ApiKey.objects.get(tenant=tenant).prefix}"


def test_an_outsiders_key_sees_nothing_of_another_tenant(
    tenant: Tenant,
    other_tenant: Tenant,
    make_key: Callable[..., str],
    mcp_url: str,
    destructive_tools: None,
) -> None:
    owner_secret, outsider_secret = make_key(tenant), make_key(other_tenant)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connected(mcp_url, owner_secret) as owner:
            await call(
                owner,
                "add_messages",
                session_key="chat:1",
                user_id="ada",
                messages=[{"role": "user", "content": "My cat is called Pixel."}],
            )
            await call(owner, "add_memory", user_id="ada", key="cat", content="A cat called Pixel")
            fact = await call(owner, "add_memory", user_id="ada", content="Ada has a cat")
        async with connected(mcp_url, outsider_secret) as outsider:
            seen["search"] = await call(outsider, "search_memories", user_id="ada", query="cat")
            seen["get_memory"] = await call_error(outsider, "get_memory", user_id="ada", key="cat")
            seen["get_fact"] = await call_error(outsider, "get_memory", fact_id=fact["fact"]["id"])
            seen["get_memories"] = await call_error(outsider, "get_memories", user_id="ada")
            seen["context"] = await call_error(outsider, "get_context", session_key="chat:1")
            seen["delete"] = await call_error(outsider, "delete_memory", fact_id=fact["fact"]["id"])
            seen["delete_all"] = await call(
                outsider, "delete_all_memories", user_id="ada", confirm=True
            )
        async with connected(mcp_url, owner_secret) as owner:
            seen["still_there"] = await call(owner, "get_memories", user_id="ada")
        return seen

    seen = asyncio.run(scenario())

    assert seen["search"] == {"facts": [], "memories": [], "messages": []}
    for refused in ("get_memory", "get_fact", "get_memories", "context", "delete"):
        assert seen[refused]["code"] == "not_found", refused
    assert seen["delete_all"] == {"deleted": {"memories": 0, "facts": 0}}
    assert [memory["key"] for memory in seen["still_there"]["memories"]] == ["cat"]
    assert len(seen["still_there"]["facts"]) == 1


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer mh_nope.wrong"}, {"Authorization": "Basic dXNlcjpwdw=="}],
    ids=["no key", "a wrong key", "not a bearer"],
)
def test_a_missing_or_bad_key_is_401_before_any_mcp_message(
    mcp_url: str, transactional_db: None, headers: dict[str, str]
) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }

    response = httpx2.post(
        mcp_url,
        json=initialize,
        headers={**headers, "Accept": "application/json, text/event-stream"},
    )

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] in ("not_authenticated", "authentication_failed")


def test_destructive_tools_are_hidden_and_refused_unless_the_operator_turns_them_on(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str
) -> None:
    secret = make_key(tenant)

    async def scenario() -> tuple[set[str], dict[str, Any], dict[str, Any]]:
        async with connected(mcp_url, secret) as session:
            listed = {tool.name for tool in (await session.list_tools()).tools}
            await call(session, "add_memory", user_id="ada", key="cat", content="Pixel")
            refused = await call_error(session, "delete_memory", user_id="ada", key="cat")
            kept = await call(session, "get_memory", user_id="ada", key="cat")
        return listed, refused, kept

    listed, refused, kept = asyncio.run(scenario())

    assert listed == ALL_TOOLS - DESTRUCTIVE_TOOLS
    assert refused["code"] == "tool_disabled"
    assert kept["memory"]["content"] == "Pixel"


def test_scopes_are_the_api_keys_and_a_missing_one_is_a_tool_error(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str, destructive_tools: None
) -> None:
    reader_secret = make_key(tenant, scopes=["read"])
    writer_secret = make_key(tenant, scopes=["read", "write"])

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connected(mcp_url, reader_secret) as reader:
            seen["read"] = await call(reader, "search_memories", user_id="ada", query="cat")
            seen["write"] = await call_error(
                reader, "add_memory", user_id="ada", key="cat", content="Pixel"
            )
        async with connected(mcp_url, writer_secret) as writer:
            seen["global"] = await call_error(writer, "add_memory", key="tone", content="Be brief")
            seen["purge"] = await call_error(
                writer, "delete_all_memories", user_id="ada", confirm=True
            )
        return seen

    seen = asyncio.run(scenario())

    assert seen["read"] == {"facts": [], "memories": [], "messages": []}
    for refused in ("write", "global", "purge"):
        assert seen[refused]["code"] == "insufficient_scope", refused
    assert "global-memory" in seen["global"]["message"]
    assert "purge" in seen["purge"]["message"]


def test_invalid_arguments_are_validation_errors_naming_the_field(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str, destructive_tools: None
) -> None:
    secret = make_key(tenant)

    async def scenario() -> dict[str, Any]:
        async with connected(mcp_url, secret) as session:
            return {
                "key": await call_error(
                    session, "add_memory", user_id="ada", key="Not A Key", content="x"
                ),
                "blank": await call_error(session, "add_memory", user_id="ada", content="  "),
                "schema": await call_error(
                    session, "search_memories", user_id="ada", query="cat", limit=0
                ),
                "confirm": await call_error(
                    session, "delete_all_memories", user_id="ada", confirm=False
                ),
                "one_of": await call_error(session, "get_memory", user_id="ada"),
            }

    errors = asyncio.run(scenario())

    for name, error in errors.items():
        assert error["code"] == "validation_error", name
    assert errors["key"]["fields"]["key"][0]["code"] == "invalid_key"
    assert errors["blank"]["fields"]["content"][0]["code"] == "blank"
    assert list(errors["schema"]["fields"]) == ["limit"]
    assert errors["confirm"]["fields"]["confirm"][0]["code"] == "confirm_required"
    assert errors["one_of"]["fields"]["key"][0]["code"] == "one_of"


def test_memories_are_updated_and_forgotten_all_at_once_with_confirmation(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str, destructive_tools: None
) -> None:
    secret = make_key(tenant)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connected(mcp_url, secret) as session:
            await call(session, "add_memory", user_id="ada", key="city", content="Lisbon")
            fact = await call(session, "add_memory", user_id="ada", content="Ada plays chess")
            seen["memory"] = await call(
                session, "update_memory", user_id="ada", key="city", content="Porto"
            )
            seen["fact"] = await call(
                session,
                "update_memory",
                fact_id=fact["fact"]["id"],
                content="Ada plays chess and go",
            )
            seen["before"] = await call(session, "get_memories", user_id="ada")
            seen["deleted"] = await call(
                session, "delete_all_memories", user_id="ada", confirm=True
            )
            seen["after"] = await call(session, "get_memories", user_id="ada")
        return seen

    seen = asyncio.run(scenario())

    assert seen["memory"]["memory"]["content"] == "Porto"
    assert seen["memory"]["memory"]["version"] == 2
    assert seen["fact"]["replaces"] != seen["fact"]["fact"]["id"]
    assert [fact["content"] for fact in seen["before"]["facts"]] == ["Ada plays chess and go"]
    # The superseded fact goes too.
    assert seen["deleted"] == {"deleted": {"memories": 1, "facts": 2}}
    assert seen["after"]["memories"] == seen["after"]["facts"] == []


def test_notes_are_saved_and_recalled(
    tenant: Tenant, make_key: Callable[..., str], mcp_url: str
) -> None:
    secret = make_key(tenant)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connected(mcp_url, secret) as session:
            await call(session, "save_note", user_id="ada", content="- fixed the tests")
            await call(
                session,
                "save_note",
                user_id="ada",
                kind="long_term",
                content="Prefers Python. Always type hints.",
            )
            recalled = await call(session, "recall_notes", user_id="ada")
            filtered = await call(session, "recall_notes", user_id="ada", query="tests")
        return recalled, filtered

    recalled, filtered = asyncio.run(scenario())

    assert recalled["long_term"]["content"] == "Prefers Python. Always type hints."
    assert [note["content"] for note in recalled["daily"]] == ["- fixed the tests"]
    assert filtered["long_term"] is None
    assert len(filtered["daily"]) == 1
