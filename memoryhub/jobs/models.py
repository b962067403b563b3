"""The last run of each kind of background work per session, as the worker saw it.

One row per (session, kind), written by the Celery signals of the tasks that do the work
(memoryhub.jobs.signals): running when a run starts, done or failed (with the error) when it
ends, back to requested while a transient error waits for its retry. That a run is wanted
before it starts is the session's own pending-request column (`summary_requested_at`,
`extraction_requested_at`, `embedding_requested_at`), which the append path and the sweeps set
anyway: job visibility adds no write to an append. A summary forced with `POST …/summarize/`
marks no column: the process that enqueued it records its row as requested once the broker
took it (memoryhub.jobs.signals.on_after_task_publish)."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from memoryhub.accounts.models import TenantOwnedModel

JOB_ERROR_MAX_CHARS = 2000


class JobKind(models.TextChoices):
    SUMMARY = "summary", "Summary"
    EXTRACTION = "extraction", "Fact extraction"
    EMBEDDING = "embedding", "Embedding"


class JobState(models.TextChoices):
    REQUESTED = "requested", "Requested"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class JobRun(TenantOwnedModel):
    # Operational, recomputed by the next run: not a kind of its own in deletion counts.
    derived_data: ClassVar[bool] = True

    # Unindexed alone: jobrun_unique_session_kind leads with it.
    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.CASCADE, related_name="job_runs", db_index=False
    )
    kind = models.CharField(max_length=16, choices=JobKind.choices)
    state = models.CharField(max_length=16, choices=JobState.choices)
    task_id = models.CharField(max_length=255, blank=True, default="")
    attempt = models.PositiveIntegerField(default=1, help_text="1, then 2… for each retry.")
    requested_at = models.DateTimeField(
        null=True, blank=True, help_text="When a transient error queued it again."
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="", help_text="The last run's error, if any.")
    result = models.BigIntegerField(
        null=True, blank=True, help_text="What the task returned (a seq, a count), if a number."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "kind"], name="jobrun_unique_session_kind"),
            models.CheckConstraint(
                condition=models.Q(kind__in=JobKind.values), name="jobrun_kind_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(state__in=JobState.values), name="jobrun_state_valid"
            ),
        ]
        indexes = [
            # The dashboard's panel and /metrics: running and failed jobs per tenant and kind.
            models.Index(fields=["tenant", "state", "kind"], name="jobrun_tenant_state"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} {self.kind} {self.state}"
