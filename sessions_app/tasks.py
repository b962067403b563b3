"""Celery tasks of conversation memory: thin wrappers over sessions_app.summaries and
sessions_app.extraction. Each takes ids only and is safe to run twice."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from celery import Task, shared_task

from memoryhub.core import statistics
from memoryhub.core.metrics import embedding_error_count
from memoryhub.core.rls import system_task, tenant_task
from memoryhub.llm import LLMPermanentError, LLMTransientError
from memoryhub.llm.tasks import MODEL_TASK_MAX_RETRIES, model_task_options
from sessions_app import embedding, extraction, summaries
from sessions_app.models import CONVERSATION_KEYS, Session

logger = logging.getLogger(__name__)

SUMMARIZE_MAX_RETRIES = MODEL_TASK_MAX_RETRIES


def _session_tenant(self: Task, session_id: str, *_: Any, **__: Any) -> int | None:
    # Row-level security (core.rls): a session's task runs scoped to the session's tenant.
    try:
        pk = uuid.UUID(str(session_id))
    except ValueError:
        return None
    tenant_id: int | None = (
        Session.objects.filter(pk=pk).values_list("tenant_id", flat=True).first()
    )
    return tenant_id


@shared_task(**model_task_options())
@tenant_task(_session_tenant)
def summarize_session(self: Task, session_id: str, force: bool = False) -> int | None:
    """Fold a session's older messages into its next summary; returns the summary's through_seq.

    Idempotent by construction: the range is derived from the current summary, and the row is
    unique on (session, through_seq), so a redelivered or duplicated task writes nothing new.
    Exits quietly when the session is gone. LLMTransientError (timeout, 5xx, 429) is retried with
    backoff; a permanent error gives up and leaves the next attempt to the sweep.
    """
    try:
        pk = uuid.UUID(session_id)
    except ValueError:
        logger.warning("summarize_session: not a session id: %r", session_id)
        return None
    try:
        summary = summaries.session_summarize(session_id=pk, force=force)
    except LLMTransientError:
        if self.request.retries >= (self.max_retries or 0):
            # Out of retries: the request stays set, so the sweep tries again once it is stale.
            logger.warning("summarize_session %s: giving up after retries", session_id)
        raise
    except LLMPermanentError as error:
        logger.warning("summarize_session %s: %s", session_id, error)
        summaries.summary_request_finish(session_id=pk, retry_later=True)
        raise
    summaries.summary_request_finish(session_id=pk)
    return summary.through_seq if summary is not None else None


@shared_task(acks_late=True, ignore_result=True)
@system_task
def summaries_sweep() -> int:
    """Beat: re-enqueue summarization for sessions over the threshold whose task was lost.
    Idempotent: each session is claimed by a conditional update before it is enqueued."""
    return summaries.summaries_sweep()


@shared_task(**model_task_options())
@tenant_task(_session_tenant)
def extract_session_facts(self: Task, session_id: str) -> int | None:
    """Extract facts from the session's newest exchange; returns how many facts were stored.

    Idempotent: the facts and the session's extraction cursor are written in one transaction,
    and a run that finds the cursor already past its exchange stores nothing. Retries and
    give-ups follow summarize_session.
    """
    try:
        pk = uuid.UUID(session_id)
    except ValueError:
        logger.warning("extract_session_facts: not a session id: %r", session_id)
        return None
    try:
        result = extraction.session_extract_facts(session_id=pk)
    except LLMTransientError:
        if self.request.retries >= (self.max_retries or 0):
            logger.warning("extract_session_facts %s: giving up after retries", session_id)
        raise
    except LLMPermanentError as error:
        logger.warning("extract_session_facts %s: %s", session_id, error)
        extraction.extraction_request_finish(session_id=pk, retry_later=True)
        raise
    extraction.extraction_request_finish(session_id=pk)
    return len(result.created) if result is not None else None


@shared_task(acks_late=True, ignore_result=True)
@system_task
def extraction_sweep() -> int:
    """Beat: re-enqueue extraction requests whose task was lost."""
    return extraction.extraction_sweep()


@shared_task(**model_task_options())
@tenant_task(_session_tenant)
def embed_session_messages(self: Task, session_id: str) -> int | None:
    """Embed the session's messages that have no vector of the current model yet; returns how
    many were embedded.

    Idempotent: a vector is keyed by its message, so a redelivered task rewrites the same rows.
    A remote embedder's transient errors are retried with backoff; a permanent one leaves the
    request set for the sweep. Exits quietly when the session is gone.
    """
    try:
        pk = uuid.UUID(session_id)
    except ValueError:
        logger.warning("embed_session_messages: not a session id: %r", session_id)
        return None
    try:
        done = embedding.message_vectors_compute(session_id=pk)
    except LLMTransientError:
        embedding_error_count(target="messages", permanent=False)
        raise
    except LLMPermanentError as error:
        embedding_error_count(target="messages", permanent=True)
        logger.warning("embed_session_messages %s: %s", session_id, error)
        return None
    embedding.embedding_request_finish(session_id=pk)
    return done


@shared_task(acks_late=True, ignore_result=True)
@system_task
def embed_appended_sessions(session_ids: list[str]) -> int:
    """Enqueue `embed_session_messages` for each session: an import's requests
    (sessions_app.embedding.embedding_request_sessions), and the appends' of a web process
    before their requests went out as `enqueue_appended_requests` (such messages may still be
    queued). Returns how many were enqueued. Run twice, it enqueues twice, and each session's
    task is idempotent."""
    return _appended_requests_enqueue(
        [f"embedding:{raw}" for raw in session_ids], task="embed_appended_sessions"
    )


def append_enqueues() -> dict[str, Callable[..., None]]:
    """What publishes the task of each kind an append's gathered request names
    (sessions_app.pending.APPEND_KINDS); read from the modules when called, so a test's
    replacement counts."""
    return {
        "summary": summaries.summary_enqueue,
        "extraction": extraction.extraction_enqueue,
        "embedding": embedding.embedding_enqueue,
    }


@shared_task(acks_late=True, ignore_result=True)
@system_task
def enqueue_appended_requests(keys: list[str]) -> int:
    """Enqueue each request a web process's appends made since its last batch ("summary:<id>",
    "extraction:<id>", "embedding:<id>"; sessions_app.pending.pending_enqueue_after_append): the
    publishes are the worker's, not the request's. Returns how many were enqueued; a key of no
    known kind or session id is logged and skipped. Run twice, it enqueues twice, and each
    task it enqueues is idempotent."""
    return _appended_requests_enqueue(keys, task="enqueue_appended_requests")


def _appended_requests_enqueue(keys: list[str], *, task: str) -> int:
    enqueues = append_enqueues()
    enqueued = 0
    for raw in keys:
        kind, _, value = str(raw).partition(":")
        enqueue = enqueues.get(kind)
        try:
            session_id = uuid.UUID(value)
        except ValueError:
            enqueue = None
        if enqueue is None:
            logger.warning("%s: not a request: %r", task, raw)
            continue
        enqueue(session_id=session_id)
        enqueued += 1
    return enqueued


@shared_task(acks_late=True, ignore_result=True)
@system_task
def embeddings_sweep() -> int:
    """Beat: re-enqueue embedding requests whose task was lost."""
    return embedding.embeddings_sweep()


@shared_task(acks_late=True, ignore_result=True)
@system_task
def keys_analyze() -> bool:
    """Beat (hourly): the planner's statistics of the conversation tables' keys brought up to
    date, so a tenant that is new or grew since is read through the indexes its queries name
    (memoryhub.core.statistics). Takes no arguments; running it twice analyses twice."""
    return statistics.keys_analyze(of=CONVERSATION_KEYS)
