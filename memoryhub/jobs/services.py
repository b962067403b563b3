"""Recording a session's job runs, from the Celery signals of the tasks that do the work.

Every write is one conditional UPDATE on the (session, kind) row, or its first INSERT: a
redelivered task, a retry, or two workers racing on one session leave one row describing the
latest run. A session deleted meanwhile is skipped quietly (the row would cascade anyway).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from memoryhub.jobs.models import JOB_ERROR_MAX_CHARS, JobKind, JobRun, JobState
from sessions_app.models import Session


def _job_run_write(*, session_id: uuid.UUID, kind: JobKind, fields: dict[str, Any]) -> None:
    fields = {**fields, "updated_at": timezone.now()}
    if JobRun.objects.filter(session_id=session_id, kind=kind).update(**fields):
        return
    tenant_id = Session.objects.filter(pk=session_id).values_list("tenant_id", flat=True).first()
    if tenant_id is None:
        return  # the session is gone
    try:
        # A savepoint: a lost race (or the session deleted after the read) must not poison a
        # transaction around us.
        with transaction.atomic():
            JobRun.objects.create(tenant_id=tenant_id, session_id=session_id, kind=kind, **fields)
    except IntegrityError:
        JobRun.objects.filter(session_id=session_id, kind=kind).update(**fields)


def job_run_requested(*, session_id: uuid.UUID, kind: JobKind, task_id: str) -> None:
    """A run queued without a request column to show it (a summary forced with POST
    …/summarize/): requested until it starts. A run in progress keeps showing as running (the
    queued one follows it)."""
    now = timezone.now()
    fields: dict[str, Any] = {
        "state": JobState.REQUESTED,
        "task_id": task_id[:255],
        "requested_at": now,
        "error": "",
        "updated_at": now,
    }
    runs = JobRun.objects.filter(session_id=session_id, kind=kind)
    if runs.exclude(state=JobState.RUNNING).update(**fields) or runs.exists():
        return
    _job_run_write(session_id=session_id, kind=kind, fields=fields)


def job_run_started(*, session_id: uuid.UUID, kind: JobKind, task_id: str, attempt: int) -> None:
    fields: dict[str, Any] = {
        "state": JobState.RUNNING,
        "task_id": task_id[:255],
        "attempt": max(attempt, 1),
        "started_at": timezone.now(),
        "finished_at": None,
        "result": None,
    }
    if attempt <= 1:
        fields["error"] = ""  # a fresh run; a retry keeps showing what it retries after
    _job_run_write(session_id=session_id, kind=kind, fields=fields)


def job_run_finished(*, session_id: uuid.UUID, kind: JobKind, result: Any) -> None:
    _job_run_write(
        session_id=session_id,
        kind=kind,
        fields={
            "state": JobState.DONE,
            "finished_at": timezone.now(),
            "error": "",
            "result": result if isinstance(result, int) and not isinstance(result, bool) else None,
        },
    )


def job_run_retrying(*, session_id: uuid.UUID, kind: JobKind, error: str) -> None:
    """A transient error: the task is queued again (with backoff); requested until it starts."""
    _job_run_write(
        session_id=session_id,
        kind=kind,
        fields={
            "state": JobState.REQUESTED,
            "requested_at": timezone.now(),
            "finished_at": timezone.now(),
            "error": error[:JOB_ERROR_MAX_CHARS],
        },
    )


def job_run_failed(*, session_id: uuid.UUID, kind: JobKind, error: str) -> None:
    _job_run_write(
        session_id=session_id,
        kind=kind,
        fields={
            "state": JobState.FAILED,
            "finished_at": timezone.now(),
            "error": error[:JOB_ERROR_MAX_CHARS] or "failed",
        },
    )
