"""The production shape: gunicorn (2 workers) and a real Celery worker sharing one
PROMETHEUS_MULTIPROC_DIR, the fake LLM server, JSON logs. A scripted conversation through
HTTP, then /metrics, scraped from whichever gunicorn worker answers, shows every series with
plausible values, the worker's task counts included."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import api_key_create
from memoryhub.retention.tasks import retention_cleanup
from sessions_app.models import Message
from tests.live_gunicorn import Gunicorn
from tests.metrics.helpers import value
from tests.sessions_app.workers import CeleryWorker, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not settings.REDIS_URL, reason="needs REDIS_URL: a real broker for a real worker"
    ),
]

TOKEN = "live-metrics-token-0123456789abcdef"
MESSAGES_ROUTE = "/api/v1/sessions/<str:session_id>/messages/"


@pytest.fixture
def stack(tmp_path: Path, celery_workers: Callable[..., CeleryWorker], fake_llm: Any) -> Any:
    folder = tmp_path / "prometheus"
    folder.mkdir()
    env = {
        "PROMETHEUS_MULTIPROC_DIR": str(folder),
        "MEMORYHUB_METRICS_TOKEN": TOKEN,
        "LOG_FORMAT": "json",
        "LLM_BASE_URL": fake_llm.base_url,
        "LLM_MODEL": fake_llm.model,
        "LLM_API_KEY": "test-key",
        "EMBEDDINGS_BACKEND": "off",
        "MEMORYHUB_SUMMARY_KEEP_RECENT": "2",
        "GUNICORN_WORKERS": "2",
        "GUNICORN_THREADS": "2",
        # The web server enqueues for the worker (tests default to eager tasks).
        "CELERY_TASK_ALWAYS_EAGER": "false",
    }
    server = Gunicorn(log_path=tmp_path / "gunicorn.log", env=env).start()
    # After gunicorn, which clears the folder's files of an earlier run when it starts.
    worker = celery_workers(env=env)
    try:
        yield server, worker
    finally:
        server.stop()


def call(
    server: Gunicorn, method: str, path: str, key: str, body: Any = None, **headers: str
) -> Any:
    response = server.request(
        method,
        path,
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            **headers,
        },
        body=json.dumps(body).encode() if body is not None else None,
    )
    assert response.status < 300, (response.status, response.data)
    return json.loads(response.data) if response.data else None


def scrape(server: Gunicorn) -> str:
    response = server.request("GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status == 200, response.data
    return response.data.decode()


def test_a_scripted_conversation_shows_in_the_metrics(
    stack: Any, fake_llm: Any, enqueue_for_real: None
) -> None:
    server, worker = stack
    tenant = Tenant.objects.create(slug="live", name="Live")
    key = api_key_create(tenant=tenant, name="t", scopes=["read", "write"])[1]
    assert server.request("GET", "/metrics").status == 401

    session_id = call(server, "POST", "/api/v1/sessions/", key, {"user_id": "tg:7"})["id"]
    messages = f"/api/v1/sessions/{session_id}/messages/"
    for turn in range(3):
        call(
            server,
            "POST",
            messages,
            key,
            {
                "messages": [
                    {"role": "user", "content": f"Turn {turn}: my bees make heather honey."},
                    {"role": "assistant", "content": "How wonderful."},
                ]
            },
            **{"X-Request-ID": f"script-{turn}"},
        )
    call(server, "GET", f"/api/v1/sessions/{session_id}/context/?query=honey", key)
    call(server, "GET", "/api/v1/messages/search/?q=honey&user_id=tg:7", key)
    call(server, "POST", f"/api/v1/sessions/{session_id}/summarize/", key)

    def jobs() -> dict[str, str]:
        found = call(server, "GET", f"/api/v1/sessions/{session_id}/jobs/", key)["jobs"]
        return {job["kind"]: job["state"] for job in found}

    wait_until(
        lambda: jobs()["summary"] == "done" and jobs()["extraction"] == "done",
        timeout=60,
        describe=lambda: f"{jobs()}\n{worker.log_tail()}",
    )
    # One LLM call that fails, and something old for the retention cleanup.
    fake_llm.fail(400, message="no such model")
    call(
        server,
        "POST",
        messages,
        key,
        {
            "messages": [
                {"role": "user", "content": "Bye"},
                {"role": "assistant", "content": "Bye!"},
            ]
        },
    )
    wait_until(
        lambda: jobs()["extraction"] == "failed",
        timeout=60,
        describe=lambda: f"{jobs()}\n{worker.log_tail()}",
    )
    Message.objects.filter(session_id=session_id, seq=1).update(
        created_at=timezone.now() - dt.timedelta(days=400)
    )
    retention_cleanup.delay()
    wait_until(
        lambda: worker.task_ids("sessions_app.tasks.retention_cleanup", "succeeded"),
        timeout=60,
        describe=worker.log_tail,
    )

    # Each scrape may be answered by either gunicorn worker: every one sees every process.
    for _ in range(3):
        text = scrape(server)
        appends = value(
            text,
            "memoryhub_http_request_duration_seconds_count",
            route=MESSAGES_ROUTE,
            method="POST",
            status="201",
        )
        assert appends == 4, text
        assert value(text, "memoryhub_http_request_db_queries_count", route=MESSAGES_ROUTE) == 4
        assert value(text, "memoryhub_http_request_db_queries_sum", route=MESSAGES_ROUTE) >= 4
        assert (
            value(
                text,
                "memoryhub_http_request_duration_seconds_count",
                route="/api/v1/sessions/<str:session_id>/context/",
                status="200",
            )
            == 1
        )
        # The worker's tasks, from its own process's files.
        summarize = "sessions_app.tasks.summarize_session"
        extract = "sessions_app.tasks.extract_session_facts"
        assert value(text, "memoryhub_celery_tasks_total", task=summarize, outcome="succeeded") >= 1
        assert value(text, "memoryhub_celery_tasks_total", task=extract, outcome="succeeded") >= 1
        assert value(text, "memoryhub_celery_tasks_total", task=extract, outcome="failed") == 1
        assert value(text, "memoryhub_celery_task_duration_seconds_count", task=summarize) >= 1
        assert value(text, "memoryhub_celery_queue_length", queue="celery") == 0
        assert value(text, "memoryhub_celery_broker_up") == 1
        assert value(text, "memoryhub_llm_calls_total", tenant="live", purpose="summary") >= 1
        assert value(text, "memoryhub_llm_calls_total", tenant="live", purpose="extraction") >= 1
        assert value(text, "memoryhub_llm_tokens_total", tenant="live", kind="completion") > 0
        assert (
            value(
                text,
                "memoryhub_llm_errors_total",
                tenant="live",
                purpose="extraction",
                error="permanent",
            )
            == 1
        )
        assert value(text, "memoryhub_summary_backlog_sessions", tenant="live") == 0
        assert value(text, "memoryhub_extraction_backlog_sessions", tenant="live") == 1
        assert value(text, "memoryhub_embedding_backlog_messages", tenant="live") == 0
        assert value(text, "memoryhub_retention_rows_deleted_total", kind="messages") >= 1

    # JSON log lines: gunicorn's access lines carry the request id, tenant, route and status.
    lines = [
        json.loads(line)
        for line in server.log_path.read_text().splitlines()
        if line.startswith("{")
    ]
    access = [line for line in lines if line.get("request_id") == "script-1"]
    assert access, server.log_tail()
    assert access[0]["tenant"] == "live"
    assert access[0]["route"] == MESSAGES_ROUTE
    assert access[0]["status"] == 201
    assert access[0]["duration_ms"] > 0
    # The worker writes JSON too, its tasks' lines with their names and ids.
    worker_lines = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
    assert any(line.get("task_name") == extract for line in worker_lines), worker.log_tail()
