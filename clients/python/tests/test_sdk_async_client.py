"""`AsyncMemoryHub` against a live MemoryHub: the same methods as `MemoryHub`, awaited. Each test
runs its coroutine with asyncio.run inside a sync test (the live server is a thread)."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from memoryhub_client import (
    AsyncMemoryHub,
    ConflictError,
    MemoryHub,
    NotFoundError,
    PreconditionFailedError,
    ValidationError,
)

T = TypeVar("T")
PERSON = "slack:U123"


@pytest.fixture
def run(base_url: str, api_key: str) -> Callable[[Callable[[AsyncMemoryHub], Awaitable[T]]], T]:
    def run(scenario: Callable[[AsyncMemoryHub], Awaitable[T]]) -> T:
        async def main() -> T:
            async with AsyncMemoryHub(base_url, api_key) as hub:
                return await scenario(hub)

        return asyncio.run(main())

    return run


def public_methods(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, callable)
        if not name.startswith("_") and name not in {"close", "aclose"}
    }


def test_both_clients_have_the_same_methods_with_the_same_arguments() -> None:
    sync, async_ = public_methods(MemoryHub), public_methods(AsyncMemoryHub)

    assert sync.keys() == async_.keys()
    for name in sync:
        sync_args = inspect.signature(sync[name]).parameters
        assert sync_args == inspect.signature(async_[name]).parameters, name
    assert len(sync) > 60


def test_sessions_messages_and_state(run: Any) -> None:
    async def scenario(hub: AsyncMemoryHub) -> None:
        session = await hub.create_session(user_id=PERSON, external_key="slack:C1:T1")
        again = await hub.create_session(user_id=PERSON, external_key="slack:C1:T1")
        assert (session.created, again.created, again.id) == (True, False, session.id)
        await hub.append_message(session.id, role="user", content="Hello from async")
        await hub.append_messages(session.id, [{"role": "assistant", "content": "Hi!"}])
        assert [m.seq async for m in hub.iter_messages(session.id)] == [1, 2]
        page = await hub.list_messages(session.id, last=1)
        assert page.results[0].content == "Hi!"
        await hub.set_state(session.id, "step", 3)
        assert (await hub.get_state(session.id, "step")).value == 3
        assert (await hub.list_state(session.id)).as_dict() == {"step": 3}
        await hub.delete_state(session.id, "step")
        updated = await hub.update_session(session.id, metadata={"x": 1})
        assert updated.metadata == {"x": 1}
        assert [s.id for s in (await hub.list_sessions(user_id=PERSON)).results] == [session.id]
        await hub.delete_session(session.id)
        with pytest.raises(NotFoundError):
            await hub.get_session(session.id)

    run(scenario)


def test_async_iterators_follow_the_cursors(run: Any) -> None:
    async def scenario(hub: AsyncMemoryHub) -> None:
        for n in range(5):
            await hub.create_session(user_id=f"person:{n}")
        assert len([s async for s in hub.iter_sessions(limit=2)]) == 5
        assert {u.user_id async for u in hub.iter_users(limit=2)} == {
            f"person:{n}" for n in range(5)
        }

    run(scenario)


def test_context_summary_and_people(run: Any) -> None:
    async def scenario(hub: AsyncMemoryHub) -> None:
        session = await hub.create_session(user_id=PERSON)
        await hub.put_memory(PERSON, "city", content="Lives in Porto.")
        await hub.append_message(session.id, role="user", content="Hi")
        messages = await hub.context_messages(session.id, user_message="Where do I live?")
        assert "Porto" in messages[0]["content"]
        assert messages[-2:] == [
            {"role": "user", "content": "Hi"},
            {"role": "user", "content": "Where do I live?"},
        ]
        context = await hub.get_context(session.id, max_tokens=500, query="city")
        assert context.tokens <= 500
        assert context.sections
        await hub.set_summary(session.id, "Said hi.")
        assert (await hub.get_summary(session.id)).text == "Said hi."
        assert await hub.request_summary(session.id)
        assert (await hub.get_user(PERSON)).counts
        assert (await hub.export_user(PERSON))["records"]
        assert (await hub.erase_user(PERSON))["sessions"] == 1

    run(scenario)


def test_memories_facts_and_search(run: Any) -> None:
    async def scenario(hub: AsyncMemoryHub) -> None:
        await hub.put_memory(PERSON, "pet", content="Has a cat.")
        await hub.put_memory(PERSON, "pet", content="Has two cats.")
        assert len((await hub.memory_versions(PERSON, "pet")).versions) >= 1
        assert [m.key for m in await hub.list_memories(PERSON)] == ["pet"]
        assert (await hub.get_memory(PERSON, "pet")).version == 2
        await hub.put_tenant_memory("tone", content="Friendly.")
        assert (await hub.get_tenant_memory("tone")).content == "Friendly."
        assert [m.key for m in await hub.list_tenant_memories()] == ["tone"]
        assert (await hub.tenant_memory_versions("tone")).current.version == 1
        await hub.delete_tenant_memory("tone")
        await hub.delete_memory(PERSON, "pet")
        with pytest.raises(ValidationError):
            await hub.put_memory(PERSON, "system_x", content="reserved")

        fact = await hub.create_fact("User plays the cello", user_id=PERSON, tags=["music"])
        hits = await hub.search_facts("which instrument does the user play", user_id=PERSON)
        assert hits.items[0].id == fact.id
        assert [f.id async for f in hub.iter_facts(user_id=PERSON)] == [fact.id]
        assert (await hub.list_facts(tag="music")).results[0].id == fact.id
        changed = await hub.update_fact(fact.id, valid_until=dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
        assert changed.valid_until == dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
        assert (await hub.get_fact(fact.id)).content == "User plays the cello"
        await hub.delete_fact(fact.id)

        session = await hub.create_session(user_id=PERSON)
        await hub.append_message(session.id, role="user", content="My cello lesson is Monday.")
        found = await hub.search_messages("cello lesson", user_id=PERSON, mode="lexical")
        assert found.items[0].session_id == session.id

    run(scenario)


def test_notes(run: Any) -> None:
    async def scenario(hub: AsyncMemoryHub) -> None:
        await hub.put_long_term_note(PERSON, "Plays the cello.")
        assert (await hub.get_long_term_note(PERSON)).content == "Plays the cello."
        assert [n.version async for n in hub.iter_long_term_note_history(PERSON)] == [1]
        assert (await hub.long_term_note_history(PERSON)).results[0].version == 1
        daily = await hub.add_daily_note(PERSON, "Practised scales.")
        assert daily.day is not None
        assert (await hub.get_daily_note(PERSON, daily.day)).content == "Practised scales."
        assert (await hub.recall_notes(PERSON)).daily[0].content == "Practised scales."
        assert await hub.clear_notes(PERSON) == 2

    run(scenario)


def test_plans_task_contexts_and_purge(run: Any) -> None:
    async def scenario(hub: AsyncMemoryHub) -> None:
        plan = await hub.create_plan("p-async", goal_event="g", user_id=PERSON)
        moved = await hub.update_plan("p-async", state={"a": 1}, if_match=plan.etag)
        with pytest.raises(PreconditionFailedError):
            await hub.update_plan("p-async", state={"a": 2}, if_match=plan.etag)
        replaced = await hub.replace_plan(
            "p-async", if_match=moved.etag, goal_event="g2", status="running"
        )
        assert replaced.goal_event == "g2"
        assert [p.plan_id async for p in hub.iter_plans(status="active")] == ["p-async"]
        assert (await hub.list_plans()).results[0].etag == replaced.etag
        assert (await hub.get_plan("p-async")).etag == replaced.etag

        task = await hub.create_task_context(
            "t-async", event_type="e", plan_id="p-async", sub_tasks=["s-1"]
        )
        with pytest.raises(ConflictError):
            await hub.create_task_context("t-other", event_type="e", sub_tasks=["s-1"])
        assert (await hub.task_context_by_subtask("s-1")).task_id == "t-async"
        patched = await hub.update_task_context("t-async", remove_sub_tasks=["s-1"])
        assert patched.removed_sub_tasks == ["s-1"]
        assert patched.sub_tasks == []
        put = await hub.replace_task_context("t-async", if_match=patched.etag, event_type="e2")
        assert put.etag not in {task.etag, patched.etag}
        assert (await hub.get_task_context("t-async")).event_type == "e2"
        assert [t.task_id async for t in hub.iter_task_contexts()] == ["t-async"]
        assert len((await hub.list_task_contexts()).results) == 1
        await hub.delete_task_context("t-async")
        await hub.delete_plan("p-async")

        counted = await hub.purge("user", user_id=PERSON, dry_run=True)
        assert counted.dry_run
        assert counted.scope == "user"

    run(scenario)
