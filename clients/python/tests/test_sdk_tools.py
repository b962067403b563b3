"""The OpenAI tools and their resolver, fed recorded chat completions (tests/fixtures/openai_*.json,
in OpenAI's response format) and run against a live MemoryHub."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from memoryhub_client import AsyncMemoryHub, MemoryHub
from memoryhub_client.tools import (
    DESTRUCTIVE_TOOLS,
    TOOL_SPECS,
    aresolve_tool_calls,
    openai_tools,
    resolve_tool_calls,
)
from openai.types.chat import ChatCompletion

FIXTURES = Path(__file__).parent / "fixtures"
PERSON = "telegram:99"
SESSION_KEY = "telegram:99:main"
MCP_TOOL_NAMES = {
    "add_memory",
    "search_memories",
    "get_memories",
    "get_memory",
    "update_memory",
    "delete_memory",
    "delete_all_memories",
    "add_messages",
    "get_context",
    "save_note",
    "recall_notes",
}


def recorded(name: str) -> list[dict[str, Any]]:
    """The tool calls of a recorded chat completion, as OpenAI sent them."""
    completion = json.loads((FIXTURES / name).read_text())
    return completion["choices"][0]["message"]["tool_calls"]  # type: ignore[no-any-return]


def answers(messages: list[dict[str, Any]]) -> list[Any]:
    assert all(message["role"] == "tool" for message in messages)
    return [json.loads(message["content"]) for message in messages]


def resolve(hub: MemoryHub, fixture: str, **options: Any) -> list[Any]:
    options.setdefault("user_id", PERSON)
    options.setdefault("session_external_key", SESSION_KEY)
    messages = resolve_tool_calls(hub, recorded(fixture), **options)
    assert [m["tool_call_id"] for m in messages] == [c["id"] for c in recorded(fixture)]
    return answers(messages)


# --- the schemas ---------------------------------------------------------------------------------


def test_the_tools_have_the_mcp_servers_names_and_valid_schemas() -> None:
    tools = openai_tools()

    assert {tool["function"]["name"] for tool in tools} == MCP_TOOL_NAMES
    for tool in tools:
        assert tool["type"] == "function"
        assert tool["function"]["description"]
        jsonschema.Draft202012Validator.check_schema(tool["function"]["parameters"])
        assert "user_id" not in json.dumps(tool["function"]["parameters"])
    assert {"delete_memory", "delete_all_memories"} == DESTRUCTIVE_TOOLS
    assert {spec.name for spec in TOOL_SPECS if spec.read_only} == {
        "search_memories",
        "get_memories",
        "get_memory",
        "get_context",
        "recall_notes",
    }


def test_it_can_leave_destructive_tools_out_or_pick_some() -> None:
    safe = {tool["function"]["name"] for tool in openai_tools(include_destructive=False)}
    picked = openai_tools(names=["add_memory", "search_memories"])

    assert safe == MCP_TOOL_NAMES - DESTRUCTIVE_TOOLS
    assert [tool["function"]["name"] for tool in picked] == ["add_memory", "search_memories"]
    with pytest.raises(ValueError, match="unknown"):
        openai_tools(names=["add_memory", "drop_database"])


@pytest.mark.parametrize(
    "fixture",
    [
        "openai_remember.json",
        "openai_recall.json",
        "openai_change.json",
        "openai_forget_everything.json",
        "openai_conversation.json",
    ],
)
def test_the_recorded_calls_match_the_schemas(fixture: str) -> None:
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in openai_tools()}

    for call in recorded(fixture):
        arguments = json.loads(call["function"]["arguments"])
        jsonschema.validate(arguments, schemas[call["function"]["name"]])


# --- the resolver --------------------------------------------------------------------------------


def test_it_remembers_recalls_changes_and_forgets(hub: MemoryHub) -> None:
    remembered = resolve(hub, "openai_remember.json")
    hub.put_tenant_memory("house", content="The house rule: be kind.")
    recalled = resolve(hub, "openai_recall.json")
    refused = resolve(hub, "openai_change.json")
    kept = hub.list_memories(PERSON)
    changed = resolve(hub, "openai_change.json", allow_destructive=True)

    diet, city = remembered
    assert (diet["kind"], diet["created"]) == ("memory", True)
    assert diet["memory"]["key"] == "diet"
    assert diet["memory"]["pinned"] is True
    assert city["kind"] == "fact"
    assert city["fact"]["content"] == "The user lives in Lisbon."
    assert city["fact"]["tags"] == ["home"]
    search, everything, one = recalled
    assert [hit["fact"]["id"] for hit in search["facts"]] == [city["fact"]["id"]]
    assert search["memories"] == []  # "where does the user live" names no memory
    assert [m["key"] for m in everything["memories"]] == ["diet"]
    assert [f["id"] for f in everything["facts"]] == [city["fact"]["id"]]
    assert [m["key"] for m in everything["tenant_memories"]] == ["house"]
    assert one == {
        "kind": "memory",
        "memory": diet["memory"] | {"content": one["memory"]["content"]},
    }
    assert one["memory"]["content"] == "The user is vegetarian."
    assert refused[0]["memory"]["content"] == "The user is vegan."
    assert refused[0]["memory"]["version"] == 2
    assert refused[1] == {
        "error": {
            "code": "destructive_tool_refused",
            "message": "delete_memory is turned off for this assistant.",
        }
    }
    assert [memory.content for memory in kept] == ["The user is vegan."]
    assert changed[1] == {"deleted": {"kind": "memory", "key": "diet"}}
    assert hub.list_memories(PERSON) == []


def test_updating_a_fact_supersedes_it_and_deleting_one_needs_permission(hub: MemoryHub) -> None:
    old = hub.create_fact("The user drinks coffee.", user_id=PERSON, tags=["drink"])
    update = {
        "id": "call_u",
        "type": "function",
        "function": {
            "name": "update_memory",
            "arguments": json.dumps({"fact_id": old.id, "content": "The user drinks tea."}),
        },
    }

    (updated,) = answers(resolve_tool_calls(hub, [update], user_id=PERSON))
    new_id = updated["fact"]["id"]
    current = [fact.id for fact in hub.list_facts(user_id=PERSON)]
    delete = {
        **update,
        "function": {"name": "delete_memory", "arguments": json.dumps({"fact_id": new_id})},
    }
    (deleted,) = answers(resolve_tool_calls(hub, [delete], user_id=PERSON, allow_destructive=True))

    assert updated["replaces"] == old.id
    assert updated["fact"]["tags"] == ["drink"]
    assert hub.get_fact(old.id).valid_until is not None  # superseded, still in the history
    assert current == [new_id]
    assert deleted == {"deleted": {"kind": "fact", "id": new_id}}


def test_delete_all_memories_needs_permission_and_confirmation(hub: MemoryHub) -> None:
    resolve(hub, "openai_remember.json")

    without_permission = resolve(hub, "openai_forget_everything.json")
    unconfirmed, confirmed = resolve(hub, "openai_forget_everything.json", allow_destructive=True)

    assert {answer["error"]["code"] for answer in without_permission} == {
        "destructive_tool_refused"
    }
    assert unconfirmed["error"]["code"] == "confirm_required"
    assert confirmed == {"deleted": {"memories": 1, "facts": 1}}
    assert hub.list_memories(PERSON) == []
    assert hub.list_facts(user_id=PERSON).results == []


def test_it_keeps_the_conversation_and_notes_in_the_resolvers_session(hub: MemoryHub) -> None:
    added, daily, long_term, notes, context = resolve(hub, "openai_conversation.json")

    assert added == {
        "session_key": SESSION_KEY,
        "session_created": True,
        "stored": 2,
        "seqs": [1, 2],
    }
    assert daily["kind"] == "daily"
    assert daily["note"]["content"] == "Cooking class on Saturday."
    assert long_term["note"]["version"] == 1
    assert notes["long_term"]["content"] == "Vegetarian. Learning to cook."
    assert notes["daily"][0]["content"] == "Cooking class on Saturday."
    assert context["session_key"] == SESSION_KEY
    assert "cooking class" in context["content"]
    assert context["tokens"] <= context["max_tokens"] == 1000
    session = hub.list_sessions(user_id=PERSON).results[0]
    assert session.external_key == SESSION_KEY
    assert session.message_count == 2


def test_bad_calls_become_error_messages_not_exceptions(hub: MemoryHub) -> None:
    unknown, not_json, injected, both_ids, bad_key, missing = resolve(hub, "openai_bad_calls.json")

    assert unknown["error"]["code"] == "unknown_tool"
    assert not_json["error"]["code"] == "invalid_arguments"
    assert "not valid JSON" in not_json["error"]["message"]
    assert injected["error"] == {
        "code": "invalid_arguments",
        "message": "Unknown arguments: ['user_id'].",
    }
    assert both_ids["error"] == {
        "code": "invalid_arguments",
        "message": "Give either `key` or `fact_id`.",
    }
    assert bad_key["error"]["code"] == "validation_error"  # MemoryHub's own code
    assert bad_key["error"]["fields"]
    assert missing["error"]["message"] == "Missing arguments: ['query']."
    assert hub.list_facts().results == []  # nothing stored, for anyone


def test_a_model_cannot_reach_another_persons_memory(hub: MemoryHub) -> None:
    theirs = hub.create_fact("Bob's PIN is 1234", user_id="someone:else")
    hub.put_memory("someone:else", "pin", content="Bob's PIN is 1234.")
    their_fact = json.dumps({"fact_id": theirs.id})
    call = {"id": "call_x", "type": "function"}
    read = {**call, "function": {"name": "get_memory", "arguments": their_fact}}
    read_pin = {**call, "function": {"name": "get_memory", "arguments": '{"key": "pin"}'}}
    delete = {**call, "function": {"name": "delete_memory", "arguments": their_fact}}
    search = {**call, "function": {"name": "search_memories", "arguments": '{"query": "PIN"}'}}

    fact, pin, deleted, searched = answers(
        resolve_tool_calls(
            hub, [read, read_pin, delete, search], user_id=PERSON, allow_destructive=True
        )
    )

    assert fact["error"]["code"] == "not_found"
    assert pin["error"]["code"] == "not_found"
    assert deleted["error"]["code"] == "not_found"
    assert searched == {"facts": [], "memories": [], "messages": []}
    assert hub.get_fact(theirs.id).content == "Bob's PIN is 1234"


def test_it_accepts_the_openai_packages_objects(hub: MemoryHub) -> None:
    completion = ChatCompletion.model_validate(
        json.loads((FIXTURES / "openai_remember.json").read_text())
    )
    tool_calls = completion.choices[0].message.tool_calls

    messages = resolve_tool_calls(hub, tool_calls, user_id=PERSON)

    assert [m["tool_call_id"] for m in messages] == ["call_Rk1diet", "call_Rk2city"]
    assert hub.get_memory(PERSON, "diet").pinned is True


def test_session_tools_need_a_session(hub: MemoryHub) -> None:
    calls = recorded("openai_conversation.json")

    added = answers(resolve_tool_calls(hub, calls[:1], user_id=PERSON))[0]
    by_argument = {
        **calls[0],
        "function": {
            "name": "add_messages",
            "arguments": json.dumps(
                {"messages": [{"role": "user", "content": "hi"}], "session_key": "tg:99:side"}
            ),
        },
    }
    side = answers(resolve_tool_calls(hub, [by_argument], user_id=PERSON))[0]
    pinned = answers(
        resolve_tool_calls(hub, [by_argument], user_id=PERSON, session_external_key=SESSION_KEY)
    )[0]

    assert added["error"]["code"] == "session_required"
    assert side["stored"] == 1
    assert pinned["stored"] == 1
    keys = {s.external_key: s.message_count for s in hub.list_sessions(user_id=PERSON)}
    assert keys == {"tg:99:side": 1, SESSION_KEY: 1}  # the resolver's key won


def test_the_async_resolver_does_the_same(hub: MemoryHub, base_url: str, api_key: str) -> None:
    async def run() -> list[dict[str, Any]]:
        async with AsyncMemoryHub(base_url, api_key) as client:
            return await aresolve_tool_calls(
                client,
                recorded("openai_remember.json") + recorded("openai_bad_calls.json")[:1],
                user_id=PERSON,
            )

    diet, city, unknown = answers(asyncio.run(run()))

    assert diet["memory"]["key"] == "diet"
    assert city["kind"] == "fact"
    assert unknown["error"]["code"] == "unknown_tool"
    assert hub.get_memory(PERSON, "diet").content == "The user is vegetarian."
