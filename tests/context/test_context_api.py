"""GET /sessions/{id}/context/ end to end: gathered from the database, assembled, rendered."""

import datetime as dt

import pytest
from django.db import connection

from facts_app.selectors import facts as facts_selectors
from facts_app.selectors.facts import FactFilters, fact_candidates
from facts_app.services.facts import fact_create
from facts_app.services.memories import memory_save
from memoryhub.accounts.models import MemoryPolicy
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.context.selectors import context_reads_for_session
from memoryhub.core.tokens import count_tokens
from sessions_app import services
from sessions_app.services import MessageInput
from tests.context.sendable import assert_sendable
from tests.helpers import error_fields

USER = "whatsapp:+4912345"


def context_url(session) -> str:
    return f"/api/v1/sessions/{session.id}/context/"


@pytest.fixture
def chatty_session(tenant):
    session, _ = services.session_create_or_get(tenant=tenant, user_id=USER, agent_id="chat")
    end_user = end_user_get_or_create(tenant=tenant, external_id=USER)
    memory_save(
        tenant=tenant, end_user=end_user, key="name", content="Her name is Sachi", pinned=True
    )
    memory_save(tenant=tenant, end_user=None, key="house_rules", content="Answer in English")
    fact_create(tenant=tenant, end_user=end_user, content="Sachi is allergic to peanuts")
    fact_create(tenant=tenant, end_user=end_user, content="Sachi prefers dark mode")
    # Tenant-wide (no person): what sclaw's extractor writes with an empty source.
    fact_create(tenant=tenant, end_user=None, content="Peanut butter is on the kitchen menu")
    for turn in range(150):
        services.message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[
                MessageInput(
                    role="user", content=f"Turn {turn}: tell me something about the weather"
                ),
                MessageInput(
                    role="assistant", content=f"Answer {turn}: it is sunny and mild today."
                ),
            ],
        )
    services.message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[MessageInput(role="user", content="Can I eat peanut butter?")],
    )
    return session


def test_the_context_fits_the_budget_and_holds_what_matters(api, chatty_session):
    response = api.get(context_url(chatty_session), {"max_tokens": 1000})

    assert response.status_code == 200
    body = response.json()
    assert body["tokens"] <= 1000
    assert count_tokens(body["content"]) <= 1000
    assert "<memory>" in body["content"]
    assert "Her name is Sachi" in body["content"]
    assert "Answer in English" in body["content"]
    # The latest user message picks the facts: peanuts, not dark mode, comes first.
    facts = next(section for section in body["sections"] if section["name"] == "facts")
    assert facts["included"]
    assert "Sachi is allergic to peanuts" in body["content"]
    messages = next(section for section in body["sections"] if section["name"] == "messages")
    assert any(drop["reason"] for drop in messages["dropped"]) or len(messages["included"]) <= 20


def test_the_messages_format_is_ready_to_send(api, chatty_session):
    body = api.get(context_url(chatty_session), {"format": "messages", "max_tokens": 2000}).json()

    assert body["content"] is None
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][-1] == {"role": "user", "content": "Can I eat peanut butter?"}
    assert body["tokens"] <= 2000


def test_an_explicit_query_picks_the_facts(api, chatty_session):
    body = api.get(context_url(chatty_session), {"query": "dark mode theme"}).json()

    assert "Sachi prefers dark mode" in body["content"]


def test_the_policy_sets_the_defaults(api, tenant, chatty_session):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", context_max_tokens=300)

    body = api.get(context_url(chatty_session)).json()

    assert body["max_tokens"] == 300
    assert body["tokens"] <= 300


def test_a_session_without_a_person_still_gets_a_context(api, tenant):
    session, _ = services.session_create_or_get(tenant=tenant)

    response = api.get(context_url(session))

    assert response.status_code == 200
    assert response.json()["tokens"] <= 4000


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"max_tokens": 199}, "max_tokens"),
        ({"max_tokens": 200_001}, "max_tokens"),
        ({"max_tokens": "lots"}, "max_tokens"),
        ({"max_messages": -1}, "max_messages"),
        ({"max_facts": -1}, "max_facts"),
        ({"max_facts": 101}, "max_facts"),
        ({"max_facts": "ten"}, "max_facts"),
        ({"facts_max_tokens": -1}, "facts_max_tokens"),
        ({"facts_max_tokens": 200_001}, "facts_max_tokens"),
        ({"format": "xml"}, "format"),
    ],
)
def test_a_budget_out_of_range_is_a_400(api, chatty_session, params, field):
    response = api.get(context_url(chatty_session), params)

    assert response.status_code == 400
    assert field in error_fields(response)


