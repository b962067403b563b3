"""Series counted from the Celery lifecycle of tasks: failed LLM calls per tenant (a model task
that retries or fails on an LLM error). The rows retention removes are counted by the run itself
(memoryhub.retention.prune), batch by batch: a run cut short by its time limit has no return
value to count from."""

from __future__ import annotations

import logging
from typing import Any

from memoryhub.core import metrics
from memoryhub.core.rls import rls_system_scope
from memoryhub.jobs.signals import session_job_of
from memoryhub.llm import LLMError, LLMPermanentError
from sessions_app.models import Session

logger = logging.getLogger(__name__)


def _llm_error(task: Any, args: Any, kwargs: Any, error: Any) -> None:
    if not isinstance(error, LLMError):
        return
    job = session_job_of(str(getattr(task, "name", "") or ""), args, kwargs)
    if job is None:
        return
    session_id, kind = job
    try:
        with rls_system_scope():
            tenant = (
                Session.objects.filter(pk=session_id).values_list("tenant__slug", flat=True).first()
            )
    except Exception:
        logger.warning("could not find the tenant of a failed LLM call", exc_info=True)
        tenant = None
    metrics.LLM_ERRORS.labels(
        tenant=tenant or "unknown",
        purpose=str(kind),
        error="permanent" if isinstance(error, LLMPermanentError) else "transient",
    ).inc()


def on_task_retry(sender: Any = None, request: Any = None, reason: Any = None, **_: Any) -> None:
    _llm_error(sender, getattr(request, "args", None), getattr(request, "kwargs", None), reason)


def on_task_failure(
    sender: Any = None, exception: Any = None, args: Any = None, kwargs: Any = None, **_: Any
) -> None:
    _llm_error(sender, args, kwargs, exception)


def connect_celery_signals() -> None:
    from celery import signals

    signals.task_retry.connect(on_task_retry, weak=False, dispatch_uid="mh-metrics-retry")
    signals.task_failure.connect(on_task_failure, weak=False, dispatch_uid="mh-metrics-failure")
