"""Background work on facts, memories and notes: their vectors."""

from __future__ import annotations

import logging
from typing import cast

from celery import Task, shared_task
from django.conf import settings

from facts_app import embedding
from memoryhub.llm import LLMPermanentError, LLMTransientError

logger = logging.getLogger(__name__)

EMBED_MAX_RETRIES = 5


@shared_task(
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(LLMTransientError,),
    retry_backoff=True,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=EMBED_MAX_RETRIES,
    soft_time_limit=settings.CELERY_TASK_SOFT_TIME_LIMIT,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
    ignore_result=True,
)
def embed_rows(self: Task, kind: str, tenant_id: int, ids: list[int]) -> int | None:
    """Embed these facts, memories or notes (`kind`) if they still lack a vector of the current
    model; returns how many were stored.

    Idempotent: rows that have their vector are skipped, and a vector is keyed by its row, so a
    redelivered task stores nothing new. Rows deleted meanwhile are skipped quietly. A remote
    embedder's transient errors are retried with backoff; a permanent one gives up, and the
    rows wait for the sweep or the `embed_memory` command.
    """
    if kind not in embedding.KINDS:
        logger.warning("embed_rows: unknown kind %r", kind)
        return None
    try:
        return embedding.vectors_compute(
            kind=cast(embedding.Kind, kind),
            tenant_id=int(tenant_id),
            ids=[int(pk) for pk in ids],
        )
    except LLMPermanentError as error:
        logger.warning("embed_rows %s of tenant %s: %s", kind, tenant_id, error)
        return None


@shared_task(acks_late=True, ignore_result=True)
def embeddings_sweep() -> int:
    """Beat: embed facts, memories and notes of the last day that still lack a vector (their
    task was lost). Bounded per run; idempotent like embed_rows."""
    return embedding.embeddings_sweep()