def test_an_outsider_gets_404(outsider_api, chatty_session):
    assert outsider_api.get(context_url(chatty_session)).status_code == 404


def test_the_cost_follows_the_budget_not_the_history(
    api, chatty_session, django_assert_num_queries
):
    api.get(context_url(chatty_session))

    # The key and the policy are cached. The session with its summary and the person's recall
    # version token; the messages, memories (both lists), notes and the facts' ranking
    # candidates (the person's and the tenant-wide) together (on SQLite the facts' apart);
    # the recall's hit rows.
    with django_assert_num_queries(3 if connection.vendor == "postgresql" else 4):
        api.get(context_url(chatty_session))


@pytest.mark.parametrize("max_candidates", [1000, 2])
def test_the_facts_read_with_the_tail_are_the_ranking_candidates_of_their_own_read(
    tenant, chatty_session, monkeypatch, max_candidates
):
    # 2: the person's two facts and the tenant-wide one are too many; the database ranks them.
    monkeypatch.setattr(facts_selectors, "MAX_CANDIDATES", max_candidates)

    reads = context_reads_for_session(
        tenant=tenant,
        session_id=chatty_session.pk,
        end_user_id=chatty_session.end_user_id,
        last=20,
        max_memories=50,
        today=dt.date.today(),
        note_days=7,
        with_facts=True,
    )
    own = fact_candidates(
        tenant=tenant,
        filters=FactFilters(),
        end_user_id=chatty_session.end_user_id,
        tenant_wide=True,
    )

    if connection.vendor != "postgresql":
        # SQLite reads them on their own (a UNION there loses the times' conversion).
        assert not reads.facts_read
        return
    assert reads.facts_read
    assert reads.fact_candidates == own
    assert own is None if max_candidates == 2 else len(own) == 3
    assert len(reads.tail.messages) == 20  # the other parts are still there


def section_of(body, name: str):
    return next(section for section in body["sections"] if section["name"] == name)


def test_facts_are_titled_as_seed_004_injects_them_the_persons_first(api, chatty_session):
    body = api.get(context_url(chatty_session)).json()

    content = body["content"]
    assert "\n## Relevant Memory\n- Sachi is allergic to peanuts\n" in content
    assert "## Relevant Facts" not in content
    # The tenant-wide fact reaches the context too, after the person's.
    assert content.index("Sachi is allergic") < content.index("Peanut butter is on the kitchen")


def test_a_request_sets_the_number_of_facts_and_their_share(api, chatty_session):
    one = api.get(context_url(chatty_session), {"max_facts": 1}).json()

    facts = section_of(one, "facts")
    assert len(facts["included"]) == 1
    assert facts["dropped"]
    assert {d["reason"] for d in facts["dropped"]} == {"max_facts"}

    tight = api.get(context_url(chatty_session), {"facts_max_tokens": 15}).json()

    facts = section_of(tight, "facts")
    assert 0 < facts["tokens"] <= 15
    assert {d["reason"] for d in facts["dropped"]} == {"budget"}

    none = api.get(context_url(chatty_session), {"max_facts": 0}).json()

    assert section_of(none, "facts") == {
        "name": "facts",
        "tokens": 0,
        "included": [],
        "dropped": [],
    }
    assert "## Relevant Memory" not in none["content"]


def test_memories_past_max_memories_are_reported(api, tenant, chatty_session):
    end_user = end_user_get_or_create(tenant=tenant, external_id=USER)
    memory_save(tenant=tenant, end_user=end_user, key="city", content="Kyoto")

    body = api.get(context_url(chatty_session), {"max_memories": 1}).json()

    memories = section_of(body, "memories")
    assert memories["included"] == ["tenant_memory:house_rules", "memory:name"]
    assert memories["dropped"] == [{"item": "memory:city", "reason": "max_memories"}]

    body = api.get(context_url(chatty_session), {"max_memories": 0}).json()

    assert section_of(body, "memories")["dropped"] == [
        {"item": "tenant_memory:house_rules", "reason": "max_memories"},
        {"item": "memory:name", "reason": "max_memories"},
        {"item": "memory:city", "reason": "max_memories"},
    ]


