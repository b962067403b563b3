"""memoryhub_embedding_errors_total: every embedder failure the embedding tasks meet, per what
they embedded and kind of error, including the permanent ones the tasks swallow (they leave the
request for the sweep and end "successfully", so no task-failure series sees them)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from facts_app import embedding as facts_embedding
from facts_app import tasks as facts_tasks
from memoryhub.llm.embeddings import EmbeddingPermanentError, EmbeddingTransientError
from sessions_app import embedding as messages_embedding
from sessions_app import tasks as sessions_tasks


def errors(target: str, error: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "memoryhub_embedding_errors_total", {"target": target, "error": error}
        )
        or 0
    )


def failing(error: Exception):
    def compute(**kwargs):
        raise error

    return compute


@pytest.mark.django_db
class TestTheMessageEmbeddingTask:
    def test_a_permanent_error_is_counted_though_the_task_succeeds(self, session, monkeypatch):
        monkeypatch.setattr(
            messages_embedding,
            "message_vectors_compute",
            failing(EmbeddingPermanentError("HTTP 400: no such model")),
        )
        before = errors("messages", "permanent")

        result = sessions_tasks.embed_session_messages.apply(args=(str(session.pk),))

        assert result.successful()
        assert result.get() is None
        assert errors("messages", "permanent") - before == 1

    def test_each_transient_error_is_counted_as_it_is_retried(self, session, monkeypatch):
        monkeypatch.setattr(
            messages_embedding,
            "message_vectors_compute",
            failing(EmbeddingTransientError("HTTP 503")),
        )
        before = errors("messages", "transient")

        result = sessions_tasks.embed_session_messages.apply(args=(str(session.pk),))

        assert not result.successful()
        # The first run and each eager retry met the error.
        tries = sessions_tasks.embed_session_messages.max_retries + 1
        assert errors("messages", "transient") - before == tries

    def test_a_success_counts_nothing(self, session, monkeypatch):
        monkeypatch.setattr(messages_embedding, "message_vectors_compute", lambda **kwargs: 0)
        before = errors("messages", "permanent") + errors("messages", "transient")

        sessions_tasks.embed_session_messages.apply(args=(str(session.pk),))

        assert errors("messages", "permanent") + errors("messages", "transient") == before


@pytest.mark.django_db
def test_the_fact_embedding_task_counts_per_kind(tenant, monkeypatch):
    monkeypatch.setattr(
        facts_embedding, "vectors_compute", failing(EmbeddingPermanentError("HTTP 401"))
    )
    before = {kind: errors(kind, "permanent") for kind in ("fact", "memory")}

    facts_tasks.embed_rows.apply(args=("fact", tenant.pk, [1, 2]))

    assert errors("fact", "permanent") - before["fact"] == 1
    assert errors("memory", "permanent") == before["memory"]
