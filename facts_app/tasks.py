"""Background work on facts, memories and notes: their vectors."""

from __future__ import annotations

import logging
from typing import Any, cast

from celery import Task, shared_task

from facts_app import embedding
from memoryhub.core.metrics import embedding_error_count
from memoryhub.core.rls import system_task, tenant_task
from memoryhub.llm import LLMPermanentError, LLMTransientError
from memoryhub.llm.tasks import model_task_options

logger = logging.getLogger(__name__)


def _tenant_of_rows(self: Task, kind: str, tenant_id: int, *_: Any, **__: Any) -> int | None:
    return int(tenant_id)


@shared_task(**model_task_options(ignore_result=True))
@tenant_task(_tenant_of_rows)
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
    except LLMTransientError:
        embedding_error_count(target=kind, permanent=False)
        raise
    except LLMPermanentError as error:
        embedding_error_count(target=kind, permanent=True)
        logger.warning("embed_rows %s of tenant %s: %s", kind, tenant_id, error)
        return None


@shared_task(acks_late=True, ignore_result=True)
@system_task
def embeddings_sweep() -> int:
    """Beat: embed facts, memories and notes of the last day that still lack a vector (their
    task was lost). Bounded per run; idempotent like embed_rows."""
    return embedding.embeddings_sweep()
