"""GET /sessions/{id}/context/ end to end: gathered from the database, assembled, rendered."""

import pytest

from facts_app.services.facts import fact_create
from facts_app.services.memories import memory_save
from memoryhub.accounts.models import MemoryPolicy
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.core.tokens import count_tokens
from sessions_app import services
from sessions_app.services import MessageInput
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
    api, chatty_session, django_assert_max_num_queries
):
    api.get(context_url(chatty_session))

    # key, session with its summary, policy, messages, memories (both lists), fact search,
    # notes (long-term and daily together), the recall's version token (no older turn matches
    # here, so no hit rows: tests/context/test_relevant_history.py counts those)
    with django_assert_max_num_queries(8):
        api.get(context_url(chatty_session))
