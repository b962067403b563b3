"""Retention's beat task: a thin wrapper over memoryhub.retention.prune. Takes no arguments
and is safe to run twice."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from django.conf import settings
from django.core.cache import cache

from memoryhub.core.locks import exclusive_run
from memoryhub.core.rls import system_task
from memoryhub.retention import prune

logger = logging.getLogger(__name__)

RETENTION_LOCK = "memoryhub-retention-cleanup"
# The cache key a scheduled run claims for its tick (below).
RETENTION_TICK_KEY = "memoryhub:retention-cleanup:tick"
# A tick's claim lasts this share of the interval: as long as the schedule's expiry, so a second
# beat's tick, whatever its phase, falls inside the first one's claim (one run per interval).
TICK_SHARE = 0.9


def _scheduled_by(task: Task) -> str | None:
    """The schedule entry that sent this run: django-celery-beat names it in a message header,
    which a worker puts on the request (an eager run keeps it under `headers`)."""
    request = task.request
    name = getattr(request, "periodic_task_name", None)
    return name or (request.headers or {}).get("periodic_task_name")


def _tick_claimed(task: Task) -> bool:
    """Whether this run may go ahead as its schedule's tick.

    The advisory lock keeps two runs from overlapping, not from following each other: a second
    beat started by mistake sends the cleanup on its own clock, and its run would start once the
    first had finished. So a run sent by a beat first claims the tick in the shared cache (Redis
    with REDIS_URL), for most of an interval, and a claim already there means this tick ran.
    Runs sent by hand are never held back. With the cache unreachable the run goes ahead: a
    second run deletes nothing.
    """
    if _scheduled_by(task) is None:
        return True
    window = max(1, int(settings.CLEANUP_INTERVAL_SECONDS * TICK_SHARE))
    try:
        return bool(cache.add(RETENTION_TICK_KEY, task.request.id or "", timeout=window))
    except Exception:
        logger.warning("retention_cleanup: the cache did not answer; running", exc_info=True)
        return True


# The task's name is the one it had in sessions_app.tasks: messages already queued under that
# name (and beat's stored schedule) must still find it while they drain.
@shared_task(
    bind=True,
    name="sessions_app.tasks.retention_cleanup",
    acks_late=True,
    ignore_result=True,
    soft_time_limit=max(60, int(settings.CLEANUP_INTERVAL_SECONDS * 0.8)),
    time_limit=max(90, int(settings.CLEANUP_INTERVAL_SECONDS * 0.9)),
)
@system_task
def retention_cleanup(self: Task) -> dict[str, dict[str, int]] | None:
    """Beat (hourly by default): apply every tenant's retention policy.

    One run at a time across all workers and beats (an advisory lock); a second one finds the
    lock taken and returns None. One scheduled run per tick, however many beats send it (a
    claim in the shared cache, see _tick_claimed); a later tick's run returns None too. Safe to
    repeat: a run after a run deletes nothing. A run cut short (time limit, lost worker) keeps
    what it deleted, audited, and the next run goes on.
    """
    with exclusive_run(RETENTION_LOCK) as acquired:
        if not acquired:
            logger.info("retention_cleanup: another run holds the lock; skipping")
            return None
        if not _tick_claimed(self):
            logger.info("retention_cleanup: this tick ran already (another beat?); skipping")
            return None
        logger.info("retention_cleanup: running")
        reports = prune.retention_prune()
    return {report.tenant.slug: report.as_dict() for report in reports if report.total}
