"""/metrics: off unless protected, then the series a scripted conversation leaves (tasks run
eagerly in this process here; test_metrics_live.py scrapes gunicorn with a real worker)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone

from memoryhub.retention.tasks import retention_cleanup
from sessions_app.models import Message, Session
from tests.metrics.helpers import value

TOKEN = "metrics-token-for-tests-0123456789"
MESSAGES_ROUTE = "/api/v1/sessions/<str:session_id>/messages/"


@pytest.fixture
def metrics_on(settings):
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOWED_NETWORKS = []


def scrape(client: Client | None = None) -> str:
    response = (client or Client()).get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return response.content.decode()


class TestWhoMayScrape:
    def test_it_is_off_by_default(self, db, settings):
        settings.METRICS_TOKEN = ""
        settings.METRICS_ALLOWED_NETWORKS = []

        assert Client().get("/metrics").status_code == 404

    def test_a_token_is_required_when_set(self, db, metrics_on):
        assert Client().get("/metrics").status_code == 401
        wrong = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token-at-all")
        assert wrong.status_code == 401
        assert wrong["WWW-Authenticate"].startswith("Bearer")
        assert "memoryhub_metrics_database_up 1.0" in scrape()

    def test_outside_the_allowed_networks_it_is_not_found(self, db, settings):
        settings.METRICS_TOKEN = ""
        settings.METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]

        assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 404
        assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 200

    def test_with_both_a_scraper_needs_both(self, db, settings):
        settings.METRICS_TOKEN = TOKEN
        settings.METRICS_ALLOWED_NETWORKS = ["127.0.0.0/8"]

        assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 401
        outside = Client(REMOTE_ADDR="192.0.2.1")
        assert outside.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 404
        assert scrape(Client(REMOTE_ADDR="127.0.0.1"))


class TestAfterAConversation:
    def test_the_series_are_there_with_plausible_values(
        self,
        api,
        tenant,
        session,
        metrics_on,
        settings,
        fake_llm,
        django_capture_on_commit_callbacks,
    ):
        settings.EMBEDDINGS_BACKEND = "off"
        settings.SUMMARY_KEEP_RECENT = 2  # so that the forced summary has messages to fold
        before = scrape()
        appends_before = value(
            before,
            "memoryhub_http_request_duration_seconds_count",
            route=MESSAGES_ROUTE,
            method="POST",
            status="201",
        )
        for turn in range(3):
            with django_capture_on_commit_callbacks(execute=True):
                response = api.post(
                    f"/api/v1/sessions/{session.pk}/messages/",
                    {
                        "messages": [
                            {"role": "user", "content": f"Turn {turn}: I grow tomatoes."},
                            {"role": "assistant", "content": "Lovely."},
                        ]
                    },
                    format="json",
                )
            assert response.status_code == 201
        assert api.get(f"/api/v1/sessions/{session.pk}/context/").status_code == 200
        assert api.get("/api/v1/messages/search/", {"q": "tomatoes"}).status_code == 200
        with django_capture_on_commit_callbacks(execute=True):
            assert api.post(f"/api/v1/sessions/{session.pk}/summarize/").status_code == 202
        fake_llm.fail(400, message="bad model")
        with django_capture_on_commit_callbacks(execute=True):
            api.post(
                f"/api/v1/sessions/{session.pk}/messages/",
                {"role": "assistant", "content": "One more."},
                format="json",
            )
        # Something for the retention cleanup to remove.
        old = timezone.now() - dt.timedelta(days=400)
        Message.objects.filter(session=session, seq=1).update(created_at=old)
        retention_cleanup.delay()

        text = scrape()

        # Requests: per route pattern (never the path) and status, with their queries.
        appends = value(
            text,
            "memoryhub_http_request_duration_seconds_count",
            route=MESSAGES_ROUTE,
            method="POST",
            status="201",
        )
        assert appends - (appends_before or 0) >= 3
        assert str(session.pk) not in text
        assert value(
            text,
            "memoryhub_http_request_duration_seconds_count",
            route="/api/v1/sessions/<str:session_id>/context/",
            status="200",
        )
        assert value(text, "memoryhub_http_request_db_queries_count", route=MESSAGES_ROUTE) >= 3
        assert value(text, "memoryhub_http_request_db_queries_sum", route=MESSAGES_ROUTE) >= 3
        assert (
            value(text, "memoryhub_http_request_db_duration_seconds_sum", route=MESSAGES_ROUTE) > 0
        )
        # Tasks: counts by outcome and latency.
        summarize = "sessions_app.tasks.summarize_session"
        extract = "sessions_app.tasks.extract_session_facts"
        assert value(text, "memoryhub_celery_tasks_total", task=summarize, outcome="succeeded")
        assert value(text, "memoryhub_celery_tasks_total", task=extract, outcome="succeeded")
        assert value(text, "memoryhub_celery_tasks_total", task=extract, outcome="failed")
        assert value(text, "memoryhub_celery_task_duration_seconds_count", task=summarize)
        # LLM use per tenant, from the usage counters; the failed call per tenant.
        assert value(text, "memoryhub_llm_calls_total", tenant="acme", purpose="extraction") >= 3
        assert value(text, "memoryhub_llm_calls_total", tenant="acme", purpose="summary") >= 1
        assert value(text, "memoryhub_llm_tokens_total", tenant="acme", kind="prompt") > 0
        assert value(
            text,
            "memoryhub_llm_errors_total",
            tenant="acme",
            purpose="extraction",
            error="permanent",
        )
        # Backlogs, read from the database: the failed extraction waits for the sweep.
        assert value(text, "memoryhub_extraction_backlog_sessions", tenant="acme") == 1
        assert value(text, "memoryhub_summary_backlog_sessions", tenant="acme") == 0
        assert value(text, "memoryhub_embedding_backlog_messages", tenant="acme") == 0
        assert value(text, "memoryhub_jobs", tenant="acme", kind="extraction", state="failed") == 1
        # Retention.
        assert value(text, "memoryhub_retention_rows_deleted_total", kind="messages") >= 1

    def test_the_embedding_backlog_counts_messages_without_vectors(
        self, api, tenant, session, metrics_on, settings
    ):
        settings.EMBEDDINGS_BACKEND = "off"  # nothing embeds them meanwhile
        api.post(
            f"/api/v1/sessions/{session.pk}/messages/",
            {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
            format="json",
        )
        Session.objects.filter(pk=session.pk).update(embedding_requested_at=timezone.now())
        settings.EMBEDDINGS_BACKEND = "onnx"

        text = scrape()

        assert value(text, "memoryhub_embedding_backlog_sessions", tenant="acme") == 1
        assert value(text, "memoryhub_embedding_backlog_messages", tenant="acme") == 2
