"""A person's warm index takes in new turns and new vectors without reading and analysing their
whole history again (which cost ~0.3 s of CPU per 10,000 messages after every turn of a chat),
and is then the index a whole rebuild gives; anything removed, or history that sorts before
what the index holds, still rebuilds it from the whole history."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryhub.accounts.models import EndUser
from memoryhub.accounts.services import end_user_recall_touch
from sessions_app import recall
from sessions_app.models import MessageVector
from tests.core.test_recall_index_standalone import assert_same_index
from tests.helpers import client_for
from tests.sessions_app.test_message_recall import TURNS, chat, contents, search

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_recall_cache():
    recall.index_cache().clear()
    yield
    recall.index_cache().clear()


@pytest.fixture
def owner(tenant, make_key):
    return client_for(make_key(tenant, scopes=["read", "write", "purge"])[1])


@pytest.fixture
def builds(monkeypatch) -> list[int]:
    """The sizes of the whole-history builds of any index."""
    built: list[int] = []
    build = recall.RecallIndex.build
    monkeypatch.setattr(
        recall.RecallIndex,
        "build",
        lambda docs, **options: built.append(len(docs)) or build(docs, **options),
    )
    return built


def append(api, session_id: str, content: str, **extra) -> None:
    response = api.post(
        f"/api/v1/sessions/{session_id}/messages/",
        {"role": "user", "content": content, **extra},
        format="json",
    )
    assert response.status_code == 201, response.content


def cached_index(tenant, user_id: str = "ana") -> recall.RecallIndex:
    person = EndUser.objects.get(tenant=tenant, external_id=user_id)
    entry = recall.index_cache().peek(("messages", tenant.pk, person.pk))
    assert entry is not None
    return entry[1]


def assert_is_a_fresh_build(tenant, user_id: str = "ana") -> None:
    person = EndUser.objects.get(tenant=tenant, external_id=user_id)
    fresh = recall.RecallIndex.build(
        recall._docs_for_person(tenant_id=tenant.pk, end_user_id=person.pk)
    )
    assert_same_index(cached_index(tenant, user_id), fresh)


def test_an_append_extends_the_warm_index_and_reads_only_the_new_rows(owner, tenant, builds):
    session_id = chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    assert search(owner, q="trombone", user_id="ana", mode="lexical")["results"] == []
    assert builds == [len(TURNS)]

    append(owner, session_id, "I started trombone lessons.")
    with CaptureQueriesContext(connection) as captured:
        found = search(owner, q="trombone", user_id="ana")

    assert contents(found)[0] == "I started trombone lessons."
    assert builds == [len(TURNS)]  # extended, not built again
    reads = [q["sql"] for q in captured.captured_queries if 'sessions_app_message"' in q["sql"]]
    # The new turn by its session and seq; no read of the person's whole history.
    assert any('"seq" >' in sql for sql in reads)
    assert not any('"end_user_id"' in sql and "ORDER BY" in sql for sql in reads), reads
    # With its vector, made by the (eager) worker after the append's response.
    assert found["mode"] == "hybrid"
    assert MessageVector.objects.filter(tenant=tenant).count() == len(TURNS) + 1
    assert cached_index(tenant).vector_mask.all()
    assert_is_a_fresh_build(tenant)


def test_a_new_session_of_the_person_extends_it_too(owner, tenant, builds):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    search(owner, q="kitchen", user_id="ana")

    chat(owner, user_id="ana", key="ana:2", turns=[("user", "We moved to Porto in June.")])
    found = search(owner, q="Porto", user_id="ana")

    assert contents(found)[0] == "We moved to Porto in June."
    assert builds == [len(TURNS)]
    assert_is_a_fresh_build(tenant)


def test_new_vectors_alone_fill_the_index_after_the_response(owner, tenant, builds):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    vectors = list(MessageVector.objects.filter(tenant=tenant))
    MessageVector.objects.filter(tenant=tenant).delete()
    end_user_recall_touch(tenant=tenant)
    assert search(owner, q="golden retriever", user_id="ana")["mode"] == "lexical"
    MessageVector.objects.bulk_create(vectors)
    end_user_recall_touch(tenant=tenant, vectors_only=True)

    assert search(owner, q="golden retriever", user_id="ana")["mode"] == "lexical"  # once more
    assert search(owner, q="golden retriever", user_id="ana")["mode"] == "hybrid"

    assert builds == [len(TURNS)]
    assert_is_a_fresh_build(tenant)


def test_the_contexts_refresh_after_the_response_extends(owner, tenant, builds):
    session_id = chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    other = chat(owner, user_id="ana", key="ana:2", turns=[("user", "Hello again.")])
    context = f"/api/v1/sessions/{other}/context/"
    assert owner.get(context, {"query": "kitchen"}).status_code == 200

    append(owner, session_id, "The trombone teacher is called Rui.")
    for _ in range(2):  # the warm index once more, then the refreshed one
        body = owner.get(context, {"query": "who teaches the trombone?"}).json()

    assert "The trombone teacher is called Rui." in body["content"]
    assert builds == [len(TURNS) + 1]
    assert_is_a_fresh_build(tenant)


def test_a_removal_builds_from_the_whole_history(owner, tenant, builds):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    doomed = chat(owner, user_id="ana", key="ana:2", turns=[("user", "I hate olives.")])
    assert contents(search(owner, q="olives", user_id="ana"))

    assert owner.delete(f"/api/v1/sessions/{doomed}/").status_code == 204

    assert search(owner, q="olives", user_id="ana", mode="lexical")["results"] == []
    assert builds == [len(TURNS) + 1, len(TURNS)]
    assert_is_a_fresh_build(tenant)


def test_history_older_than_what_the_index_holds_builds_it_whole(owner, tenant, builds):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    search(owner, q="kitchen", user_id="ana")
    # An import of an earlier conversation: a whole build orders the person's messages by
    # time, so this turn belongs before the others, not after them.
    chat(
        owner,
        user_id="ana",
        key="ana:old",
        turns=[("user", "Back in 2019 I lived in Lyon.")],
        created_at=(dt.datetime.now(dt.UTC) - dt.timedelta(days=400)).isoformat(),
    )

    assert contents(search(owner, q="Lyon", user_id="ana"))[0] == "Back in 2019 I lived in Lyon."
    assert builds == [len(TURNS), len(TURNS) + 1]
    index = cached_index(tenant)
    assert index.ids[0] == max(index.ids)  # the newest row, first in time
    assert_is_a_fresh_build(tenant)


def test_another_persons_turns_never_enter_the_index(owner, tenant, builds):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    search(owner, q="kitchen", user_id="ana")

    chat(owner, user_id="bea", key="bea:1", turns=[("user", "My trombone is blue.")])
    chat(owner, user_id="ana", key="ana:2", turns=[("user", "Nothing new.")])

    assert search(owner, q="trombone", user_id="ana", mode="lexical")["results"] == []
    assert_is_a_fresh_build(tenant)


def test_more_sessions_moved_than_the_bound_builds_it_whole(owner, tenant, builds, monkeypatch):
    session_id = chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    search(owner, q="kitchen", user_id="ana")
    monkeypatch.setattr(recall, "EXTEND_MAX_SESSIONS", 0)

    append(owner, session_id, "I started trombone lessons.")

    assert contents(search(owner, q="trombone", user_id="ana", mode="lexical"))
    assert builds == [len(TURNS), len(TURNS) + 1]
    assert_is_a_fresh_build(tenant)


def test_more_messages_without_a_vector_than_the_bound_builds_it_whole(
    owner, tenant, builds, monkeypatch
):
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    later = MessageVector.objects.filter(tenant=tenant).first()
    assert later is not None
    MessageVector.objects.filter(pk=later.pk).delete()
    end_user_recall_touch(tenant=tenant)
    search(owner, q="kitchen", user_id="ana")  # built without that vector
    monkeypatch.setattr(recall, "EXTEND_MAX_MISSING_VECTORS", 0)

    MessageVector.objects.bulk_create([later])
    end_user_recall_touch(tenant=tenant, vectors_only=True)
    for _ in range(2):  # the warm index once more, then brought up to date
        search(owner, q="kitchen", user_id="ana")

    assert builds == [len(TURNS), len(TURNS)]
    assert cached_index(tenant).vector_mask.all()
    assert_is_a_fresh_build(tenant)
