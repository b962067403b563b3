"""How every task that calls a model (summaries, extraction, embeddings) is declared: acked late,
redelivered when its worker dies, retried with backoff on the adapter's transient errors only,
and held to the task time limits."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from memoryhub.llm.types import LLMTransientError

MODEL_TASK_MAX_RETRIES = 5


def model_task_options(**overrides: Any) -> dict[str, Any]:
    """Keyword arguments for `shared_task` (`bind=True` included); `overrides` add or replace."""
    return {
        "bind": True,
        "acks_late": True,
        "reject_on_worker_lost": True,
        "autoretry_for": (LLMTransientError,),
        "retry_backoff": True,
        "retry_backoff_max": 600,
        "retry_jitter": True,
        "max_retries": MODEL_TASK_MAX_RETRIES,
        "soft_time_limit": settings.CELERY_TASK_SOFT_TIME_LIMIT,
        "time_limit": settings.CELERY_TASK_TIME_LIMIT,
        **overrides,
    }
