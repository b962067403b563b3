"""The job rows follow the Celery lifecycle of the tasks that do a session's background work.

Signals rather than code in each task: the lifecycle (started, retried, failed, succeeded) is
Celery's to know, the same for every kind, and the tasks stay the thin wrappers they are. The
handlers run in the worker (every process loads this app); in tests, with eager tasks, in the
test process.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from memoryhub.core.rls import rls_system_scope
from memoryhub.jobs import services
from memoryhub.jobs.models import JobKind

logger = logging.getLogger(__name__)

TASK_KINDS: dict[str, JobKind] = {
    "sessions_app.tasks.summarize_session": JobKind.SUMMARY,
    "sessions_app.tasks.extract_session_facts": JobKind.EXTRACTION,
    "sessions_app.tasks.embed_session_messages": JobKind.EMBEDDING,
}


def session_job_of(task_name: str, args: Any, kwargs: Any) -> tuple[uuid.UUID, JobKind] | None:
    """(session id, kind) when the task named `task_name` is one of a session's jobs; its first
    argument (or `session_id=`) is the session's id."""
    kind = TASK_KINDS.get(task_name)
    if kind is None:
        return None
    raw = args[0] if args else (kwargs or {}).get("session_id")
    try:
        return uuid.UUID(str(raw)), kind
    except ValueError:
        return None


def _name(task: Any) -> str:
    return str(getattr(task, "name", "") or "")


def describe(error: BaseException | None) -> str:
    if error is None:
        return ""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _guarded(record: Any, **arguments: Any) -> None:
    # Bookkeeping must never turn a task's success into a failure, nor hide its real error.
    try:
        # Celery's lifecycle, before and after the task's own scope: across tenants by session id.
        with rls_system_scope():
            record(**arguments)
    except Exception:
        logger.warning("could not record a job's state", exc_info=True)


def on_task_prerun(
    task_id: str = "", task: Any = None, args: Any = None, kwargs: Any = None, **_: Any
) -> None:
    job = session_job_of(_name(task), args, kwargs)
    if job is not None:
        retries = int(getattr(task.request, "retries", 0) or 0)
        _guarded(
            services.job_run_started,
            session_id=job[0],
            kind=job[1],
            task_id=task_id,
            attempt=retries + 1,
        )


def on_task_postrun(
    task: Any = None,
    args: Any = None,
    kwargs: Any = None,
    retval: Any = None,
    state: str | None = None,
    **_: Any,
) -> None:
    job = session_job_of(_name(task), args, kwargs)
    if job is not None and state == "SUCCESS":
        _guarded(services.job_run_finished, session_id=job[0], kind=job[1], result=retval)


def on_task_retry(sender: Any = None, request: Any = None, reason: Any = None, **_: Any) -> None:
    job = session_job_of(
        _name(sender), getattr(request, "args", None), getattr(request, "kwargs", None)
    )
    if job is not None:
        error = reason if isinstance(reason, BaseException) else None
        _guarded(
            services.job_run_retrying,
            session_id=job[0],
            kind=job[1],
            error=describe(error) or str(reason or ""),
        )


def on_task_failure(
    sender: Any = None,
    exception: BaseException | None = None,
    args: Any = None,
    kwargs: Any = None,
    **_: Any,
) -> None:
    job = session_job_of(_name(sender), args, kwargs)
    if job is not None:
        _guarded(services.job_run_failed, session_id=job[0], kind=job[1], error=describe(exception))


# The one job enqueued with nothing on the session to say so (core of the forced summary:
# `force=True`); the others are requested through the session's request columns.
FORCED_SUMMARY_TASK = "sessions_app.tasks.summarize_session"


def _published_arguments(body: Any) -> tuple[Any, Any]:
    # Celery's message protocol 2 sends (args, kwargs, embed); protocol 1 a dict.
    if isinstance(body, (tuple, list)) and len(body) >= 2:
        return body[0], body[1]
    if isinstance(body, dict):
        return body.get("args"), body.get("kwargs")
    return None, None


def on_after_task_publish(
    sender: Any = None, headers: Any = None, body: Any = None, **_: Any
) -> None:
    """A forced summary is queued (in the process that enqueued it, once the broker took it):
    it shows as requested from now, not idle until a worker starts it."""
    name = str(sender or (headers or {}).get("task") or "")
    if name != FORCED_SUMMARY_TASK:
        return
    args, kwargs = _published_arguments(body)
    if not isinstance(kwargs, dict) or kwargs.get("force") is not True:
        return
    job = session_job_of(name, args, kwargs)
    if job is not None:
        _guarded(
            services.job_run_requested,
            session_id=job[0],
            kind=job[1],
            task_id=str((headers or {}).get("id") or ""),
        )


def connect_celery_signals() -> None:
    from celery import signals

    signals.task_prerun.connect(on_task_prerun, weak=False, dispatch_uid="mh-jobs-prerun")
    signals.task_postrun.connect(on_task_postrun, weak=False, dispatch_uid="mh-jobs-postrun")
    signals.task_retry.connect(on_task_retry, weak=False, dispatch_uid="mh-jobs-retry")
    signals.task_failure.connect(on_task_failure, weak=False, dispatch_uid="mh-jobs-failure")
    signals.after_task_publish.connect(
        on_after_task_publish, weak=False, dispatch_uid="mh-jobs-published"
    )
