"""Recall of a person's past turns through GET /messages/search/: found by its words at once,
by its meaning once the worker has embedded it, never from another tenant or person, and never
from a stale cache after an append, a delete, a purge or an erasure."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import call_command
from django.db.models.signals import post_init

from memoryhub.accounts.models import EndUser
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.recall import hybrid as recall_hybrid
from memoryhub.core.recall import index as recall_index
from memoryhub.llm import embeddings
from sessions_app import recall
from sessions_app.models import Message, MessageVector, Session
from tests.helpers import client_for, error_code

SEARCH = "/api/v1/messages/search/"

# Real commits: the append's embedding request is enqueued on commit, after the response, and
# the eager "worker" then embeds, as a real worker would a moment later.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_recall_cache():
    recall.index_cache().clear()
    yield
    recall.index_cache().clear()


@pytest.fixture
def owner(tenant, make_key):
    return client_for(make_key(tenant, scopes=["read", "write", "purge"])[1])


def chat(api, *, user_id: str, key: str, turns: list[tuple[str, str]], **message) -> str:
    made = api.post("/api/v1/sessions/", {"user_id": user_id, "external_key": key}, format="json")
    assert made.status_code in (200, 201), made.content
    session_id = made.json()["id"]
    response = api.post(
        f"/api/v1/sessions/{session_id}/messages/",
        {"messages": [{"role": role, "content": content, **message} for role, content in turns]},
        format="json",
    )
    assert response.status_code == 201, response.content
    return session_id


def search(api, **params):
    response = api.get(SEARCH, params)
    assert response.status_code == 200, response.content
    return response.json()


def contents(body) -> list[str]:
    return [hit["message"]["content"] for hit in body["results"]]


PUPPY = "We adopted a puppy last spring, a golden retriever called Biscuit."
TURNS = [
    ("user", "I spent the weekend repainting the kitchen."),
    ("assistant", "Nice! What colour did you choose?"),
    ("user", PUPPY),
    ("assistant", "Biscuit is a lovely name."),
    ("user", "My sister works as a nurse in Lisbon."),
]


def test_a_turn_is_found_by_its_words_at_once_and_by_its_meaning_once_embedded(owner, tenant):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)

    lexical = search(owner, q="golden retriever", user_id="ana", mode="lexical")
    assert lexical["mode"] == "lexical"
    assert contents(lexical)[0] == PUPPY
    assert lexical["results"][0]["signals"]["lexical"] is True

    # Tests run the worker eagerly after the response: every turn has its vector now.
    assert MessageVector.objects.filter(tenant=tenant).count() == len(TURNS)
    semantic = search(owner, q="does she have a dog?", user_id="ana", mode="semantic")
    assert semantic["mode"] == "semantic"
    assert contents(semantic)[0] == PUPPY
    hybrid = search(owner, q="does she have a dog?", user_id="ana")
    assert hybrid["mode"] == "hybrid"
    assert contents(hybrid)[0] == PUPPY
    assert hybrid["results"][0]["signals"]["semantic"] is True
    # No word of the question is in the answer: words alone cannot find it.
    assert PUPPY not in contents(
        search(owner, q="does she have a dog?", user_id="ana", mode="lexical")
    )


def test_a_turn_without_its_vector_yet_is_still_found_by_its_words(owner, tenant, settings):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    MessageVector.objects.filter(message__content=PUPPY).delete()
    EndUser.objects.filter(tenant=tenant).update(recall_version=99)

    hybrid = search(owner, q="golden retriever", user_id="ana")

    assert hybrid["mode"] == "hybrid"
    assert contents(hybrid)[0] == PUPPY
    assert hybrid["results"][0]["signals"]["semantic"] is False


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_a_query_that_cannot_be_embedded_degrades_to_words_and_says_so(owner, monkeypatch, mode):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)  # embedded: the person has vectors
    embeddings.clear_query_cache()

    def endpoint_down(text: str, **kwargs: object) -> object:
        raise embeddings.EmbeddingTransientError("the endpoint is down")

    monkeypatch.setattr(embeddings, "embed_query_cached", endpoint_down)
    found = search(owner, q="golden retriever", user_id="ana", mode=mode)

    if mode == "hybrid":
        assert found["mode"] == "lexical"
        assert contents(found)[0] == PUPPY
        assert found["results"][0]["signals"]["semantic"] is False
    else:
        assert found == {"mode": "semantic", "results": []}


def test_an_append_is_searchable_at_once_through_a_warm_cache(owner):
    session_id = chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    assert search(owner, q="trombone", user_id="ana", mode="lexical")["results"] == []

    owner.post(
        f"/api/v1/sessions/{session_id}/messages/",
        {"role": "user", "content": "I started trombone lessons."},
        format="json",
    )

    # First; the turn before it follows, lifted by its neighbour (the window).
    assert contents(search(owner, q="trombone", user_id="ana", mode="lexical"))[0] == (
        "I started trombone lessons."
    )


@pytest.mark.parametrize("how", ["session_delete", "purge_session", "purge_user", "erase"])
def test_deleted_history_never_comes_back_from_the_cache(owner, how):
    session_id = chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    assert contents(search(owner, q="golden retriever", user_id="ana"))  # warm the cache

    if how == "session_delete":
        assert owner.delete(f"/api/v1/sessions/{session_id}/").status_code in (200, 204)
    elif how == "purge_session":
        body = {"scope": "session", "session_id": session_id}
        assert owner.post("/api/v1/purge/", body, format="json").status_code == 200
    elif how == "purge_user":
        body = {"scope": "user", "user_id": "ana"}
        assert owner.post("/api/v1/purge/", body, format="json").status_code == 200
    else:
        assert owner.delete("/api/v1/users/ana/").status_code in (200, 204)

    response = owner.get(SEARCH, {"q": "golden retriever", "user_id": "ana"})
    if response.status_code == 404:  # the person is gone
        return
    assert PUPPY not in contents(response.json())


def test_retention_of_old_messages_empties_the_cache_entry(owner, tenant):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    assert contents(search(owner, q="golden retriever", user_id="ana"))
    old = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    Message.objects.filter(tenant=tenant).update(created_at=old)
    Session.objects.filter(tenant=tenant).update(last_active_at=old)

    call_command("prune_memory", "--no-progress")

    response = owner.get(SEARCH, {"q": "golden retriever", "user_id": "ana"})
    assert response.status_code == 200
    assert response.json()["results"] == []


def test_a_model_change_makes_old_vectors_missing_and_the_backfill_reembeds(
    owner, tenant, monkeypatch
):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    MessageVector.objects.filter(tenant=tenant).update(model="an-older-model")

    call_command("embed_memory", "--tenant", tenant.slug, "--no-progress")

    assert set(MessageVector.objects.filter(tenant=tenant).values_list("model", flat=True)) == {
        embeddings.get_embedder().model_name
    }
    assert MessageVector.objects.filter(tenant=tenant).count() == len(TURNS)


def test_speaker_since_and_until(owner):
    session_id = chat(
        owner,
        user_id="ana",
        key="ana:1",
        turns=[
            ("user", "Caroline went hiking in June."),
            ("assistant", "Melanie went hiking too."),
        ],
    )
    body = search(owner, q="hiking", user_id="ana", speaker="assistant", mode="lexical")
    assert contents(body)[0] == "Melanie went hiking too."
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat()
    assert search(owner, q="hiking", user_id="ana", since=future)["results"] == []
    assert len(search(owner, q="hiking", user_id="ana", until=future)["results"]) == 2
    body = search(owner, q="hiking", session_id=session_id, mode="lexical")
    assert len(body["results"]) == 2


def test_a_person_is_searched_alone_and_an_outsider_finds_nothing(owner, outsider_api):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    chat(owner, user_id="bo", key="bo:1", turns=[("user", "I also have a golden retriever.")])

    for mode in ("hybrid", "lexical", "semantic"):
        found = contents(search(owner, q="golden retriever", user_id="bo", mode=mode))
        assert PUPPY not in found, mode
        assert (
            outsider_api.get(
                SEARCH, {"q": "golden retriever", "user_id": "ana", "mode": mode}
            ).status_code
            == 404
        )
    tenant_wide = outsider_api.get(SEARCH, {"q": "golden retriever"})
    assert tenant_wide.status_code == 200
    assert tenant_wide.json()["results"] == []


def test_semantic_needs_a_person(owner):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)

    response = owner.get(SEARCH, {"q": "a dog", "mode": "semantic"})

    assert response.status_code == 400
    assert error_code(response) == "validation_error"
    assert response.json()["error"]["fields"]["mode"][0]["code"] == "person_required"


def test_without_a_person_the_search_is_lexical_over_the_tenant(owner):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)

    body = search(owner, q="golden retriever")

    assert body["mode"] == "lexical"
    assert contents(body) == [PUPPY]


def test_recall_with_fields_finds_the_same_and_loads_only_those(
    owner, tenant, django_assert_num_queries
):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    chat(owner, user_id="ana", key="ana:2", turns=[("user", "The kitchen is green now.")])
    person = EndUser.objects.get(tenant=tenant, external_id="ana")
    whole = recall.message_recall(tenant=tenant, end_user=person, query="kitchen sister", top_k=5)
    session = whole.hits[0].message.session_id
    narrow = recall.message_recall(
        tenant=tenant,
        end_user=person,
        query="kitchen sister",
        top_k=5,
        fields=("id", "seq", "content"),
        session_id=session,  # the filter reads session_id and role, loaded with the fields
        role="user",
    )
    expected = [
        r.hit for r in whole.hits if r.message.session_id == session and r.message.role == "user"
    ]
    assert [r.hit for r in narrow.hits] == expected
    assert expected
    message = narrow.hits[0].message
    assert message.get_deferred_fields() >= {"metadata", "tool_calls", "name", "created_at"}
    stored = Message.objects.values_list("seq", "content", "role", "session_id").get(pk=message.pk)
    with django_assert_num_queries(0):  # the fields asked for, and the filters', are loaded
        assert (message.seq, message.content, message.role, message.session_id) == stored


def test_whole_rows_come_as_records_that_read_as_the_stored_messages(owner, tenant):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS, name="Ana", metadata={"via": "tui"})
    person = EndUser.objects.get(tenant=tenant, external_id="ana")
    found = recall.message_recall(tenant=tenant, end_user=person, query="kitchen sister", top_k=5)
    assert found.hits
    for item in found.hits:
        record = item.message
        assert isinstance(record, recall.RecalledMessage)
        stored = Message.objects.get(pk=record.id)
        # Every field the API, the MCP tools and the search page read, as the ORM loads it.
        assert record._asdict() == {name: getattr(stored, name) for name in record._fields}
        assert record.metadata == {"via": "tui"}
        assert (record.pk, record.get_role_display()) == (stored.pk, stored.get_role_display())


def test_a_search_by_user_id_reads_the_person_with_the_token(
    owner, tenant, django_assert_num_queries
):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    recall.messages_search(tenant=tenant, query="kitchen", mode="lexical", user_id="ana")
    # Warm: the person and their version token in one statement, then the hits' rows.
    with django_assert_num_queries(2):
        found = recall.messages_search(
            tenant=tenant, query="kitchen sister", mode="lexical", user_id="ana"
        )
    assert [item.message.content for item in found.hits][:1] == [TURNS[0][1]]
    for unknown in ("bob", "a\x00b", "x" * 10_000):
        with pytest.raises(ResourceNotFound):
            recall.messages_search(tenant=tenant, query="kitchen", user_id=unknown)


def test_fields_build_messages_through_from_db_when_an_init_receiver_listens(owner, tenant):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    person = EndUser.objects.get(tenant=tenant, external_id="ana")
    built = []

    def receiver(sender, instance, **kwargs):
        built.append(instance)

    post_init.connect(receiver, sender=Message)
    try:
        found = recall.message_recall(
            tenant=tenant, end_user=person, query="kitchen sister", top_k=5, fields=("seq",)
        )
    finally:
        post_init.disconnect(receiver, sender=Message)
    assert found.hits
    assert {id(item.message) for item in found.hits} <= {id(instance) for instance in built}
    message = found.hits[0].message
    assert message.get_deferred_fields() >= {"content", "metadata", "created_at"}


def test_a_long_history_ranked_on_the_first_pass_answers_as_the_product_does(owner, monkeypatch):
    """From SIGN_BITS_FROM_ROWS messages a person (50,000) a hybrid search ranks on the first
    pass over the vectors' sign bits: lowered here so that five turns take that path."""
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    product = search(owner, q="does she have a dog?", user_id="ana")
    recall.index_cache().clear()
    monkeypatch.setattr(recall_index, "SIGN_BITS_FROM_ROWS", 0)
    passes: list[int] = []
    first_pass = recall_hybrid._first_pass_cosine

    def watched(*args, **kwargs):
        passes.append(1)
        return first_pass(*args, **kwargs)

    monkeypatch.setattr(recall_hybrid, "_first_pass_cosine", watched)

    answer = search(owner, q="does she have a dog?", user_id="ana")
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat()
    filtered_out = search(owner, q="does she have a dog?", user_id="ana", since=future)

    assert len(passes) == 2
    assert answer["mode"] == "hybrid"
    assert contents(answer)[0] == PUPPY
    # Five turns are all computed exactly (the stride sample holds every row): the same answer.
    assert answer["results"] == product["results"]
    assert filtered_out["results"] == []
