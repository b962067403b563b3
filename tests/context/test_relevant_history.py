"""Relevant history in the context: the person's earlier turns that match the question, dated,
with the best hits' neighbours, within the section's share and the whole budget; never from the
verbatim tail, another person or another tenant; off with the policy's switch."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryhub.accounts.models import Actor, AuditEvent, MemoryPolicy
from memoryhub.context import (
    AssembledContext,
    Budget,
    ContextInputs,
    FactItem,
    HistoryHit,
    HistoryTurn,
    MemoryItem,
    MessageItem,
    assemble_context,
    render,
    render_markdown,
    render_messages,
)
from memoryhub.core.tokens import count_tokens
from sessions_app import recall, services
from sessions_app.models import Message
from sessions_app.services import MessageInput
from tests.context.test_assemble import (
    TODAY,
    _budgets,
    _inputs,
    assert_within_budget,
    expected_labels,
    reported_labels,
    words,
)

USER = "whatsapp:+4912345"
MAY_8 = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.UTC)
MAY_25 = dt.datetime(2023, 5, 25, 9, 0, tzinfo=dt.UTC)


# -- the pure part: assemble and render ----------------------------------------------------------


def turn(
    id_: int, content: str, *, seq: int | None = None, session: str = "s1", when=MAY_8
) -> HistoryTurn:
    return HistoryTurn(
        id=id_,
        session_id=session,
        seq=id_ if seq is None else seq,
        speaker="Caroline" if id_ % 2 else "Melanie",
        content=content,
        created_at=when,
    )


def hit(item: HistoryTurn, *neighbours: HistoryTurn) -> HistoryHit:
    return HistoryHit(turn=item, score=1.0, neighbours=neighbours)


def assemble(
    inputs: ContextInputs, budget: Budget | None = None, counter: Callable[[str], int] = words
) -> AssembledContext:
    return assemble_context(inputs=inputs, budget=budget or Budget(), count_tokens=counter)


def report(context: AssembledContext, name: str):
    (found,) = [section for section in context.sections if section.name == name]
    return found


def test_a_hit_is_shown_dated_with_its_neighbours_as_one_block() -> None:
    question = turn(4, "How did the support group go?")
    answer = turn(5, "It was so powerful, I felt accepted.")
    after = turn(6, "That's wonderful!")
    inputs = ContextInputs(today=TODAY, history=[hit(answer, question, after)])

    context = assemble(inputs)

    assert render_markdown(context) == (
        f"{render.OPEN}\n## Relevant History\n"
        "- [8 May 2023] Melanie: How did the support group go?\n"
        "  Caroline: It was so powerful, I felt accepted.\n"
        "  Melanie: That's wonderful!\n"
        f"{render.CLOSE}"
    )
    section = report(context, "history")
    assert (section.included, section.dropped) == (["history:4", "history:5", "history:6"], [])
    assert context.history == [question, answer, after]
    assert_within_budget(context, words)


def test_blocks_are_in_time_order_and_adjacent_hits_merge() -> None:
    later = turn(20, "I signed up for the pottery class.", session="s2", when=MAY_25)
    first = turn(3, "We went camping in the mountains.")
    second = turn(4, "Camping sounds lovely!", when=MAY_8 + dt.timedelta(days=1))
    inputs = ContextInputs(today=TODAY, history=[hit(later), hit(first), hit(second)])

    context = assemble(inputs)

    assert render_markdown(context).split("## Relevant History\n")[1] == (
        "- [8 May 2023] Caroline: We went camping in the mountains.\n"
        "  [9 May 2023] Melanie: Camping sounds lovely!\n"
        "- [25 May 2023] Melanie: I signed up for the pottery class.\n"
        f"{render.CLOSE}"
    )
    assert report(context, "history").included == ["history:3", "history:4", "history:20"]
    assert_within_budget(context, words)


def test_only_hits_given_neighbours_show_them_and_each_turn_shows_once() -> None:
    a, b, c = turn(1, "alpha one"), turn(2, "beta two"), turn(3, "gamma three")
    far = turn(10, "delta four")
    inputs = ContextInputs(
        today=TODAY,
        history=[hit(b, a, c), hit(c), hit(far), hit(far), hit(turn(30, "  "))],
    )

    context = assemble(inputs)

    section = report(context, "history")
    assert section.included == ["history:1", "history:2", "history:3", "history:10"]
    assert section.dropped == [("history:10", "duplicate"), ("history:30", "empty")]


def test_the_section_keeps_to_its_share() -> None:
    hits = [hit(turn(i, f"word{i} " * 9, seq=10 * i)) for i in range(1, 40)]
    header = words(render.section_header("history"))
    share = header + 36  # a bullet is 14 words: "- [8 May 2023] Melanie:" and 9 more

    context = assemble(ContextInputs(today=TODAY, history=hits), Budget(max_history_tokens=share))

    section = report(context, "history")
    assert 0 < section.tokens <= share
    assert len(section.included) == 2
    assert section.dropped[0] == ("history:3", "budget")
    assert len(section.dropped) == 37
    assert_within_budget(context, words)


def test_the_section_gets_no_more_than_the_budget_leaves() -> None:
    hits = [hit(turn(i, f"word{i} " * 9, seq=10 * i)) for i in range(1, 40)]
    messages = [MessageItem(seq, "user", "x " * 30) for seq in range(1, 6)]
    inputs = ContextInputs(today=TODAY, messages=messages, history=hits)
    budget = Budget(max_tokens=300, max_history_tokens=5000)

    context = assemble(inputs, budget)
    without = assemble(ContextInputs(today=TODAY, messages=messages), budget)

    assert context.messages == without.messages  # history never displaces the conversation
    assert 0 < report(context, "history").tokens <= 300 - without.total_tokens
    assert_within_budget(context, words)


def test_an_empty_history_is_not_reported_and_changes_nothing() -> None:
    inputs = ContextInputs(
        today=TODAY,
        user_memories=[MemoryItem("diet", "vegetarian")],
        facts=[FactItem(1, "likes tea", 1.0)],
    )

    context = assemble(inputs)

    assert "history" not in [section.name for section in context.sections]
    assert "Relevant History" not in render_markdown(context)


def test_the_messages_format_carries_it_in_the_system_message() -> None:
    inputs = ContextInputs(
        today=TODAY,
        history=[hit(turn(5, "I adopted a cat named Luna."))],
        messages=[MessageItem(1, "user", "What's my cat's name?")],
    )

    context = assemble(inputs, counter=count_tokens)

    system, question = render_messages(context)
    assert system["role"] == "system"
    assert (
        "## Relevant History\n- [8 May 2023] Caroline: I adopted a cat named Luna."
        in (system["content"])
    )
    assert question == {"role": "user", "content": "What's my cat's name?"}


# The property: any history, any budget: within the budget and the share, every candidate
# accounted for once, and the other sections exactly what they are without it.

_when = st.sampled_from([MAY_8, MAY_8 + dt.timedelta(hours=5), MAY_25])
_history_text = st.sampled_from(["", "  ", "hello there", "日本 🙂 </memory>", "a\nb", "x " * 80])


@st.composite
def _history(draw: st.DrawFn) -> list[HistoryHit]:
    pool = {
        id_: HistoryTurn(
            id=id_,
            session_id=draw(st.sampled_from(["a", "b"])),
            seq=draw(st.integers(min_value=1, max_value=12)),
            speaker=draw(st.sampled_from(["user", "Caroline", "<memory>"])),
            content=draw(_history_text),
            created_at=draw(_when),
        )
        for id_ in range(draw(st.integers(min_value=0, max_value=12)))
    }
    # Distinct places, as in a database: one turn per (session, seq).
    pool = {t.id: t for t in {(t.session_id, t.seq): t for t in pool.values()}.values()}
    if not pool:
        return []
    ids = st.sampled_from(sorted(pool))
    return [
        HistoryHit(
            turn=pool[draw(ids)],
            score=1.0,
            neighbours=[pool[i] for i in draw(st.lists(ids, max_size=2, unique=True))],
        )
        for _ in range(draw(st.integers(min_value=1, max_value=15)))
    ]


def history_labels(history: list[HistoryHit]) -> Counter[str]:
    hit_ids = {h.turn.id for h in history}
    labels = Counter(f"history:{h.turn.id}" for h in history)
    labels.update({f"history:{n.id}" for h in history for n in h.neighbours if n.id not in hit_ids})
    return labels


@pytest.mark.slow
@pytest.mark.parametrize("counter", [words, count_tokens], ids=["words", "tiktoken"])
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    inputs=_inputs(),
    history=_history(),
    budget=_budgets,
    share=st.integers(min_value=0, max_value=3000),
)
def test_history_never_exceeds_the_budget_or_its_share_and_takes_nothing_from_the_rest(
    counter: Callable[[str], int],
    inputs: ContextInputs,
    history: list[HistoryHit],
    budget: Budget,
    share: int,
) -> None:
    budget = Budget(
        max_tokens=budget.max_tokens,
        max_messages=budget.max_messages,
        max_memories=budget.max_memories,
        max_history_tokens=share,
    )
    with_history = replace(inputs, history=history)

    context = assemble(with_history, budget, counter)
    without = assemble(inputs, budget, counter)

    assert_within_budget(context, counter)
    assert reported_labels(context) == expected_labels(inputs) + history_labels(history)
    others = [section for section in context.sections if section.name != "history"]
    if not any(section.included for section in without.sections):
        # Nothing else fits (or survives, e.g. tool results without their call): the frame is
        # charged only once something is shown, so history alone brings it in.
        others = [section for section in others if section.name != "frame"]
        without_others = [section for section in without.sections if section.name != "frame"]
        assert others == without_others
    else:
        assert others == without.sections
    for name in ("memories", "facts", "long_term_note", "today_note", "recent_notes"):
        assert getattr(context, name) == getattr(without, name)
    assert (context.summary, context.messages) == (without.summary, without.messages)
    if history:
        section = report(context, "history")
        assert section.tokens <= share
        assert section.included == [f"history:{t.id}" for t in context.history]
    else:
        assert len(context.sections) == len(without.sections)


# -- through the database and the API ------------------------------------------------------------

LUNA = "I adopted a kitten last week, a grey one called Luna."


@pytest.fixture(autouse=True)
def _fresh_recall_cache():
    # SQLite reuses ids after a rolled-back test: a cached index must not outlive its test.
    recall.index_cache().clear()
    yield
    recall.index_cache().clear()


def context_url(session) -> str:
    return f"/api/v1/sessions/{session.id}/context/"


def say(tenant, session, *turns: tuple[str, str], when: dt.datetime | None = None) -> None:
    """Append turns as the bot does: Caroline is the user, Melanie the assistant."""
    services.message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[
            MessageInput(
                role="user" if name == "Caroline" else "assistant",
                content=content,
                name=name,
                created_at=when,
            )
            for name, content in turns
        ],
    )


@pytest.fixture
def old_session(tenant):
    session, _ = services.session_create_or_get(
        tenant=tenant, user_id=USER, agent_id="chat", external_key="chat:old"
    )
    say(
        tenant,
        session,
        ("Caroline", "I spent the weekend repainting the kitchen."),
        ("Melanie", "Nice! What colour did you choose?"),
        ("Caroline", "A pale green. Also, big news for me."),
        ("Melanie", "Tell me!"),
        ("Caroline", LUNA),
        ("Melanie", "Luna is a lovely name."),
        ("Caroline", "My sister works as a nurse in Lisbon."),
        when=MAY_8,
    )
    return session


@pytest.fixture
def new_session(tenant, old_session):
    session, _ = services.session_create_or_get(
        tenant=tenant, user_id=USER, agent_id="chat", external_key="chat:new"
    )
    say(tenant, session, ("Caroline", "Good morning!"), ("Melanie", "Morning! How are you?"))
    return session


def history_of(body) -> dict | None:
    return next((s for s in body["sections"] if s["name"] == "history"), None)


def message_id(content: str) -> int:
    return Message.objects.get(content=content).pk


def test_a_turn_from_another_session_is_in_the_context_dated(api, new_session):
    body = api.get(context_url(new_session), {"query": "what is the kitten called?"}).json()

    history = body["content"].split("\n## Relevant History\n")[1].split("\n\n## ")[0]
    # One block of that conversation, dated once: the best hits come with their neighbours.
    assert history.startswith("- [8 May 2023] ")
    assert history.count("- ") == 1
    assert f"\n  Melanie: Tell me!\n  Caroline: {LUNA}\n  Melanie: Luna is a lovely" in history
    section = history_of(body)
    assert f"history:{message_id(LUNA)}" in section["included"]
    assert 0 < section["tokens"] <= 1500
    assert body["tokens"] <= 4000


def test_the_latest_user_message_is_the_question_without_a_query(api, tenant, new_session):
    say(tenant, new_session, ("Caroline", "Do you remember my kitten's name?"))

    body = api.get(context_url(new_session)).json()

    assert LUNA in body["content"]


def test_the_verbatim_tail_is_not_repeated(api, tenant, old_session):
    say(tenant, old_session, ("Melanie", "How is Luna doing?"), ("Caroline", "Luna is fine."))

    body = api.get(context_url(old_session), {"query": "Luna kitten", "max_messages": 3}).json()

    history = history_of(body)
    tail = [f"history:{message_id(text)}" for text in ("How is Luna doing?", "Luna is fine.")]
    assert not set(tail) & set(history["included"] + [d["item"] for d in history["dropped"]])
    assert body["content"].count("Luna is fine.") == 1  # in the transcript only
    assert f"history:{message_id(LUNA)}" in history["included"]  # the older part is searched


def test_the_section_keeps_to_the_policy_share_and_the_budget(api, tenant, old_session):
    for day in range(30):
        say(
            tenant,
            old_session,
            ("Caroline", f"Day {day}: Luna the kitten chased a ball of wool again today."),
            when=MAY_8 + dt.timedelta(days=day + 1),
        )
    fresh, _ = services.session_create_or_get(tenant=tenant, user_id=USER, agent_id="chat")
    MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", context_history_tokens=120)

    shared = api.get(context_url(fresh), {"query": "Luna kitten"}).json()
    tight = api.get(context_url(fresh), {"query": "Luna kitten", "max_tokens": 200}).json()

    section = history_of(shared)
    assert 0 < section["tokens"] <= 120
    assert "budget" in {d["reason"] for d in section["dropped"]}
    assert tight["tokens"] <= 200
    assert count_tokens(tight["content"]) <= 200


def test_recall_off_in_the_policy_means_no_section(api, tenant, new_session):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", recall_enabled=False)

    body = api.get(context_url(new_session), {"query": "kitten name"}).json()

    assert history_of(body) is None
    assert LUNA not in body["content"]


def test_memory_off_leaves_the_context_empty(api, tenant, new_session):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", memory_enabled=False)

    body = api.get(context_url(new_session), {"query": "kitten name"}).json()

    assert body["memory_enabled"] is False
    assert history_of(body) is None
    assert body["content"] == ""


def test_another_persons_or_tenants_turns_never_appear(api, tenant, other_tenant, new_session):
    for owner, user_id in [(tenant, "tui:someone-else"), (other_tenant, USER)]:
        theirs, _ = services.session_create_or_get(tenant=owner, user_id=user_id)
        say(owner, theirs, ("Caroline", "My kitten Mochi is an orange tabby."))

    body = api.get(context_url(new_session), {"query": "kitten Mochi orange tabby"}).json()

    assert "Mochi" not in body["content"]
    section = history_of(body)
    assert all(
        Message.objects.get(pk=int(label.split(":")[1])).session.end_user.external_id == USER
        for label in section["included"]
    )


def test_a_session_without_a_person_has_no_section(api, tenant, old_session):
    anonymous, _ = services.session_create_or_get(tenant=tenant)

    body = api.get(context_url(anonymous), {"query": "kitten"}).json()

    assert history_of(body) is None


def test_the_messages_format_carries_the_history(api, new_session):
    body = api.get(context_url(new_session), {"query": "kitten name", "format": "messages"}).json()

    system = body["messages"][0]
    assert system["role"] == "system"
    assert "## Relevant History" in system["content"]
    assert LUNA in system["content"]
    assert body["messages"][-1]["content"] == "Morning! How are you?"
    assert body["tokens"] <= 4000


def test_a_turn_added_to_an_old_session_is_found_once_the_cache_caught_up(
    api, tenant, old_session, new_session
):
    assert (
        "hamster" not in api.get(context_url(new_session), {"query": "hamster"}).json()["content"]
    )  # the person's index is built and cached now

    say(tenant, old_session, ("Caroline", "We also got a hamster called Pip."))
    # The context takes a cached index that lacks only the newest appends (its own session's
    # are in the verbatim tail anyway) and refreshes it after the response ...
    api.get(context_url(new_session), {"query": "hamster"})
    # ... so the next call finds the new turn, by its words, before any vector exists.
    body = api.get(context_url(new_session), {"query": "hamster"}).json()

    assert "We also got a hamster called Pip." in body["content"]


@pytest.mark.parametrize(
    "query",
    [
        "kitten name",
        # The best hit is its session's last message: the index, holding every append, knows
        # it has no next one (no read of the neighbours around it).
        "nurse sister Lisbon",
    ],
)
def test_the_cost_of_the_history(
    api, tenant, old_session, new_session, django_assert_num_queries, query
):
    api.get(context_url(new_session), {"query": query})  # builds the person's index

    # The key and the policy are cached. The session with its summary and the person's recall
    # version token; the messages, memories, notes and facts' candidates together (on SQLite
    # the facts' apart); the recall's hit rows with the best hits' neighbours.
    with django_assert_num_queries(3 if connection.vendor == "postgresql" else 4) as captured:
        body = api.get(context_url(new_session), {"query": query}).json()
    if query == "kitten name":
        assert f"Caroline: {LUNA}\n  Melanie: Luna is a lovely" in body["content"]
    else:
        lines = body["content"].splitlines()
        hit = next(n for n, line in enumerate(lines) if "My sister works as a nurse" in line)
        assert lines[hit - 1].endswith("Melanie: Luna is a lovely name.")
        assert not lines[hit + 1].startswith("  ")  # nothing after it in its block
    sqls = [q["sql"] for q in captured.captured_queries]
    # The token came with the session, the neighbours with the hits: no statement of their own.
    assert not [sql for sql in sqls if "GROUP BY e.id" in sql]
    assert not [sql for sql in sqls if '"seq" IN (' in sql]


def test_a_neighbour_appended_after_the_index_was_built_is_still_shown(
    api, tenant, old_session, new_session
):
    # The best hit is its session's last message when the person's index is built ...
    assert (
        "nurse in Lisbon" in api.get(context_url(new_session), {"query": "nurse"}).json()["content"]
    )
    # ... then the session goes on. The context takes that index once more (it lacks only an
    # append): the hit's next message is not in it, and is read from the database.
    say(tenant, old_session, ("Melanie", "Lisbon must be lovely in spring."))

    lines = api.get(context_url(new_session), {"query": "nurse"}).json()["content"].splitlines()

    hit = next(n for n, line in enumerate(lines) if "My sister works as a nurse" in line)
    # The next line of the hit's block (dated: another day than the hit's).
    assert lines[hit + 1].endswith("Melanie: Lisbon must be lovely in spring.")


@pytest.mark.parametrize(
    "query",
    # "morning": the best hits are in the verbatim tail, left out; the next ones are shown.
    ["kitten name", "kitchen colour", "nurse sister", "morning kitchen", "big news", "weekend"],
)
def test_the_hits_and_neighbours_are_the_databases_turns(tenant, old_session, new_session, query):
    from memoryhub.context import gather
    from sessions_app.selectors import TURN_FIELDS, message_neighbours_for_context

    history = gather._relevant_history(
        tenant=tenant,
        end_user_id=new_session.end_user_id,
        token=None,
        session_id=new_session.pk,
        tail_from_seq=1,  # the new session's two turns are its verbatim tail
        tail_size=2,
        query=query,
        top_k=10,
    )

    assert history
    # Text, speaker, time and place as stored.
    for item in history:
        stored = Message.objects.values(*TURN_FIELDS).get(pk=item.turn.id)
        assert item.turn == gather._history_turn(stored)
    for item in history[: gather.HISTORY_NEIGHBOUR_HITS]:
        places = [(uuid.UUID(item.turn.session_id), item.turn.seq)]
        expected = sorted(
            (
                gather._history_turn(row)
                for place, row in message_neighbours_for_context(
                    tenant=tenant, places=places
                ).items()
                if place[0] != new_session.pk  # the verbatim tail's
            ),
            key=lambda turn: turn.id,
        )
        assert sorted(item.neighbours, key=lambda turn: turn.id) == expected


def test_turns_deleted_before_the_person_is_told_are_not_shown(api, new_session):
    # A retention run deletes in batches and touches the person's recall version once it ends:
    # meanwhile the cached index still holds the deleted turns, which must not be shown.
    assert LUNA in api.get(context_url(new_session), {"query": "kitten name"}).json()["content"]

    Message.objects.filter(content__in=[LUNA, "Luna is a lovely name."]).delete()

    content = api.get(context_url(new_session), {"query": "kitten name"}).json()["content"]
    assert LUNA not in content
    assert "Luna is a lovely name." not in content


def test_a_deleted_sessions_turns_leave_the_history_at_once(api, old_session, new_session):
    assert LUNA in api.get(context_url(new_session), {"query": "kitten name"}).json()["content"]

    services.session_delete(session=old_session, actor=Actor.staff("test"))

    body = api.get(context_url(new_session), {"query": "kitten name"}).json()
    assert LUNA not in body["content"]
    assert "Luna is a lovely name." not in body["content"]


def test_the_session_read_brings_the_persons_recall_token(tenant, old_session, new_session):
    from sessions_app.selectors import session_get_for_context

    say(tenant, old_session, ("Caroline", "One more thing about the kitchen."))
    found = session_get_for_context(tenant=tenant, session_id=new_session.pk)

    assert found.person_versions == tuple(
        recall.recall_token(tenant_id=tenant.pk, end_user_id=new_session.end_user_id)
    )
    assert found.person_versions[2:] == (2, 10)  # two sessions; 7 + 1 and 2 messages


def test_a_session_without_a_person_has_no_recall_token(tenant):
    from sessions_app.selectors import session_get_for_context

    session, _ = services.session_create_or_get(
        tenant=tenant, user_id=None, agent_id="chat", external_key="nobody"
    )

    assert session_get_for_context(tenant=tenant, session_id=session.pk).person_versions is None


# -- the policy's switch and share, on the policy page and in the admin ----------------------------

POLICY_FORM = {
    "memory_enabled": "on",
    "summary_threshold_tokens": "6000",
    "summary_keep_recent": "8",
    "state_cap": "100",
    "context_max_tokens": "4000",
    "context_max_messages": "20",
    "context_max_memories": "50",
}


def test_the_policy_page_sets_the_switch_and_the_share(editor, tenant):
    page = editor.get("/tenant/policy/").content.decode()
    assert 'name="recall_enabled"' in page
    assert 'name="context_history_tokens"' in page

    saved = editor.post("/tenant/policy/", {**POLICY_FORM, "context_history_tokens": "800"})
    refused = editor.post("/tenant/policy/", {**POLICY_FORM, "context_history_tokens": "200001"})

    assert saved.status_code == 302
    assert refused.status_code == 400
    assert "context_history_tokens" in refused.context["form"].errors
    policy = MemoryPolicy.objects.get(tenant=tenant, agent_id="")
    # An unchecked box is off, as everywhere in HTML forms.
    assert (policy.recall_enabled, policy.context_history_tokens) == (False, 800)


def test_a_share_left_out_keeps_the_current_one(editor, admin_client, tenant):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="", context_history_tokens=900)
    form = {**POLICY_FORM, "recall_enabled": "on"}

    assert editor.post("/tenant/policy/", form).status_code == 302
    added = admin_client.post(
        "/admin/accounts/memorypolicy/add/", {**form, "tenant": tenant.pk, "agent_id": "bot"}
    )

    assert added.status_code == 302, added.content
    assert MemoryPolicy.objects.get(tenant=tenant, agent_id="").context_history_tokens == 900
    added_policy = MemoryPolicy.objects.get(tenant=tenant, agent_id="bot")
    assert (added_policy.recall_enabled, added_policy.context_history_tokens) == (True, 1500)


def test_the_audit_names_the_share_only_when_it_changed(editor, tenant):
    editor.post("/tenant/policy/", {**POLICY_FORM, "recall_enabled": "on"})
    editor.post(
        "/tenant/policy/",
        {**POLICY_FORM, "recall_enabled": "on", "context_history_tokens": "700"},
    )

    events = AuditEvent.objects.filter(object_type="memory_policy")
    created, updated = events.get(action="create"), events.get(action="update")
    assert "context_history_tokens" not in created.detail["changes"]
    assert updated.detail["changes"]["context_history_tokens"] == 700


def test_a_history_over_the_index_bound_is_searched_in_its_newest_window(
    api, tenant, new_session, settings, monkeypatch
):
    # 9 turns: over a bound of 5. Building the index of the whole history would read it in the
    # request (a million messages outlasted gunicorn's timeout); the context searches the
    # newest 4 messages instead.
    whole = ("messages", new_session.tenant_id, new_session.end_user_id)
    api.get(context_url(new_session), {"query": "kitten"})  # under the default bound
    assert recall.index_cache().peek(whole) is not None
    settings.RECALL_INDEX_MAX_MESSAGES = 5
    settings.RECALL_HISTORY_WINDOW_MESSAGES = 4
    built: list[int] = []
    build = recall.RecallIndex.build
    monkeypatch.setattr(
        recall.RecallIndex, "build", lambda docs, **kw: built.append(len(docs)) or build(docs)
    )

    # "Luna" is the 5th of the old session's 7 turns: older than the newest 4.
    old = api.get(context_url(new_session), {"query": "what is the kitten called?"}).json()
    assert history_of(old) is None or LUNA not in old["content"]
    assert built == [4]
    # The old session's last turn is among them (the new session's are its verbatim tail).
    body = api.get(context_url(new_session), {"query": "where does her sister work?"}).json()
    assert "My sister works as a nurse in Lisbon." in body["content"]
    assert history_of(body)["included"]
    assert "Morning! How are you?" in body["content"]  # the verbatim tail is still there
    key = ("messages-window", new_session.tenant_id, new_session.end_user_id)
    assert len(recall.index_cache().peek(key)[1]) == 4
    assert recall.index_cache().peek(whole) is None  # dropped: of no more use

    # Appends extend the window (the context's next call takes them in after its response) ...
    say(tenant, new_session, ("Caroline", "We are thinking of a trip to Porto."))
    for _ in range(2):
        body = api.get(context_url(new_session), {"query": "Porto trip"}).json()
    assert len(recall.index_cache().peek(key)[1]) == 5
    assert built == [4]
    # ... until it has grown by a quarter: then it is cut again from the newest 4.
    say(tenant, new_session, ("Melanie", "Porto is lovely in May."))
    for _ in range(2):
        api.get(context_url(new_session), {"query": "Porto trip"})
    assert built == [4, 4]
    assert len(recall.index_cache().peek(key)[1]) == 4


def test_a_search_over_the_index_bound_is_still_refused_without_a_session(
    api, new_session, settings
):
    # The search is asked for the person's history: a window of it would answer as if the
    # older part held nothing.
    settings.RECALL_INDEX_MAX_MESSAGES = 5

    refused = api.get("/api/v1/messages/search/", {"q": "kitten Luna", "user_id": USER})

    assert refused.status_code == 400
    assert refused.json()["error"]["fields"]["user_id"][0]["code"] == "history_too_large"


def test_a_history_whose_index_outgrows_the_cache_is_built_once_then_refused(
    api, old_session, new_session, monkeypatch
):
    # An index larger than the whole cache is never kept: every search and every context call
    # read and built the person's whole history again. Now the first use builds it and finds it
    # too large; later ones refuse at once, until something is removed from the history.
    monkeypatch.setattr(recall.index_cache(), "max_bytes", 1)
    built: list[int] = []
    build = recall.RecallIndex.build
    monkeypatch.setattr(
        recall.RecallIndex, "build", lambda docs: built.append(len(docs)) or build(docs)
    )

    for _ in range(2):
        refused = api.get("/api/v1/messages/search/", {"q": "kitten Luna", "user_id": USER})
        assert refused.status_code == 400
        [error] = refused.json()["error"]["fields"]["user_id"]
        assert error["code"] == "history_too_large"
        assert "RECALL_CACHE_MAX_BYTES" in error["message"]
    # The context then tries the newest window (RECALL_HISTORY_WINDOW_MESSAGES) once: here
    # also too large, and remembered as such.
    for _ in range(2):
        context = api.get(context_url(new_session), {"query": "what is the kitten called?"})
        assert context.status_code == 200
        assert history_of(context.json()) is None
        assert "Morning! How are you?" in context.json()["content"]
    assert built == [9, 9]

    # A removal may have shrunk the history: the next use builds it again.
    services.session_delete(session=old_session, actor=Actor.system("test"))
    assert api.get(context_url(new_session), {"query": "kitten?"}).status_code == 200
    assert built == [9, 9, 2]


def test_a_history_too_large_for_the_cache_is_searched_in_its_newest_window(
    api, new_session, settings, monkeypatch
):
    settings.RECALL_HISTORY_WINDOW_MESSAGES = 4
    person = {"tenant_id": new_session.tenant_id, "end_user_id": new_session.end_user_id}
    whole = recall.RecallIndex.build(recall._docs_for_person(**person)).memory_bytes()
    window = recall.RecallIndex.build(recall._docs_for_person(**person, newest=4)).memory_bytes()
    assert window < whole
    monkeypatch.setattr(recall.index_cache(), "max_bytes", (window + whole) // 2)

    # The first call builds the whole history's index and finds it too large (no history) ...
    first = api.get(context_url(new_session), {"query": "where does her sister work?"}).json()
    assert history_of(first) is None
    # ... the next ones search the newest window.
    body = api.get(context_url(new_session), {"query": "where does her sister work?"}).json()

    assert history_of(body)["included"]
    assert "My sister works as a nurse in Lisbon." in body["content"]


def test_a_search_over_the_bound_needs_a_session_and_then_uses_the_database(
    api, old_session, new_session, settings
):
    settings.RECALL_INDEX_MAX_MESSAGES = 5

    refused = api.get("/api/v1/messages/search/", {"q": "kitten Luna", "user_id": USER})
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"]["user_id"][0]["code"] == "history_too_large"

    found = api.get(
        "/api/v1/messages/search/",
        {"q": "Luna", "user_id": USER, "session_id": str(old_session.id), "mode": "lexical"},
    )
    assert found.status_code == 200
    assert LUNA in [hit["message"]["content"] for hit in found.json()["results"]]


# -- the query's vector, started before the session is read ---------------------------------------


@pytest.fixture
def started(monkeypatch):
    """What the context call does, in order: embedding started ahead, the session read."""
    from memoryhub.context import gather, session_context
    from sessions_app import selectors

    calls: list[str] = []
    read = selectors.session_get_for_context

    def reading(**kwargs):
        calls.append("session read")
        return read(**kwargs)

    def ahead(text: str) -> None:
        calls.append(f"ahead: {text}")

    monkeypatch.setattr(selectors, "session_get_for_context", reading)
    monkeypatch.setattr(session_context, "embed_query_ahead", ahead)
    monkeypatch.setattr(gather, "embed_query_ahead", ahead)
    return calls


def test_the_query_is_embedded_ahead_before_the_session_is_read(api, new_session, started):
    body = api.get(context_url(new_session), {"query": "kitten name"}).json()

    assert history_of(body)["included"]
    assert started[:2] == ["ahead: kitten name", "session read"]


@pytest.mark.parametrize(
    "policy",
    [{"recall_enabled": False}, {"memory_enabled": False}, {"context_history_tokens": 0}],
)
def test_no_agent_with_relevant_history_embeds_nothing_ahead(
    api, tenant, new_session, started, policy
):
    # The tenant's policy, which every agent without one of its own follows.
    MemoryPolicy.objects.create(tenant=tenant, agent_id="", **policy)

    api.get(context_url(new_session), {"query": "kitten name"})

    assert started == ["session read"]


def test_one_agent_with_relevant_history_is_enough_to_embed_ahead(
    api, tenant, new_session, started
):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="", recall_enabled=False)
    MemoryPolicy.objects.create(tenant=tenant, agent_id="voice", recall_enabled=True)

    body = api.get(context_url(new_session), {"query": "kitten name"}).json()

    # The session's agent ("chat") follows the tenant's policy: no section, the vector cached.
    assert history_of(body) is None
    assert started == ["ahead: kitten name", "session read"]
