"""The LangGraph store over MemoryHub memories, against a live MemoryHub: get/put/delete,
search, namespaces, the async batch, and a compiled graph that reads and writes through it."""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from memoryhub_client import AsyncMemoryHub, MemoryHub, ValidationError
from memoryhub_client.langgraph import MemoryHubStore

PERSON = "discord:5"
MINE = ("memories", PERSON)


@pytest.fixture
def store(hub: MemoryHub) -> MemoryHubStore:
    return MemoryHubStore(hub)


def test_it_puts_gets_and_deletes_a_persons_memories(store: MemoryHubStore, hub: MemoryHub) -> None:
    store.put(MINE, "diet", {"content": "Vegetarian."})
    store.put(MINE, "trip", {"city": "Lisbon", "nights": 3})

    diet, trip = store.get(MINE, "diet"), store.get(MINE, "trip")

    assert diet is not None
    assert (diet.value, diet.namespace, diet.key) == ({"content": "Vegetarian."}, MINE, "diet")
    assert trip is not None
    assert trip.value == {"city": "Lisbon", "nights": 3}
    # Stored as MemoryHub memories: plain text where the value is just content.
    assert hub.get_memory(PERSON, "diet").content == "Vegetarian."
    store.delete(MINE, "diet")
    store.delete(MINE, "diet")  # gone already: still fine
    assert store.get(MINE, "diet") is None
    assert store.get(MINE, "never") is None


def test_the_bare_prefix_is_the_tenant_wide_memories(store: MemoryHubStore, hub: MemoryHub) -> None:
    store.put(("memories",), "tone", {"content": "Be friendly."})

    assert hub.get_tenant_memory("tone").content == "Be friendly."
    with pytest.raises(ValueError, match="not"):
        store.put(("elsewhere", PERSON), "x", {"content": "y"})
    with pytest.raises(ValidationError):
        store.put(MINE, "Not-A-Key", {"content": "y"})


def test_it_searches_with_filters_and_a_query(store: MemoryHubStore) -> None:
    store.put(MINE, "diet", {"content": "Vegetarian, loves aubergines.", "kind": "food"})
    store.put(MINE, "drink", {"content": "Drinks green tea.", "kind": "food"})
    store.put(MINE, "city", {"content": "Lives in Lisbon.", "kind": "place"})
    store.put(("memories", "someone:else"), "city", {"content": "Lives in Oslo."})

    food = store.search(MINE, filter={"kind": "food"})
    ranked = store.search(MINE, query="green tea please", limit=2)
    everyone = store.search(("memories",), query="lives")

    assert {item.key for item in food} == {"diet", "drink"}
    assert ranked[0].key == "drink"
    assert ranked[0].score is not None
    assert ranked[0].score > 0
    assert len(ranked) == 2
    assert {(item.namespace, item.key) for item in everyone[:2]} == {
        (MINE, "city"),
        (("memories", "someone:else"), "city"),
    }


def test_it_lists_namespaces(store: MemoryHubStore) -> None:
    store.put(MINE, "a", {"content": "x"})
    store.put(("memories", "someone:else"), "a", {"content": "y"})

    every = store.list_namespaces()
    only_mine = store.list_namespaces(suffix=(PERSON,))

    assert set(every) == {("memories",), MINE, ("memories", "someone:else")}
    assert only_mine == [MINE]
    assert store.list_namespaces(max_depth=1) == [("memories",)]


def test_the_async_batch_goes_through_the_async_client(base_url: str, api_key: str) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with AsyncMemoryHub(base_url, api_key) as client:
            store = MemoryHubStore(async_client=client)
            await store.aput(MINE, "pet", {"content": "Has a cat."})
            found = await store.aget(MINE, "pet")
            searched = await store.asearch(MINE, query="cat")
            await store.adelete(MINE, "pet")
            return found, searched

    found, searched = asyncio.run(scenario())

    assert found.value == {"content": "Has a cat."}
    assert [item.key for item in searched] == ["pet"]


class State(TypedDict):
    user_id: str
    said: str
    reply: str


def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    namespace = ("memories", state["user_id"])
    if state["said"].startswith("I am "):
        store.put(namespace, "name", {"content": state["said"].removeprefix("I am ")})
        return {"reply": "Nice to meet you!"}
    known = store.get(namespace, "name")
    return {"reply": f"You are {known.value['content']}." if known else "Who are you?"}


def test_a_graph_remembers_across_runs_through_the_store(store: MemoryHubStore) -> None:
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    graph = builder.compile(store=store)

    first = graph.invoke({"user_id": PERSON, "said": "I am Sachi", "reply": ""})
    second = graph.invoke({"user_id": PERSON, "said": "Who am I?", "reply": ""})

    assert first["reply"] == "Nice to meet you!"
    assert second["reply"] == "You are Sachi."
