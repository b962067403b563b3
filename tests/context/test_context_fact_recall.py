"""The context's facts are ranked by the same hybrid search as GET /facts/search/: a question
that shares no word with a fact still brings it in once the fact is embedded, and without an
embedder the facts are still found by their words."""

from __future__ import annotations

import pytest

from facts_app import recall
from facts_app.services.facts import fact_create
from memoryhub.accounts.services import end_user_get_or_create
from sessions_app import services

USER = "whatsapp:+4912345"
PUPPY = "Alice adopted a puppy last spring"
GREEN = "Her favourite colour is green"

# Real commits: the facts' vectors are made by the eager "worker" after commit.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_recall_cache():
    recall.index_cache().clear()
    yield
    recall.index_cache().clear()


@pytest.fixture
def session(tenant):
    created, _ = services.session_create_or_get(tenant=tenant, user_id=USER, agent_id="chat")
    person = end_user_get_or_create(tenant=tenant, external_id=USER)
    for text in (PUPPY, GREEN, "Works as a nurse on night shifts"):
        fact_create(tenant=tenant, end_user=person, content=text)
    return created


def context(api, session, query: str) -> str:
    response = api.get(f"/api/v1/sessions/{session.id}/context/", {"query": query})
    assert response.status_code == 200, response.content
    return str(response.json()["content"])


def test_a_question_in_other_words_brings_the_fact_in(api, session):
    content = context(api, session, "does the user have a dog")

    assert PUPPY in content
    assert GREEN not in content


def test_without_an_embedder_facts_are_found_by_their_words(api, session, settings):
    settings.EMBEDDINGS_BACKEND = "off"

    assert PUPPY in context(api, session, "what about the puppy")
    assert PUPPY not in context(api, session, "does the user have a dog")
