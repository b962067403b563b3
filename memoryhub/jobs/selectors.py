"""Reading job states: a session's jobs, and a tenant's backlog."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Count, Q

from memoryhub.accounts.models import Tenant
from memoryhub.jobs.models import JobKind, JobRun, JobState
from sessions_app.models import Session

# The session column that says a run of each kind is requested (set by the append path or a
# sweep, cleared by the task when it is done: sessions_app.pending).
REQUEST_FIELDS: dict[str, str] = {
    JobKind.SUMMARY: "summary_requested_at",
    JobKind.EXTRACTION: "extraction_requested_at",
    JobKind.EMBEDDING: "embedding_requested_at",
}
IDLE = "idle"
RECENT_FAILURES = 5


@dataclass(frozen=True)
class JobStatus:
    kind: str
    state: str  # a JobState, or "idle": never requested, never run
    requested_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    attempt: int | None
    error: str
    result: int | None


def job_state(*, requested_at: dt.datetime | None, run: JobRun | None) -> str:
    """The job's state from the session's request column and the last run's row.

    A run in progress, or waiting for its retry, is what its row says. Otherwise a request newer
    than the last run's end is a new run waiting in the queue. Otherwise the last run's outcome:
    after a permanent failure the task re-stamps the request (for the sweep to retry later)
    before its failure is recorded, so "failed" shows until that retry starts.
    """
    if run is not None and run.state in (JobState.RUNNING, JobState.REQUESTED):
        return str(run.state)
    if requested_at is not None and (
        run is None or run.finished_at is None or run.finished_at < requested_at
    ):
        return JobState.REQUESTED
    return str(run.state) if run is not None else IDLE


def session_jobs(*, session: Session) -> list[JobStatus]:
    """Each kind of background work of `session` (loaded with its request columns), in a
    fixed order: summary, extraction, embedding. One query."""
    runs = {run.kind: run for run in JobRun.objects.filter(session_id=session.pk)}
    statuses = []
    for kind in JobKind:
        run = runs.get(kind)
        requested_at: dt.datetime | None = getattr(session, REQUEST_FIELDS[kind])
        if run is not None and run.state == JobState.REQUESTED and run.requested_at:
            requested_at = max(requested_at or run.requested_at, run.requested_at)
        statuses.append(
            JobStatus(
                kind=str(kind),
                state=job_state(requested_at=requested_at, run=run),
                requested_at=requested_at,
                started_at=run.started_at if run else None,
                finished_at=run.finished_at if run else None,
                attempt=run.attempt if run else None,
                error=run.error if run else "",
                result=run.result if run else None,
            )
        )
    return statuses


@dataclass(frozen=True)
class TenantBacklog:
    pending: dict[str, int]  # sessions with a run requested, per kind
    running: dict[str, int]
    failed: dict[str, int]
    recent_failures: list[JobRun]

    @property
    def total_pending(self) -> int:
        return sum(self.pending.values())


def tenant_backlog(*, tenant: Tenant) -> TenantBacklog:
    """The tenant's background work: requested, running and failed, per kind. Three queries:
    the tenant's sessions (by the tenant-first index), its running and failed job rows (by
    theirs), and the newest failures."""
    pending_counts = Session.objects.for_tenant(tenant).aggregate(
        **{
            kind.value: Count("pk", filter=Q(**{f"{field}__isnull": False}))
            for kind, field in ((JobKind(k), f) for k, f in REQUEST_FIELDS.items())
        }
    )
    by_state: dict[str, dict[str, int]] = {JobState.RUNNING: {}, JobState.FAILED: {}}
    rows = (
        JobRun.objects.for_tenant(tenant)
        .filter(state__in=[JobState.RUNNING, JobState.FAILED])
        .values_list("state", "kind")
        .annotate(n=Count("pk"))
    )
    for state, kind, count in rows:
        by_state[state][kind] = count
    failures = list(
        JobRun.objects.for_tenant(tenant)
        .filter(state=JobState.FAILED)
        .select_related("session__end_user")
        .order_by("-finished_at", "-pk")[:RECENT_FAILURES]
    )
    return TenantBacklog(
        pending={kind.value: int(pending_counts[kind.value] or 0) for kind in JobKind},
        running={kind.value: by_state[JobState.RUNNING].get(kind.value, 0) for kind in JobKind},
        failed={kind.value: by_state[JobState.FAILED].get(kind.value, 0) for kind in JobKind},
        recent_failures=failures,
    )
