"""Recall with the dense side in pgvector: run by test_pgvector.py in a pytest subprocess whose
database is pgserver's PostgreSQL with pgvector. Not collected by the normal run (the file name
does not start with test_); on any other database it skips.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from functools import partial

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from memoryhub.accounts.models import EndUser, Tenant
from memoryhub.llm.embeddings import embed_query_cached, get_embedder
from sessions_app import pgvector, recall
from sessions_app.models import Message, MessageVector
from tests.helpers import client_for
from tests.sessions_app import test_message_recall
from tests.sessions_app.test_message_recall import PUPPY, SEARCH, TURNS, chat, contents, search

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL with pgvector"),
]

PARAPHRASE = "does she have a dog?"


@pytest.fixture(autouse=True)
def _fresh_recall_cache() -> Iterator[None]:
    recall.index_cache().clear()
    yield
    recall.index_cache().clear()


@pytest.fixture(autouse=True)
def _the_database_ranks_everyone(settings) -> None:
    # These scenarios' people have a few messages; by default a person under
    # RECALL_PGVECTOR_FROM_MESSAGES is ranked in process, so the database's path is forced here
    # (the tests of the threshold set it themselves).
    settings.RECALL_PGVECTOR_FROM_MESSAGES = 0


@pytest.fixture
def owner(tenant, make_key):
    return client_for(make_key(tenant, scopes=["read", "write", "purge"])[1])


def person(tenant: Tenant, external_id: str) -> EndUser:
    return EndUser.objects.get(tenant=tenant, external_id=external_id)


def embeddings(tenant: Tenant) -> dict[int, np.ndarray | None]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT message_id, embedding::text FROM sessions_app_messagevector "
            "WHERE tenant_id = %s",
            [tenant.pk],
        )
        return {
            message_id: None if text is None else np.asarray(json.loads(text), dtype=np.float32)
            for message_id, text in cursor.fetchall()
        }


def test_the_migration_added_the_column_and_its_hnsw_index() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT format_type(atttypid, atttypmod), attstorage FROM pg_attribute "
            "WHERE attrelid = 'sessions_app_messagevector'::regclass AND attname = 'embedding'"
        )
        assert cursor.fetchone() == ("vector(384)", "p")  # plain: kept in the row
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'sessions_app_messagevector' "
            "AND indexname = 'messagevector_embedding_hnsw'"
        )
        (definition,) = cursor.fetchone()
    assert "USING hnsw (embedding vector_cosine_ops)" in definition
    assert pgvector.pgvector_enabled()


def test_the_worker_fills_the_embedding_of_every_appended_turn(owner, tenant) -> None:
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)

    blobs = dict(MessageVector.objects.filter(tenant=tenant).values_list("message_id", "vector"))
    stored = embeddings(tenant)
    assert len(stored) == len(TURNS)
    for message_id, blob in blobs.items():
        vector = stored[message_id]
        assert vector is not None
        # The same float32 values as the blob, exactly.
        np.testing.assert_array_equal(vector, np.frombuffer(bytes(blob), dtype="<f4"))


def test_a_vector_of_another_size_leaves_the_embedding_null(owner, tenant) -> None:
    chat(owner, user_id="ana", key="ana:1", turns=TURNS[:1])
    (message_id,) = Message.objects.filter(tenant=tenant).values_list("pk", flat=True)
    other = np.ones(1536, dtype="<f4").tobytes()
    MessageVector.objects.filter(pk=message_id).update(model="openai:big:1536", vector=other)

    pgvector.embeddings_store(vectors=[(message_id, other)])

    assert embeddings(tenant) == {message_id: None}


def _asks_the_database(queries: CaptureQueriesContext) -> bool:
    return any("<=>" in query["sql"] for query in queries.captured_queries)


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_a_paraphrase_finds_its_turn_with_the_dense_side_from_the_database(
    owner, tenant, mode
) -> None:
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)

    with CaptureQueriesContext(connection) as queries:
        body = search(owner, q=PARAPHRASE, user_id="ana", mode=mode)

    assert body["mode"] == mode
    assert contents(body)[0] == PUPPY
    top = body["results"][0]
    assert top["signals"]["semantic"] is True
    assert _asks_the_database(queries)
    # The process holds no vector: the index it searched has none.
    index = recall.person_index(tenant_id=tenant.pk, end_user_id=person(tenant, "ana").pk)
    assert index is not None
    assert index.vectors is None
    # The cosine is the database's, and the same as the one computed here.
    puppy = MessageVector.objects.get(message__content=PUPPY)
    own = float(np.frombuffer(bytes(puppy.vector), dtype="<f4") @ embed_query_cached(PARAPHRASE))
    assert top["dense_score"] == pytest.approx(own, abs=1e-5)
    # No word of the question is in the answer: words alone cannot find it.
    assert PUPPY not in contents(search(owner, q=PARAPHRASE, user_id="ana", mode="lexical"))


def test_the_contexts_history_finds_a_paraphrase_with_the_dense_side_from_the_database(
    owner, tenant
) -> None:
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    later = chat(owner, user_id="ana", key="ana:2", turns=[("user", "Good morning!")])

    with CaptureQueriesContext(connection) as queries:
        response = owner.get(f"/api/v1/sessions/{later}/context/", {"query": PARAPHRASE})

    assert response.status_code == 200, response.content
    body = response.json()
    history = next(s for s in body["sections"] if s["name"] == "history")
    assert f"history:{Message.objects.get(content=PUPPY).pk}" in history["included"]
    assert PUPPY in body["content"]
    assert _asks_the_database(queries)


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_a_person_under_the_threshold_is_ranked_in_process_as_the_database_ranks(
    owner, tenant, settings, mode
) -> None:
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    by_database = search(owner, q=PARAPHRASE, user_id="ana", mode=mode)
    recall.index_cache().clear()
    settings.RECALL_PGVECTOR_FROM_MESSAGES = len(TURNS) + 1

    with CaptureQueriesContext(connection) as queries:
        in_process = search(owner, q=PARAPHRASE, user_id="ana", mode=mode)

    assert not _asks_the_database(queries)
    index = recall.person_index(tenant_id=tenant.pk, end_user_id=person(tenant, "ana").pk)
    assert index is not None
    assert index.vectors is not None
    assert in_process["mode"] == mode
    assert contents(in_process) == contents(by_database)
    assert contents(in_process)[0] == PUPPY
    # The index's cosines are int8 codes' products: the database's to two decimals.
    for ours, theirs in zip(in_process["results"], by_database["results"], strict=True):
        assert ours["dense_score"] == pytest.approx(theirs["dense_score"], abs=1e-2)


def test_the_contexts_history_of_a_person_under_the_threshold_is_ranked_in_process(
    owner, tenant, settings
) -> None:
    settings.RECALL_PGVECTOR_FROM_MESSAGES = 100
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    later = chat(owner, user_id="ana", key="ana:2", turns=[("user", "Good morning!")])

    with CaptureQueriesContext(connection) as queries:
        response = owner.get(f"/api/v1/sessions/{later}/context/", {"query": PARAPHRASE})

    assert response.status_code == 200, response.content
    history = next(s for s in response.json()["sections"] if s["name"] == "history")
    assert f"history:{Message.objects.get(content=PUPPY).pk}" in history["included"]
    assert not _asks_the_database(queries)


def test_an_index_keeps_its_vectors_as_it_grows_and_a_whole_build_past_the_threshold_drops_them(
    owner, tenant, settings
) -> None:
    settings.RECALL_PGVECTOR_FROM_MESSAGES = len(TURNS) + 2
    session_id = chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    other = chat(owner, user_id="ana", key="ana:2", turns=[("user", "Good morning!")])
    ana = person(tenant, "ana").pk
    assert contents(search(owner, q=PARAPHRASE, user_id="ana", mode="semantic"))[0] == PUPPY
    extra = [("user", "We walk Biscuit by the river."), ("assistant", "Sounds lovely.")]
    appended = owner.post(
        f"/api/v1/sessions/{session_id}/messages/",
        {"messages": [{"role": role, "content": content} for role, content in extra]},
        format="json",
    )
    assert appended.status_code in (200, 201), appended.content

    # Past the threshold by appends: extended, still in process, the new turns' vectors in it.
    with CaptureQueriesContext(connection) as queries:
        found = contents(
            search(owner, q="walking the dog by the water", user_id="ana", mode="semantic")
        )
    assert not _asks_the_database(queries)
    assert found[0] == extra[0][1]
    index = recall.person_index(tenant_id=tenant.pk, end_user_id=ana)
    assert index is not None
    assert index.vectors is not None
    assert len(index) == len(TURNS) + 3

    # A removal builds the whole index again: at the threshold, the database ranks.
    assert owner.delete(f"/api/v1/sessions/{other}/").status_code in (200, 204)
    with CaptureQueriesContext(connection) as queries:
        found = contents(search(owner, q=PARAPHRASE, user_id="ana", mode="semantic"))
    assert _asks_the_database(queries)
    assert found[0] == PUPPY
    index = recall.person_index(tenant_id=tenant.pk, end_user_id=ana)
    assert index is not None
    assert index.vectors is None
    assert len(index) == len(TURNS) + 2


def test_a_lexical_match_beyond_the_nearest_gets_its_own_cosine(owner, tenant, monkeypatch) -> None:
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    # A long history in miniature: the database returns one nearest message, not 1,000.
    real = recall.nearest_messages
    calls: list[dict] = []

    def nearest_one(**kwargs):
        calls.append(kwargs)
        return real(**{**kwargs, "limit": 1})

    monkeypatch.setattr(recall, "nearest_messages", nearest_one)
    query = f"{PARAPHRASE} weekend"
    kitchen = Message.objects.get(content=TURNS[0][1])

    with CaptureQueriesContext(connection) as queries:
        body = search(owner, q=query, user_id="ana", mode="hybrid")

    query_vector = embed_query_cached(query)
    own = {
        vector.message_id: float(np.frombuffer(bytes(vector.vector), dtype="<f4") @ query_vector)
        for vector in MessageVector.objects.filter(tenant=tenant)
    }
    assert own[kitchen.pk] < max(own.values())  # not the nearest: the dog is
    hit = next(hit for hit in body["results"] if hit["message"]["id"] == kitchen.pk)
    assert hit["signals"]["lexical"] is True
    assert hit["signals"]["semantic"] is True
    assert hit["dense_score"] == pytest.approx(own[kitchen.pk], abs=1e-5)
    assert kitchen.pk in calls[0]["also_ids"]
    assert len([q for q in queries.captured_queries if "<=>" in q["sql"]]) == 1


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_a_query_that_cannot_be_embedded_degrades_to_words_here_too(
    owner, monkeypatch, mode
) -> None:
    # The dense side is asked for inside rank now: the search must still tell it ran lexical.
    test_message_recall.test_a_query_that_cannot_be_embedded_degrades_to_words_and_says_so(
        owner, monkeypatch, mode
    )


def test_the_database_filters_run_before_the_nearest_are_taken(owner, tenant) -> None:
    session_id = chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    chat(owner, user_id="ana", key="ana:2", turns=[("user", "Our neighbours own two dogs.")])

    body = search(owner, q=PARAPHRASE, user_id="ana", mode="semantic", session_id=session_id)
    assert len(body["results"]) == len(TURNS)
    assert contents(body)[0] == PUPPY
    body = search(owner, q=PARAPHRASE, user_id="ana", mode="semantic", role="assistant")
    assert {hit["message"]["role"] for hit in body["results"]} == {"assistant"}


@pytest.mark.parametrize("route", ["exact", "hnsw"])
def test_another_tenants_or_persons_vectors_are_never_candidates(
    owner, outsider_api, tenant, other_tenant, route
) -> None:
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    chat(owner, user_id="bo", key="bo:1", turns=[("user", "I also have a golden retriever.")])
    # The same external id in another tenant: another person.
    chat(outsider_api, user_id="ana", key="ana:1", turns=[("user", "Our dog is a retriever.")])
    ana = person(tenant, "ana")
    embedder = get_embedder()
    assert embedder is not None
    anas_nearest = partial(
        pgvector.nearest_messages,
        tenant_id=tenant.pk,
        end_user_id=ana.pk,
        model=embedder.model_name,
        query_vector=embed_query_cached(PARAPHRASE),
        person_messages=0 if route == "exact" else pgvector.HNSW_FROM_MESSAGES,
    )

    with transaction.atomic(), connection.cursor() as cursor:
        # A table this small is read whole and sorted; make the planner prefer any index that
        # gives the order, as it would for a person who is most of a large table.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        with CaptureQueriesContext(connection) as queries:
            nearest = anas_nearest(limit=1000)
        cursor.execute("EXPLAIN " + next(q["sql"] for q in queries if "<=>" in q["sql"]))
        plan = "\n".join(row[0] for row in cursor.fetchall())
        # Below the threshold the order is one no vector index can serve: exact, always.
        assert ("messagevector_embedding_hnsw" in plan) is (route == "hnsw"), plan
        if route == "hnsw":
            cursor.execute("SHOW hnsw.iterative_scan")
            assert cursor.fetchone() == ("strict_order",)

    anas = set(
        Message.objects.filter(tenant=tenant, session__end_user=ana).values_list("pk", flat=True)
    )
    assert set(nearest) == anas
    assert list(nearest.values()) == sorted(nearest.values(), reverse=True)
    # The ids rank asks for besides the nearest are filtered as the nearest are: every message
    # in the database asked for, only Ana's come back.
    asked = anas_nearest(limit=1, also_ids=list(Message.objects.values_list("pk", flat=True)))
    assert set(asked) == anas
    assert asked == {message_id: nearest[message_id] for message_id in asked}
    for mode in ("hybrid", "semantic"):
        found = contents(search(owner, q="a dog, a retriever", user_id="ana", mode=mode))
        assert "I also have a golden retriever." not in found
        assert "Our dog is a retriever." not in found
    outsider = outsider_api.get(SEARCH, {"q": PARAPHRASE, "user_id": "ana", "mode": "semantic"})
    assert contents(outsider.json()) == ["Our dog is a retriever."]


def test_deleted_messages_take_their_vectors_with_them(owner, tenant) -> None:
    session_id = chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    assert contents(search(owner, q=PARAPHRASE, user_id="ana", mode="semantic"))[0] == PUPPY

    Message.objects.filter(content=PUPPY).delete()
    assert len(embeddings(tenant)) == len(TURNS) - 1
    assert PUPPY not in contents(search(owner, q=PARAPHRASE, user_id="ana", mode="semantic"))

    assert owner.delete(f"/api/v1/sessions/{session_id}/").status_code in (200, 204)
    assert embeddings(tenant) == {}


def test_a_role_that_may_not_create_the_extension_migrates_without_it(caplog) -> None:
    # CI's PostgreSQL runs the suite as a non-superuser, and pgvector is not a trusted extension.
    # Here it is available (in the maintenance database it is not created yet): the refusal
    # must leave the migration's transaction usable.
    with connection.cursor() as cursor:
        cursor.execute("CREATE ROLE memoryhub_plain LOGIN NOSUPERUSER")
    plain = {**connection.settings_dict, "NAME": "postgres", "USER": "memoryhub_plain"}
    connections["plain"] = type(connections["default"])(plain, alias="plain")
    try:
        migration = importlib.import_module("sessions_app.migrations.0008_message_vector_pgvector")
        with connections["plain"].schema_editor() as editor:
            with connections["plain"].cursor() as cursor:
                # Temporary, gone with the transaction: the role may create nothing else there.
                cursor.execute(
                    "CREATE TEMPORARY TABLE sessions_app_messagevector "
                    "(message_id bigint, vector bytea) ON COMMIT DROP"
                )
            migration.add_embedding_column(None, editor)
            assert "pgvector is available but could not be created" in caplog.text
            with connections["plain"].cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'")
                assert cursor.fetchone() == (0,)
                cursor.execute(
                    "SELECT count(*) FROM pg_attribute WHERE attname = 'embedding' "
                    "AND attrelid = 'sessions_app_messagevector'::regclass"
                )
                assert cursor.fetchone() == (0,)
    finally:
        connections["plain"].close()
        del connections["plain"]
        with connection.cursor() as cursor:
            cursor.execute("DROP ROLE IF EXISTS memoryhub_plain")


def test_the_migration_fills_the_column_from_vectors_stored_before(owner, tenant) -> None:
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    before = embeddings(tenant)

    # pgvector installed after the vectors were made: migrate back and forth.
    call_command("migrate", "sessions_app", "0007", verbosity=0)
    assert not _has_column()
    call_command("migrate", "sessions_app", verbosity=0)

    after = embeddings(tenant)
    assert after.keys() == before.keys()
    for message_id, vector in before.items():
        np.testing.assert_array_equal(after[message_id], vector)


def _has_column() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM information_schema.columns "
            "WHERE table_name = 'sessions_app_messagevector' AND column_name = 'embedding'"
        )
        return cursor.fetchone() is not None
