"""New vectors do not hold a search up: the process's cached index is used once more, without
them, and rebuilt after the response, so the next search uses them. (The rebuild once deferred
itself again, endlessly: the index never caught up in that process — what a second web process,
whose cache had been warmed before the worker embedded, kept serving. Found by
scripts/scaleout_check.py.)"""

from __future__ import annotations

import pytest
from django.db.models import F

from memoryhub.accounts.models import EndUser
from sessions_app import recall
from sessions_app.models import MessageVector
from tests.helpers import client_for
from tests.sessions_app.test_message_recall import TURNS, chat, search

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_recall_cache():
    recall.index_cache().clear()
    yield
    recall.index_cache().clear()


def test_a_warm_index_catches_up_with_new_vectors_after_one_response(tenant, make_key, caplog):
    owner = client_for(make_key(tenant, scopes=["read", "write"])[1])
    chat(owner, user_id="ana", key="ana:1", turns=TURNS)
    # The index is warmed before the worker's vectors exist: put them aside, search, put back.
    vectors = list(MessageVector.objects.filter(tenant=tenant))
    assert vectors
    MessageVector.objects.filter(tenant=tenant).delete()
    EndUser.objects.filter(tenant=tenant).update(vectors_version=F("vectors_version") + 1)
    assert search(owner, q="golden retriever", user_id="ana")["mode"] == "lexical"
    MessageVector.objects.bulk_create(vectors)
    EndUser.objects.filter(tenant=tenant).update(vectors_version=F("vectors_version") + 1)

    stale = search(owner, q="golden retriever", user_id="ana")
    fresh = search(owner, q="golden retriever", user_id="ana")

    assert stale["mode"] == "lexical"  # the warm index, once more (by design)
    assert fresh["mode"] == "hybrid"  # rebuilt after that response, with the vectors
    assert "work after the response failed" not in caplog.text
