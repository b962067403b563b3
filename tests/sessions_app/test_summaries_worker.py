"""A real Celery worker (a subprocess, over Redis) summarizes a session once appends push it past
the threshold: the enqueue happens after commit and the worker sees the committed rows."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings

from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import api_key_create
from sessions_app.models import Session, Summary
from tests.helpers import client_for
from tests.sessions_app.workers import CeleryWorker

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not settings.REDIS_URL, reason="needs REDIS_URL: a real broker for a real worker"
    ),
]

THRESHOLD = 100
WAIT_SECONDS = 60


@pytest.fixture
def worker(celery_workers: Callable[..., CeleryWorker]) -> CeleryWorker:
    return celery_workers(
        env={
            "MEMORYHUB_SUMMARY_THRESHOLD_TOKENS": str(THRESHOLD),
            "MEMORYHUB_SUMMARY_KEEP_RECENT": "10",
            "LLM_BASE_URL": "",
        }
    )


def test_a_real_worker_writes_the_summary(
    worker: CeleryWorker, enqueue_for_real: None, settings: Any
) -> None:
    settings.SUMMARY_THRESHOLD_TOKENS = THRESHOLD
    settings.SUMMARY_KEEP_RECENT = 10
    tenant = Tenant.objects.create(slug="worker", name="Worker")
    api = client_for(api_key_create(tenant=tenant, name="t", scopes=["read", "write"])[1])
    session_id = api.post("/api/v1/sessions/", {}, format="json").json()["id"]
    batch = {
        "messages": [
            {"role": "user", "content": f"Message {i}: the tomatoes in the garden are ripening."}
            for i in range(30)
        ]
    }
    response = api.post(f"/api/v1/sessions/{session_id}/messages/", batch, format="json")
    assert response.status_code == 201

    deadline = time.monotonic() + WAIT_SECONDS
    summary = None
    while summary is None and time.monotonic() < deadline:
        summary = Summary.objects.filter(session_id=session_id).first()
        if summary is None:
            time.sleep(0.5)

    assert summary is not None, worker.log_tail()
    assert (summary.through_seq, summary.model) == (20, "offline")
    assert "Message 0:" in summary.text
    # The worker clears the request once it is done.
    deadline = time.monotonic() + 10
    while Session.objects.get(pk=session_id).summary_requested_at is not None:
        assert time.monotonic() < deadline, worker.log_tail()
        time.sleep(0.2)
