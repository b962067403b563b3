"""Retention's beat task: a thin wrapper over memoryhub.retention.prune. Takes no arguments
and is safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from memoryhub.core.locks import exclusive_run
from memoryhub.core.rls import system_task
from memoryhub.retention import prune

logger = logging.getLogger(__name__)

RETENTION_LOCK = "memoryhub-retention-cleanup"


# The task's name is the one it had in sessions_app.tasks: messages already queued under that
# name (and beat's stored schedule) must still find it while they drain.
@shared_task(
    name="sessions_app.tasks.retention_cleanup",
    acks_late=True,
    ignore_result=True,
    soft_time_limit=max(60, int(settings.CLEANUP_INTERVAL_SECONDS * 0.8)),
    time_limit=max(90, int(settings.CLEANUP_INTERVAL_SECONDS * 0.9)),
)
@system_task
def retention_cleanup() -> dict[str, dict[str, int]] | None:
    """Beat (hourly by default): apply every tenant's retention policy.

    One run at a time across all workers and beats (an advisory lock); a second one finds the
    lock taken and returns None. Safe to repeat: a run after a run deletes nothing. A run cut
    short (time limit, lost worker) keeps what it deleted, audited, and the next run goes on.
    """
    with exclusive_run(RETENTION_LOCK) as acquired:
        if not acquired:
            logger.info("retention_cleanup: another run holds the lock; skipping")
            return None
        reports = prune.retention_prune()
    return {report.tenant.slug: report.as_dict() for report in reports if report.total}
