"""How an append's embedding request reaches a worker: the web process gathers its appends'
requests (with their summary and extraction requests: test_append_requests) and publishes one
task for them (never a task per append on the request's thread); that task enqueues each
session's embedding; a request lost on the way (the broker down) stays
set, and the sweep takes it over. With a real worker, the appended turns get their vectors."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import api_key_create
from memoryhub.celery import app
from memoryhub.core.coalesce import Coalescer
from sessions_app import embedding, pending, tasks
from sessions_app.models import MessageVector, Session
from tests.helpers import client_for
from tests.sessions_app.workers import CeleryWorker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TURNS = [
    {"role": "user", "content": "We adopted a puppy, a golden retriever called Biscuit."},
    {"role": "assistant", "content": "Biscuit is a lovely name."},
]


def appended_sessions(tenant: Tenant, count: int) -> list[str]:
    api = client_for(api_key_create(tenant=tenant, name="t", scopes=["read", "write"])[1])
    ids = []
    for n in range(count):
        made = api.post("/api/v1/sessions/", {"user_id": f"tg:{n}"}, format="json")
        session_id = made.json()["id"]
        for turn in TURNS:  # two appends: the second finds the request set already
            response = api.post(f"/api/v1/sessions/{session_id}/messages/", turn, format="json")
            assert response.status_code == 201, response.content
        ids.append(session_id)
    return ids


def test_appends_requests_go_out_in_one_task_for_all_sessions(
    tenant: Tenant, enqueue_for_real: None, gathered: list[list[str]]
) -> None:
    ids = appended_sessions(tenant, 3)

    assert gathered == []  # nothing published on the requests' thread
    pending.APPEND_REQUESTS.flush_now()

    assert gathered == [sorted(f"embedding:{value}" for value in ids)]
    assert Session.objects.filter(embedding_requested_at__isnull=False).count() == 3


def test_the_batch_task_enqueues_each_sessions_embedding(
    tenant: Tenant, enqueue_for_real: None, gathered: list[list[str]]
) -> None:
    ids = appended_sessions(tenant, 2)
    pending.APPEND_REQUESTS.flush_now()
    app.conf.task_always_eager = True  # the worker, here: the enqueued tasks run at once

    # An earlier in-process worker leaves Celery's "inside a task" flag set; an eager result
    # never blocks, so the guard does not apply.
    enqueued = tasks.enqueue_appended_requests.apply(
        args=(gathered[0] + ["embedding:not-a-uuid"],)
    ).get(disable_sync_subtasks=False)

    assert enqueued == 2
    assert MessageVector.objects.filter(tenant=tenant).count() == 4
    assert not Session.objects.filter(pk__in=ids, embedding_requested_at__isnull=False).exists()


def test_a_batch_of_the_sessions_only_task_still_enqueues_each_sessions_embedding(
    tenant: Tenant, enqueue_for_real: None, gathered: list[list[str]]
) -> None:
    """`embed_appended_sessions`: what an import publishes, and what appends published before
    their requests were gathered with the other kinds' (such messages may still be queued)."""
    ids = appended_sessions(tenant, 2)
    app.conf.task_always_eager = True

    enqueued = tasks.embed_appended_sessions.apply(args=([*ids, "not-a-uuid"],)).get(
        disable_sync_subtasks=False
    )

    assert enqueued == 2
    assert MessageVector.objects.filter(tenant=tenant).count() == 4
    assert not Session.objects.filter(pk__in=ids, embedding_requested_at__isnull=False).exists()


def test_a_request_lost_with_the_broker_down_is_taken_over_by_the_sweep(
    tenant: Tenant, enqueue_for_real: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broker_down(keys: list[str]) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(
        pending, "APPEND_REQUESTS", Coalescer(name="test", flush=broker_down, window=3600)
    )
    appended_sessions(tenant, 1)  # the appends succeed
    pending.APPEND_REQUESTS.flush_now()  # and their request is lost (logged)
    assert not MessageVector.objects.exists()
    app.conf.task_always_eager = True

    later = timezone.now() + embedding.REQUEST_STALE_AFTER + dt.timedelta(seconds=1)
    assert embedding.embeddings_sweep(now=later) == 1

    assert MessageVector.objects.filter(tenant=tenant).count() == 2


@pytest.mark.slow
@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL: a real broker")
def test_with_a_real_worker_appended_turns_get_their_vectors(
    tenant: Tenant, celery_workers: Callable[..., CeleryWorker], enqueue_for_real: None
) -> None:
    worker = celery_workers(env={"EMBEDDINGS_DELAY_SECONDS": "0"})
    ids = appended_sessions(tenant, 2)

    wait_until(
        lambda: MessageVector.objects.filter(tenant=tenant).count() == 4,
        timeout=60,
        describe=lambda: f"{MessageVector.objects.count()} vectors\n{worker.log_tail()}",
    )
    pending = Session.objects.filter(pk__in=ids, embedding_requested_at__isnull=False)
    wait_until(lambda: not pending.exists(), timeout=30, describe=worker.log_tail)


def test_an_import_requests_its_sessions_in_one_batch(tenant: Tenant, settings: Any) -> None:
    settings.EMBEDDINGS_BACKEND = "off"  # stored without a request, as an import stores them
    ids = [uuid.UUID(value) for value in appended_sessions(tenant, 3)]
    assert not Session.objects.filter(embedding_requested_at__isnull=False).exists()
    settings.EMBEDDINGS_BACKEND = "onnx"
    Session.objects.filter(pk=ids[0]).update(embedding_requested_at=timezone.now())

    with transaction.atomic():
        requested = embedding.embedding_request_sessions(session_ids=ids)

    assert requested == 2  # the first had a request pending already
    # Eager tasks: the batch ran after commit, and each session's embedding with it.
    assert MessageVector.objects.filter(message__session_id__in=ids[1:]).count() == 4
    assert not MessageVector.objects.filter(message__session_id=ids[0]).exists()