def test_the_facts_parameters_are_in_the_schema(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    operation = schema["paths"]["/api/v1/sessions/{session_id}/context/"]["get"]
    parameters = {p["name"]: p["schema"] for p in operation["parameters"]}
    assert parameters["max_facts"]["minimum"] == 0
    assert parameters["max_facts"]["maximum"] == 100
    assert parameters["facts_max_tokens"]["maximum"] == 200_000


def tool_exchange(turn: int) -> list[MessageInput]:
    call = {"id": f"call_{turn}", "type": "function", "function": {"name": "weather"}}
    other = {"id": f"call_{turn}b", "type": "function", "function": {"name": "clock"}}
    return [
        MessageInput(role="user", content=f"Turn {turn}: weather and time?"),
        MessageInput(role="assistant", content="Let me look.", tool_calls=[call, other]),
        MessageInput(role="tool", content="Sunny, 21C", tool_call_id=f"call_{turn}"),
        MessageInput(role="tool", content="14:00", tool_call_id=f"call_{turn}b"),
        MessageInput(role="assistant", content=f"Answer {turn}: sunny, 2pm."),
    ]


@pytest.mark.parametrize(
    ("params", "first"),
    [
        # seqs: turn t is 5t+1 (user) ... 5t+5; turn 5 is 26 (user), 27 (call), 28 (one result)
        ({"max_messages": 3}, 26),  # 27 and 28: the call waits for its second result
        ({"max_messages": 6}, 25),  # 23 and 24: results whose call (22) was cut
        ({"max_messages": 7}, 22),  # the whole exchange 22-24
        ({"max_tokens": 300}, None),
    ],
)
def test_the_messages_format_never_starts_with_a_result_whose_call_was_cut(
    api, tenant, params, first
):
    session, _ = services.session_create_or_get(tenant=tenant, user_id=USER, agent_id="tools")
    for turn in range(5):
        services.message_append_batch(
            tenant=tenant, session_id=session.pk, messages=tool_exchange(turn)
        )
    # The bot asks for the context while its last call is still running.
    services.message_append_batch(
        tenant=tenant, session_id=session.pk, messages=tool_exchange(5)[:3]
    )

    body = api.get(context_url(session), {"format": "messages", **params}).json()

    assert_sendable(body["messages"])
    sent = [m for m in body["messages"] if m["role"] != "system"]
    assert sent
    assert sent[0]["role"] != "tool"
    assert sent[-1] == {"role": "user", "content": "Turn 5: weather and time?"}
    messages = section_of(body, "messages")
    if first is not None:
        assert messages["included"][0] == f"message:{first}"
    assert {"item": "message:28", "reason": "incomplete tool exchange"} in messages["dropped"]
    assert {"item": "message:27", "reason": "incomplete tool exchange"} in messages["dropped"]
    # The Markdown transcript is cut at the same places.
    markdown = api.get(context_url(session), params).json()
    assert section_of(markdown, "messages") == messages
    assert markdown["content"].endswith("user: Turn 5: weather and time?\n</memory>")


@pytest.mark.parametrize(
    "query_string",
    [
        "",
        "max_tokens=4000",
        "max_tokens=4000&format=messages",
        "max_tokens=0200&max_messages=0&max_memories=500&max_facts=100&facts_max_tokens=0",
        "max_tokens=200000&facts_max_tokens=200000",
        "max_tokens=300&max_tokens=5000",  # the last value counts
        "query=",
        "query=%20%20",
        "query=%20peanut%20butter%0A",
        "query=K%C3%A4se%20%F0%9F%A7%80",
        "query=" + "x" * 1000,
        "query=%20" + "x" * 1000 + "%20",
        "format=markdown&query=hi&unknown=1",
        # What only the serializer decides (the plain reading leaves them to it):
        "max_tokens=",
        "max_tokens=199",
        "max_tokens=200001",
        "max_tokens=4000.0",
        "max_tokens=%204000",
        "max_tokens=-5",
        "max_tokens=+5",
        "max_tokens=12345678",
        "max_tokens=abc",
        "max_messages=501",
        "max_memories=501",
        "max_facts=101",
        "facts_max_tokens=200001",
        "format=",
        "format=json",
        "format=Markdown",
        "query=" + "x" * 1001,
        "query=a%00b",
    ],
)
def test_the_plain_query_reading_agrees_with_the_serializer(query_string):
    from django.http import QueryDict
    from rest_framework.exceptions import ValidationError

    from memoryhub.context.api import (
        ContextQuerySerializer,
        _plain_query,
        context_query_validated,
    )

    params = QueryDict(query_string)
    serializer = ContextQuerySerializer(data=params)
    if serializer.is_valid():
        expected = dict(serializer.validated_data)
        assert context_query_validated(params) == expected
        plain = _plain_query(params)
        assert plain is None or plain == expected
    else:
        assert _plain_query(params) is None
        with pytest.raises(ValidationError) as refused:
            context_query_validated(params)
        assert refused.value.detail == serializer.errors
