"""How an append's summary and extraction requests reach a worker: the web process gathers them
(with the appends' embedding requests) and publishes one task for them all, never a task per
request on the request's thread; that task enqueues each kind's task; a request lost on the way
(the broker down) stays set, and the sweeps take it over. Other requests (the sweeps, a task's
re-request) and eager mode (tests) enqueue at once, as before."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

import pytest
from django.utils import timezone

from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import api_key_create
from memoryhub.celery import app
from memoryhub.core.coalesce import Coalescer
from sessions_app import embedding, extraction, pending, summaries, tasks
from sessions_app.models import Session, Summary
from tests.helpers import client_for

pytestmark = pytest.mark.django_db(transaction=True)

TURNS = [
    {"role": "user", "content": "Turn 1: I keep bees in the garden behind the house."},
    {"role": "assistant", "content": "Bees! How many hives do you keep?"},
]


@pytest.fixture(autouse=True)
def due(settings: Any, fake_llm: Any) -> None:
    """Every append is over the summary threshold, and extraction has an LLM to ask."""
    settings.SUMMARY_THRESHOLD_TOKENS = 1
    settings.SUMMARY_KEEP_RECENT = 0


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The per-session tasks published ("summary:<id>"), kept instead of sent."""
    calls: list[str] = []
    for module, name, kind in (
        (summaries, "summary_enqueue", "summary"),
        (extraction, "extraction_enqueue", "extraction"),
        (embedding, "embedding_enqueue", "embedding"),
    ):
        monkeypatch.setattr(
            module,
            name,
            lambda *, session_id, kind=kind: calls.append(f"{kind}:{session_id}"),
        )
    return calls


def exchange(tenant: Tenant, user_id: str = "tg:1") -> str:
    """A session with one user turn and one assistant reply, appended through the API."""
    api = client_for(api_key_create(tenant=tenant, name="t", scopes=["read", "write"])[1])
    session_id = str(
        api.post("/api/v1/sessions/", {"user_id": user_id}, format="json").json()["id"]
    )
    for turn in TURNS:
        response = api.post(f"/api/v1/sessions/{session_id}/messages/", turn, format="json")
        assert response.status_code == 201, response.content
    return session_id


def test_an_appends_requests_are_gathered_into_one_batch_not_published(
    tenant: Tenant, enqueue_for_real: None, gathered: list[list[str]], published: list[str]
) -> None:
    first, second = exchange(tenant, "tg:1"), exchange(tenant, "tg:2")

    assert published == []  # nothing published on the requests' thread
    assert gathered == []
    pending.APPEND_REQUESTS.flush_now()

    kinds = ("embedding", "extraction", "summary")
    assert gathered == [sorted(f"{kind}:{sid}" for kind in kinds for sid in (first, second))]
    assert published == []
    requested = Session.objects.filter(
        summary_requested_at__isnull=False, extraction_requested_at__isnull=False
    )
    assert requested.count() == 2  # the requests are set: the sweeps' to take over if lost


def test_the_batch_task_enqueues_each_kinds_task_and_skips_a_bad_key(
    published: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    session_id = str(uuid.uuid4())
    good = [f"summary:{session_id}", f"extraction:{session_id}", f"embedding:{session_id}"]
    bad = [f"retention:{session_id}", "summary:not-a-uuid", session_id, "summary:"]

    with caplog.at_level(logging.WARNING, logger="sessions_app.tasks"):
        enqueued = tasks.enqueue_appended_requests.apply(args=([*bad[:2], *good, *bad[2:]],))

    # An earlier in-process worker may leave Celery's "inside a task" flag set; an eager
    # result never blocks, so the guard does not apply.
    assert enqueued.get(disable_sync_subtasks=False) == 3
    assert published == good
    assert caplog.text.count("enqueue_appended_requests: not a request") == len(bad)


def test_the_batch_task_runs_each_kinds_task(
    tenant: Tenant, enqueue_for_real: None, gathered: list[list[str]]
) -> None:
    """The worker's side, eagerly: what the batch enqueues does the work and clears the
    requests."""
    session_id = exchange(tenant)
    pending.APPEND_REQUESTS.flush_now()
    app.conf.task_always_eager = True  # the worker, here: the enqueued tasks run at once
    keys = [key for key in gathered[0] if not key.startswith("embedding:")]
    assert keys == [f"extraction:{session_id}", f"summary:{session_id}"]

    # An earlier in-process worker leaves Celery's "inside a task" flag set; an eager result
    # never blocks, so the guard does not apply.
    assert tasks.enqueue_appended_requests.apply(args=(keys,)).get(disable_sync_subtasks=False) == 2

    session = Session.objects.get(pk=session_id)
    assert Summary.objects.filter(session_id=session_id).exists()
    assert session.extracted_seq == 2
    assert (session.summary_requested_at, session.extraction_requested_at) == (None, None)


def test_requests_lost_with_the_broker_down_are_taken_over_by_the_sweeps(
    tenant: Tenant, enqueue_for_real: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broker_down(keys: list[str]) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(
        pending, "APPEND_REQUESTS", Coalescer(name="test", flush=broker_down, window=3600)
    )
    session_id = exchange(tenant)  # the appends succeed
    pending.APPEND_REQUESTS.flush_now()  # and their requests are lost (logged)
    assert not Summary.objects.exists()
    app.conf.task_always_eager = True

    later = timezone.now() + summaries.REQUEST_STALE_AFTER + dt.timedelta(seconds=1)
    assert summaries.summaries_sweep(now=later) == 1
    later = timezone.now() + extraction.REQUEST_STALE_AFTER + dt.timedelta(seconds=1)
    assert extraction.extraction_sweep(now=later) == 1

    session = Session.objects.get(pk=session_id)
    assert Summary.objects.filter(session_id=session_id).exists()
    assert session.extracted_seq == 2


def test_requests_other_than_an_appends_are_published_at_once(
    tenant: Tenant, enqueue_for_real: None, gathered: list[list[str]], published: list[str]
) -> None:
    session_id = exchange(tenant)
    pending.APPEND_REQUESTS.flush_now()
    Session.objects.filter(pk=session_id).update(
        summary_requested_at=None, extraction_requested_at=None
    )
    pk = uuid.UUID(session_id)

    assert summaries.summary_request(session_id=pk)  # as the sweep and a finished task ask
    assert extraction.extraction_request(session_id=pk)

    assert published == [f"summary:{session_id}", f"extraction:{session_id}"]
    assert len(gathered) == 1  # the appends' batch only
    pending.APPEND_REQUESTS.flush_now()
    assert len(gathered) == 1


def test_eager_tasks_run_at_once_as_before(tenant: Tenant, gathered: list[list[str]]) -> None:
    session_id = exchange(tenant)

    pending.APPEND_REQUESTS.flush_now()
    assert gathered == []
    session = Session.objects.get(pk=session_id)
    assert Summary.objects.filter(session_id=session_id).exists()
    assert session.extracted_seq == 2
