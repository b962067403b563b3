"""Hybrid search over a person's facts through GET /facts/search/: found by its words at once, by
its meaning once the worker has embedded it, never from another tenant, and never from a stale
cache after a create, an edit, a delete, a supersede or an erasure."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import call_command
from django.utils import timezone

from facts_app import embedding, recall
from facts_app.models import Fact, FactVector
from facts_app.selectors.facts import FactFilters, fact_recall_for_person
from facts_app.services.facts import fact_create
from memoryhub.accounts.models import AuditEvent, EndUser
from memoryhub.llm import embeddings
from memoryhub.llm.embeddings import clear_query_cache, get_embedder
from tests.helpers import client_for, error_code, error_fields

FACTS = "/api/v1/facts/"
SEARCH = "/api/v1/facts/search/"
USER = "ana"

# Real commits: a write asks for its vector on commit, after the response, and the eager
# "worker" then embeds, as a real worker would a moment later.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_recall_cache():
    recall.index_cache().clear()
    yield
    recall.index_cache().clear()


@pytest.fixture
def owner(tenant, make_key):
    return client_for(make_key(tenant, scopes=["read", "write", "purge"])[1])


PUPPY = "Alice adopted a puppy last spring"
OTHERS = [
    "Works as a nurse on night shifts",
    "Her favourite colour is green",
    "Is learning to play the trombone",
]


def post(api, content, user=USER, **fields):
    response = api.post(FACTS, {"content": content, "user_id": user, **fields}, format="json")
    assert response.status_code in (200, 201), response.content
    return response.json()


def search(api, **params):
    response = api.get(SEARCH, params)
    assert response.status_code == 200, response.content
    return response.json()


def contents(body) -> list[str]:
    return [hit["fact"]["content"] for hit in body["results"]]


@pytest.fixture
def facts(owner):
    return [post(owner, text) for text in [PUPPY, *OTHERS]]


def test_a_fact_is_found_by_its_words_at_once_and_by_its_meaning_once_embedded(
    owner, tenant, settings
):
    # The worker has not run yet (embeddings off while writing: no vector is asked for).
    settings.EMBEDDINGS_BACKEND = "off"
    post(owner, PUPPY)
    settings.EMBEDDINGS_BACKEND = "onnx"
    assert not FactVector.objects.exists()

    found = search(owner, q="puppy", user_id=USER)
    assert (found["mode"], contents(found)) == ("lexical", [PUPPY])
    assert search(owner, q="does the user have a dog", user_id=USER, mode="semantic") == {
        "mode": "semantic",
        "results": [],
    }

    assert embedding.fact_vectors_compute(tenant_id=tenant.pk) == 1  # what the worker does

    semantic = search(owner, q="does the user have a dog", user_id=USER, mode="semantic")
    assert contents(semantic) == [PUPPY]
    assert semantic["results"][0]["signals"]["semantic"] is True


def test_a_paraphrase_is_found_by_meaning_not_by_words(owner, facts):
    question = "does the user have a dog"

    hybrid = search(owner, q=question, user_id=USER)
    semantic = search(owner, q=question, user_id=USER, mode="semantic")
    lexical = search(owner, q=question, user_id=USER, mode="lexical")

    # Tests run the worker eagerly after the response: every fact has its vector now.
    assert FactVector.objects.count() == 4
    assert hybrid["mode"] == "hybrid"
    assert contents(hybrid)[0] == PUPPY
    hit = hybrid["results"][0]
    assert hit["signals"] == {
        "lexical": False,
        "semantic": True,
        "speaker": False,
        "date": False,
        "when": False,
    }
    assert hit["dense_score"] >= recall.SEMANTIC_MIN_COSINE
    assert contents(semantic)[0] == PUPPY
    assert PUPPY not in contents(lexical)
    # Unrelated facts are not padding for the list: meaning alone must come close.
    assert "Her favourite colour is green" not in contents(hybrid)


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_a_query_that_cannot_be_embedded_degrades_to_words_and_says_so(
    owner, facts, monkeypatch, mode
):
    assert FactVector.objects.count() == 4  # the person's facts have their vectors
    clear_query_cache()

    def endpoint_down(text: str, **kwargs: object) -> object:
        raise embeddings.EmbeddingTransientError("the endpoint is down")

    monkeypatch.setattr(embeddings, "embed_query_cached", endpoint_down)
    found = search(owner, q="trombone", user_id=USER, mode=mode)

    if mode == "hybrid":
        assert (found["mode"], contents(found)) == ("lexical", [OTHERS[2]])
    else:
        assert found == {"mode": "semantic", "results": []}


def test_the_response_keeps_its_keys_and_says_which_mode_ran(owner, facts):
    body = search(owner, q="trombone", user_id=USER)

    assert set(body) == {"mode", "results"}
    hit = body["results"][0]
    assert set(hit) == {"score", "lexical_score", "dense_score", "signals", "fact"}
    assert hit["fact"]["content"] == "Is learning to play the trombone"
    assert hit["signals"]["lexical"] is True
    # Across the tenant it is the database's search, lexical.
    assert search(owner, q="trombone")["mode"] == "lexical"
    assert contents(search(owner, q="trombone")) == ["Is learning to play the trombone"]


def test_semantic_search_without_a_person_is_a_clear_400(owner, facts):
    response = owner.get(SEARCH, {"q": "dog", "mode": "semantic"})

    assert response.status_code == 400
    assert error_fields(response)["mode"][0]["code"] == "person_required"


def test_an_unknown_mode_is_a_400(owner):
    response = owner.get(SEARCH, {"q": "dog", "user_id": USER, "mode": "fuzzy"})

    assert response.status_code == 400
    assert "mode" in error_fields(response)


def test_a_model_change_makes_old_vectors_missing_and_embed_memory_redoes_them(
    owner, tenant, facts, monkeypatch
):
    embedder = get_embedder()
    assert embedder is not None
    assert FactVector.objects.filter(model=embedder.model_name).count() == 4
    monkeypatch.setattr(embedder, "model_name", "another-model")
    clear_query_cache()

    missing = Fact.objects.filter(embedding.facts_without_vector(embedder=embedder))
    assert missing.count() == 4
    # Vectors of another model do not answer: the search runs on words until re-embedded.
    assert search(owner, q="does the user have a dog", user_id=USER)["mode"] == "lexical"

    call_command("embed_memory", "--tenant", tenant.slug, "--no-progress")

    assert set(FactVector.objects.values_list("model", flat=True)) == {"another-model"}
    assert not missing.exists()
    hybrid = search(owner, q="does the user have a dog", user_id=USER)
    assert (hybrid["mode"], contents(hybrid)[0]) == ("hybrid", PUPPY)


class TestTheCacheNeverAnswersForWhatChanged:
    def test_create(self, owner, facts):
        assert search(owner, q="kayaking", user_id=USER)["results"] == []

        post(owner, "Goes kayaking on Sundays")

        assert contents(search(owner, q="kayaking", user_id=USER)) == ["Goes kayaking on Sundays"]

    def test_edit(self, owner, facts):
        trombone = facts[3]
        assert contents(search(owner, q="trombone", user_id=USER))[0] == trombone["content"]

        patched = owner.patch(
            f"{FACTS}{trombone['id']}/", {"content": "Is learning the cello"}, format="json"
        )

        assert patched.status_code == 200
        assert "Is learning to play the trombone" not in contents(
            search(owner, q="trombone", user_id=USER, mode="lexical")
        )
        assert contents(search(owner, q="cello", user_id=USER))[0] == "Is learning the cello"
        # The new text was embedded again after the edit, not left with the old text's vector.
        vector = FactVector.objects.get(fact_id=trombone["id"])
        assert vector.created_at >= Fact.objects.get(pk=trombone["id"]).updated_at

    def test_delete(self, owner, facts):
        assert search(owner, q="trombone", user_id=USER)["results"]

        owner.delete(f"{FACTS}{facts[3]['id']}/")

        assert "Is learning to play the trombone" not in contents(
            search(owner, q="trombone", user_id=USER)
        )
        assert not FactVector.objects.filter(fact_id=facts[3]["id"]).exists()

    def test_supersede(self, owner, facts):
        nurse = facts[1]
        assert contents(search(owner, q="nurse", user_id=USER)) == [nurse["content"]]

        doctor = post(owner, "Works as a doctor now", supersedes=nurse["id"])

        found = search(owner, q="works", user_id=USER)
        assert [hit["fact"]["id"] for hit in found["results"]] == [doctor["id"]]
        everything = search(owner, q="works", user_id=USER, include_superseded="true")
        assert {hit["fact"]["id"] for hit in everything["results"]} == {nurse["id"], doctor["id"]}

    def test_erasure(self, owner, tenant, facts):
        person = EndUser.objects.get(tenant=tenant, external_id=USER)
        assert fact_recall_for_person(tenant=tenant, end_user_id=person.pk, query="trombone")

        assert owner.delete(f"/api/v1/users/{USER}/").status_code == 200

        # The person's text never comes back: not as a hit, and not kept in the cache.
        assert fact_recall_for_person(tenant=tenant, end_user_id=person.pk, query="trombone") == []
        key = ("facts", tenant.pk, person.pk, get_embedder().model_name, FactFilters())
        assert recall.index_cache().peek(key) is None
        assert not FactVector.objects.exists()
        # Vectors are derived rows: not a kind of their own in the erasure's counts.
        counts = AuditEvent.objects.get(object_id=USER, action="erase").counts
        assert counts["facts"] == 4
        assert "fact_vectors" not in counts


class TestOutsider:
    @pytest.mark.parametrize("mode", ["hybrid", "lexical", "semantic"])
    def test_a_person_of_another_tenant_is_a_404_in_every_mode(self, outsider_api, facts, mode):
        response = outsider_api.get(SEARCH, {"q": "dog puppy", "user_id": USER, "mode": mode})

        assert response.status_code == 404
        assert error_code(response) == "not_found"

    @pytest.mark.parametrize("mode", ["hybrid", "lexical"])
    def test_the_tenant_wide_search_shows_none_of_their_facts(
        self, outsider_api, other_tenant, facts, mode
    ):
        fact_create(tenant=other_tenant, end_user=None, content="Outsider knows nothing of dogs")

        found = search(outsider_api, q="puppy dog nurse trombone", mode=mode)

        assert contents(found) == ["Outsider knows nothing of dogs"]

    @pytest.mark.parametrize("mode", ["hybrid", "lexical", "semantic"])
    def test_their_own_person_of_the_same_id_finds_only_their_facts(
        self, outsider_api, facts, mode
    ):
        post(outsider_api, "Has a puppy called Miso")

        found = search(outsider_api, q="puppy adopted last spring", user_id=USER, mode=mode)

        assert contents(found) == ["Has a puppy called Miso"]


def test_a_vector_of_a_text_changed_while_it_was_embedded_is_not_stored(tenant, monkeypatch):
    fact, _ = fact_create(tenant=tenant, end_user=None, content="Likes green tea")
    FactVector.objects.all().delete()
    embedder = get_embedder()
    real = embedder.embed_passages

    def edit_meanwhile(texts):
        # An edit lands while the worker embeds the old text.
        Fact.objects.filter(pk=fact.pk).update(content="Likes black coffee")
        return real(texts)

    monkeypatch.setattr(embedder, "embed_passages", edit_meanwhile)

    assert embedding.fact_vectors_compute(tenant_id=tenant.pk, fact_ids=[fact.pk]) == 0
    assert not FactVector.objects.exists()


def test_the_sweep_embeds_recent_rows_whose_task_was_lost(tenant, settings):
    settings.EMBEDDINGS_BACKEND = "off"  # no request made: as if the enqueue had been lost
    recent, _ = fact_create(tenant=tenant, end_user=None, content="Office closes at six")
    old, _ = fact_create(tenant=tenant, end_user=None, content="Office opened in 1999")
    Fact.objects.filter(pk=old.pk).update(updated_at=timezone.now() - dt.timedelta(days=2))
    settings.EMBEDDINGS_BACKEND = "onnx"

    assert embedding.embeddings_sweep() == 1

    assert list(FactVector.objects.values_list("fact_id", flat=True)) == [recent.pk]
    assert embedding.embeddings_sweep() == 0  # idempotent: nothing left in its window
