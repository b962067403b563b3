"""`MemoryHub` (sync) against a live MemoryHub: every resource round trip, the error classes per
status, cursor iteration over several pages, and a context ready to send."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from memoryhub_client import (
    AuthenticationError,
    ConflictError,
    IdempotencyKeyReusedError,
    MemoryHub,
    NotFoundError,
    PermissionDeniedError,
    PreconditionFailedError,
    ValidationError,
)

from memoryhub.accounts.models import Tenant

PERSON = "whatsapp:+4912345"


def test_it_creates_a_session_or_gets_the_one_holding_the_external_key(hub: MemoryHub) -> None:
    first = hub.create_session(user_id=PERSON, agent_id="chat", external_key="wa:chat:1")
    again = hub.create_session(user_id=PERSON, agent_id="chat", external_key="wa:chat:1")

    assert first.created is True
    assert again.created is False
    assert again.id == first.id
    assert hub.get_session(first.id).external_key == "wa:chat:1"


def test_it_updates_lists_and_deletes_sessions(hub: MemoryHub) -> None:
    session = hub.create_session(user_id=PERSON, external_key="k1", metadata={"a": 1})

    changed = hub.update_session(session.id, agent_id="support", metadata={"b": 2})
    cleared = hub.update_session(session.id, external_key=None)

    assert (changed.agent_id, changed.metadata) == ("support", {"b": 2})
    assert cleared.external_key is None
    assert cleared.agent_id == "support"  # not given: left as it was
    assert [s.id for s in hub.list_sessions(user_id=PERSON)] == [session.id]
    hub.delete_session(session.id)
    with pytest.raises(NotFoundError):
        hub.get_session(session.id)


def test_it_iterates_over_more_than_one_page(hub: MemoryHub) -> None:
    made = {hub.create_session(user_id=f"user:{n}").id for n in range(5)}

    first = hub.list_sessions(limit=2)
    every = list(hub.iter_sessions(limit=2))

    assert len(first) == 2
    assert first.next_cursor
    assert {s.id for s in every} == made
    assert len(every) == 5
    assert {u.user_id for u in hub.iter_users(limit=2)} == {f"user:{n}" for n in range(5)}


def test_it_appends_one_message_or_a_batch_and_reads_them_back(hub: MemoryHub) -> None:
    session = hub.create_session(user_id=PERSON)
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}

    one = hub.append_message(session.id, role="user", content="Hi, I am Sachi.")
    batch = hub.append_messages(
        session.id,
        [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": "42", "tool_call_id": "call_1"},
            {"role": "assistant", "content": "Hello Sachi!", "name": "bot"},
        ],
    )

    assert [m.seq for m in one.messages] == [1]
    assert [m.seq for m in batch.messages] == [2, 3, 4]
    page = hub.list_messages(session.id, last=2)
    assert [m.content for m in page.results] == ["42", "Hello Sachi!"]
    assert page.last_seq == 4
    after = hub.list_messages(session.id, after_seq=1, limit=1)
    assert after.results[0].tool_calls == [call]
    assert after.has_more
    assert [m.seq for m in hub.iter_messages(session.id)] == [1, 2, 3, 4]
    assert after.results[0].to_openai() == {
        "role": "assistant",
        "content": "",
        "tool_calls": [call],
    }


def test_it_keeps_working_state(hub: MemoryHub) -> None:
    session = hub.create_session(user_id=PERSON)

    written = hub.set_state(session.id, "working_memory", {"goal": "book a table", "step": 2})
    hub.set_state(session.id, "lang", "de")

    assert written.stored
    assert written.evicted == []
    assert hub.get_state(session.id, "working_memory").value == {"goal": "book a table", "step": 2}
    assert hub.list_state(session.id).as_dict() == {
        "working_memory": {"goal": "book a table", "step": 2},
        "lang": "de",
    }
    hub.delete_state(session.id, "lang")
    with pytest.raises(NotFoundError):
        hub.get_state(session.id, "lang")


def test_it_returns_the_context_and_messages_ready_to_send(hub: MemoryHub) -> None:
    session = hub.create_session(user_id=PERSON)
    hub.put_memory(PERSON, "name", content="The user's name is Sachi.")
    hub.append_messages(
        session.id,
        [
            {"role": "user", "content": "I love aubergines."},
            {"role": "assistant", "content": "Noted!"},
        ],
    )

    context = hub.get_context(session.id, max_tokens=1000)
    messages = hub.context_messages(
        session.id, system="You are a cook.", user_message="What do I love?", max_tokens=1000
    )

    assert context.format == "markdown"
    assert "Sachi" in (context.content or "")
    assert context.tokens <= 1000
    assert {s.name for s in context.sections} >= {"messages"}
    assert context.section("messages") is not None
    assert messages[0] == {"role": "system", "content": "You are a cook."}
    assert messages[1]["role"] == "system"
    assert "Sachi" in messages[1]["content"]
    assert messages[2:] == [
        {"role": "user", "content": "I love aubergines."},
        {"role": "assistant", "content": "Noted!"},
        {"role": "user", "content": "What do I love?"},
    ]


def test_it_sets_gets_and_requests_summaries(hub: MemoryHub) -> None:
    session = hub.create_session(user_id=PERSON)
    hub.append_message(session.id, role="user", content="Hello")
    with pytest.raises(NotFoundError):
        hub.get_summary(session.id)

    hub.set_summary(session.id, "They said hello.")

    assert hub.get_summary(session.id).text == "They said hello."
    assert hub.get_summary(session.id).through_seq == 1
    assert hub.request_summary(session.id)


def test_it_reads_exports_and_erases_a_person(hub: MemoryHub) -> None:
    session = hub.create_session(user_id=PERSON)
    hub.append_message(session.id, role="user", content="Hello")

    person = hub.get_user(PERSON)
    export = hub.export_user(PERSON)
    erased = hub.erase_user(PERSON)

    assert person.user_id == PERSON
    assert person.counts
    assert person.counts["sessions"] == 1
    assert export["format"] == "memoryhub.export"
    assert export["records"]
    assert erased["sessions"] == 1
    with pytest.raises(NotFoundError):
        hub.get_user(PERSON)


def test_it_keeps_personal_and_tenant_wide_memories_with_versions(hub: MemoryHub) -> None:
    created = hub.put_memory(PERSON, "food", content="Likes aubergines.", pinned=True)
    changed = hub.put_memory(PERSON, "food", content="Likes courgettes.")
    tenant_wide = hub.put_tenant_memory("house_rules", content="Be kind.")

    assert created.created is True
    assert changed.created is False
    assert (changed.version, changed.user_id) == (2, PERSON)
    assert [m.key for m in hub.list_memories(PERSON)] == ["food"]
    assert hub.get_memory(PERSON, "food").content == "Likes courgettes."
    versions = hub.memory_versions(PERSON, "food")
    assert versions.current.version == 2
    assert [v.content for v in versions.versions][-1] == "Likes aubergines."
    assert tenant_wide.user_id is None
    assert [m.key for m in hub.list_tenant_memories()] == ["house_rules"]
    assert hub.get_tenant_memory("house_rules").content == "Be kind."
    assert hub.tenant_memory_versions("house_rules").current.key == "house_rules"
    hub.delete_memory(PERSON, "food")
    hub.delete_tenant_memory("house_rules")
    assert hub.list_memories(PERSON) == []
    assert hub.list_tenant_memories() == []


def test_it_stores_searches_updates_and_deletes_facts(hub: MemoryHub) -> None:
    fact = hub.create_fact("User prefers dark mode", user_id=PERSON, tags=["ui"])
    same = hub.create_fact("User prefers dark mode", user_id=PERSON)
    other = hub.create_fact("User lives in Lisbon", user_id=PERSON, metadata={"src": "chat"})

    assert fact.created is True
    assert same.created is False
    assert same.id == fact.id
    found = hub.search_facts("does the user have a preference for dark mode?", user_id=PERSON)
    assert found.items[0].id == fact.id
    assert found.mode in {"hybrid", "lexical", "semantic"}
    lexical = hub.search_facts("dark mode", user_id=PERSON, mode="lexical")
    assert lexical.mode == "lexical"
    assert lexical.hits[0].lexical_score is not None
    assert [f.id for f in hub.list_facts(user_id=PERSON, tag="ui")] == [fact.id]
    assert [f.id for f in hub.list_facts(user_id=PERSON, metadata={"src": "chat"})] == [other.id]
    assert {f.id for f in hub.iter_facts(user_id=PERSON, limit=1)} == {fact.id, other.id}
    updated = hub.update_fact(fact.id, content="User prefers light mode", tags=["ui", "theme"])
    assert (updated.content, updated.tags) == ("User prefers light mode", ["ui", "theme"])
    assert hub.get_fact(fact.id).content == "User prefers light mode"
    hub.delete_fact(fact.id)
    with pytest.raises(NotFoundError):
        hub.get_fact(fact.id)


def test_it_searches_past_messages(hub: MemoryHub) -> None:
    session = hub.create_session(user_id=PERSON)
    hub.append_messages(
        session.id,
        [
            {"role": "user", "content": "We should grill aubergines on Sunday."},
            {"role": "assistant", "content": "Sunday it is.", "name": "chef"},
        ],
    )

    hits = hub.search_messages("aubergines", user_id=PERSON, mode="lexical")
    window = hub.search_messages(
        "aubergines",
        user_id=PERSON,
        speaker="user",
        since=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1),
        until=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1),
    )

    assert hits.items[0].content == "We should grill aubergines on Sunday."
    assert hits.items[0].session_id == session.id
    assert hits.items[0].seq == 1
    assert window.items[0].seq == 1


def test_it_keeps_notes(hub: MemoryHub) -> None:
    hub.put_long_term_note(PERSON, "Sachi is vegetarian.")
    hub.put_long_term_note(PERSON, "Sachi is vegetarian and cooks on Sundays.")
    today = dt.datetime.now(dt.UTC).date()
    hub.add_daily_note(PERSON, "Asked about aubergines.")
    daily = hub.add_daily_note(PERSON, "Booked a table.", day=today)

    assert hub.get_long_term_note(PERSON).version == 2
    assert [n.version for n in hub.iter_long_term_note_history(PERSON, limit=1)] == [2, 1]
    assert daily.day == today
    assert daily.content == "Asked about aubergines.\nBooked a table."
    day = hub.get_daily_note(PERSON, today)
    assert day.content == daily.content
    assert len(day.history) == 2
    recalled = hub.recall_notes(PERSON, days=7)
    assert recalled.long_term
    assert recalled.long_term.content.endswith("cooks on Sundays.")
    assert [n.day for n in recalled.daily] == [today]
    assert hub.recall_notes(PERSON, q="aubergines").daily[0].day == today
    assert hub.clear_notes(PERSON) == 2
    assert hub.get_long_term_note(PERSON).content == ""


def test_it_runs_plans_with_etags(hub: MemoryHub) -> None:
    session = hub.create_session(user_id=PERSON)
    plan = hub.create_plan(
        "plan-1", goal_event="trip.planned", session_id=session.id, state={"step": 1}
    )

    moved = hub.update_plan("plan-1", state={"step": 2}, if_match=plan.etag)
    with pytest.raises(PreconditionFailedError) as stale:
        hub.update_plan("plan-1", state={"step": 3}, if_match=plan.etag)
    replaced = hub.replace_plan(
        "plan-1", if_match=moved.etag, goal_event="trip.planned", status="running", state={}
    )
    done = hub.update_plan("plan-1", status="completed")
    with pytest.raises(ConflictError) as finished:
        hub.update_plan("plan-1", status="running")

    assert plan.user_id == PERSON
    assert plan.status == "running"
    assert moved.state == {"step": 2}
    assert moved.etag != plan.etag
    assert stale.value.status == 412
    assert stale.value.code == "precondition_failed"
    assert replaced.state == {}
    assert finished.value.code == "invalid_status_transition"
    assert [p.plan_id for p in hub.list_plans(user_id=PERSON)] == ["plan-1"]
    assert [p.plan_id for p in hub.iter_plans(status="completed", limit=1)] == ["plan-1"]
    assert hub.get_plan("plan-1").etag == done.etag
    hub.delete_plan("plan-1", if_match=done.etag)
    with pytest.raises(NotFoundError):
        hub.get_plan("plan-1")


def test_it_runs_task_contexts_and_finds_them_by_sub_task(hub: MemoryHub) -> None:
    hub.create_plan("plan-2", goal_event="research", user_id=PERSON)
    task = hub.create_task_context(
        "task-123",
        event_type="research.requested",
        response_event="research.completed",
        data={"query": "AI trends"},
        plan_id="plan-2",
    )

    added = hub.update_task_context("task-123", add_sub_tasks=["sub-1", "sub-2"])
    waiting = hub.task_context_by_subtask("sub-1")
    first = hub.update_task_context(
        "task-123", remove_sub_tasks=["sub-1"], state={"results": {"sub-1": "done"}}
    )
    last = hub.update_task_context("task-123", remove_sub_tasks=["sub-2"])
    with pytest.raises(PreconditionFailedError) as missing:
        hub.replace_task_context("task-123", if_match="", event_type="x")
    replaced = hub.replace_task_context(
        "task-123", if_match="*", event_type="research.again", plan_id="plan-2"
    )

    assert task.etag
    assert task.sub_tasks == []
    assert added.added_sub_tasks == ["sub-1", "sub-2"]
    assert waiting.task_id == "task-123"
    assert first.sub_tasks == ["sub-2"]
    assert first.state == {"results": {"sub-1": "done"}}
    assert last.removed_sub_tasks == ["sub-2"]
    assert last.sub_tasks == []
    assert missing.value.status == 428
    assert replaced.event_type == "research.again"
    assert [t.task_id for t in hub.list_task_contexts(plan_id="plan-2")] == ["task-123"]
    assert [t.task_id for t in hub.iter_task_contexts(limit=1)] == ["task-123"]
    hub.delete_task_context("task-123", if_match=replaced.etag)
    with pytest.raises(NotFoundError):
        hub.get_task_context("task-123")


def test_it_purges_with_a_dry_run_first(hub: MemoryHub) -> None:
    session = hub.create_session(user_id=PERSON)
    hub.append_message(session.id, role="user", content="Hello")

    counted = hub.purge("session", session_id=session.id, dry_run=True)
    purged = hub.purge("session", session_id=session.id)

    assert counted.dry_run
    assert counted.counts["messages"] == 1
    assert not purged.dry_run
    assert purged.total == counted.total
    with pytest.raises(NotFoundError):
        hub.get_session(session.id)


# --- errors --------------------------------------------------------------------------------------


def test_it_raises_a_validation_error_with_its_fields(hub: MemoryHub) -> None:
    session = hub.create_session(user_id=PERSON)

    with pytest.raises(ValidationError) as bad:
        hub.append_message(session.id, role="robot", content="Hi")  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as bad_key:
        hub.put_memory(PERSON, "Not A Key", content="x")

    assert bad.value.status == 400
    assert bad.value.code == "validation_error"
    assert bad.value.fields["role"][0]["code"] == "invalid_choice"
    assert "key" in bad_key.value.fields or bad_key.value.fields


def test_it_raises_authentication_errors(
    base_url: str, tenant: Tenant, make_key: Callable[..., str]
) -> None:
    with MemoryHub(base_url, "mh_wrong.key") as wrong, pytest.raises(AuthenticationError) as no:
        wrong.list_sessions()
    reader = MemoryHub(base_url, make_key(tenant, scopes=["read"]))
    with pytest.raises(PermissionDeniedError) as scope:
        reader.create_session(user_id=PERSON)

    assert no.value.status == 401
    assert scope.value.status == 403
    assert scope.value.code == "insufficient_scope"
    assert isinstance(scope.value, AuthenticationError)


def test_it_raises_not_found_for_another_tenants_session(
    hub: MemoryHub, base_url: str, make_key: Callable[..., str]
) -> None:
    session = hub.create_session(user_id=PERSON)
    outsider_tenant = Tenant.objects.create(slug="outsider", name="Outsider")
    outsider = MemoryHub(base_url, make_key(outsider_tenant))

    with pytest.raises(NotFoundError) as foreign:
        outsider.get_session(session.id)

    assert foreign.value.status == 404
    assert foreign.value.code == "not_found"


def test_it_raises_conflicts(hub: MemoryHub) -> None:
    hub.create_session(user_id=PERSON, external_key="shared")
    session = hub.create_session(user_id=PERSON)

    with pytest.raises(ConflictError) as taken:
        hub.create_session(user_id="someone:else", external_key="shared")
    hub.append_message(session.id, role="user", content="a", idempotency_key="turn-1")
    with pytest.raises(IdempotencyKeyReusedError) as reused:
        hub.append_message(session.id, role="user", content="b", idempotency_key="turn-1")

    assert taken.value.status == 409
    assert reused.value.status == 422
    assert reused.value.code == "idempotency_key_reused"
    assert isinstance(reused.value, ConflictError)


def test_it_replays_an_append_sent_twice_with_the_same_key(hub: MemoryHub) -> None:
    session = hub.create_session(user_id=PERSON)

    first = hub.append_message(session.id, role="user", content="Hi", idempotency_key="m-1")
    again = hub.append_message(session.id, role="user", content="Hi", idempotency_key="m-1")

    assert not first.replayed
    assert again.replayed
    assert again.messages[0].id == first.messages[0].id
    assert hub.get_session(session.id).message_count == 1
