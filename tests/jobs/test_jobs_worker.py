"""With a real worker (a subprocess over Redis) and the fake LLM server, a session's jobs move
from requested to done, as GET /sessions/{id}/jobs/ shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings

from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import api_key_create
from tests.helpers import client_for
from tests.sessions_app.workers import CeleryWorker, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not settings.REDIS_URL, reason="needs REDIS_URL: a real broker for a real worker"
    ),
]


def test_jobs_move_from_requested_to_done(
    celery_workers: Callable[..., CeleryWorker],
    enqueue_for_real: None,
    fake_llm: Any,
    settings: Any,
) -> None:
    settings.EMBEDDINGS_BACKEND = "off"
    # Low, so that the appends request the summary (the session's summary_requested_at).
    settings.SUMMARY_THRESHOLD_TOKENS = 20
    settings.SUMMARY_KEEP_RECENT = 2
    tenant = Tenant.objects.create(slug="jobs", name="Jobs")
    api = client_for(api_key_create(tenant=tenant, name="t", scopes=["read", "write"])[1])
    session_id = api.post("/api/v1/sessions/", {"user_id": "tg:1"}, format="json").json()["id"]
    turns = [
        {"role": role, "content": f"Turn {n}: I keep bees in the garden."}
        for n in range(3)
        for role in ("user", "assistant")
    ]
    assert (
        api.post(
            f"/api/v1/sessions/{session_id}/messages/", {"messages": turns}, format="json"
        ).status_code
        == 201
    )

    def jobs() -> dict[str, dict[str, Any]]:
        response = api.get(f"/api/v1/sessions/{session_id}/jobs/")
        assert response.status_code == 200
        return {job["kind"]: job for job in response.json()["jobs"]}

    # No worker yet: both are queued.
    queued = jobs()
    assert (queued["summary"]["state"], queued["extraction"]["state"]) == ("requested", "requested")
    assert queued["summary"]["requested_at"]
    assert queued["summary"]["started_at"] is None

    worker = celery_workers(
        env={
            "LLM_BASE_URL": fake_llm.base_url,
            "LLM_MODEL": fake_llm.model,
            "LLM_API_KEY": "test-key",
            "EMBEDDINGS_BACKEND": "off",
            "MEMORYHUB_SUMMARY_THRESHOLD_TOKENS": "20",
            "MEMORYHUB_SUMMARY_KEEP_RECENT": "2",
        }
    )

    done = wait_until(
        lambda: (
            (found := jobs())
            and all(found[kind]["state"] == "done" for kind in ("summary", "extraction"))
            and found
        ),
        timeout=60,
        describe=lambda: f"{jobs()}\n{worker.log_tail()}",
    )
    assert done["summary"]["result"] == 4  # through seq 6 - 2 kept verbatim
    assert done["summary"]["requested_at"] is None
    assert done["summary"]["finished_at"]
    assert done["extraction"]["attempt"] == 1
    assert done["extraction"]["error"] == ""
    assert done["embedding"]["state"] == "idle"
