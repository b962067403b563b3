"""Retention and purge by age: remove what a tenant's policy (or a purge request) says is
expired, in bounded batches, counting every row, and audit each run (the rules PicoBot's and
bub's stores keep).

What goes, per tenant (MemoryPolicy; an agent's row overrides the tenant's for its sessions):
- messages created more than `retention_days` ago, and sessions idle (last activity) for longer,
  with their state and summaries;
- a session's oldest messages past `transcript_max_messages` (seed 000's transcript cap, when
  set), counted with the messages and also as `transcript_evicted` in the audit's detail;
- summaries of live sessions that a newer summary replaced, once older than the cutoff (the
  current summary stays: it is the session's memory of what retention removed);
- daily notes older than `daily_note_retention_days` (the tenant's policy);
- expired, unpinned user memories (with their versions);
- idempotency records older than MEMORYHUB_IDEMPOTENCY_TTL_HOURS.
Never removed by retention: pinned memories, facts (they are the person's knowledge, with
provenance; the user purge or DELETE /facts/ removes them), long-term notes, audit events.

Every delete runs in batches of ids taken along an indexed timestamp, each batch its own short
transaction, and re-applies its filter when deleting: a session that became active between the
read and the delete is spared; an interrupted run keeps its progress; two runs at once delete
each row once, and each counts only the rows its own DELETEs removed.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connections, router
from django.db.models import CASCADE, QuerySet
from django.utils import timezone

from facts_app.selectors.memories import memories_expired
from facts_app.services.notes import note_daily_prune
from memoryhub.accounts.models import Actor, AuditAction, MemoryPolicy, Tenant
from memoryhub.accounts.selectors import idempotency_records_before
from memoryhub.accounts.services import audit_event_record, delete_in_batches
from memoryhub.core import metrics
from sessions_app.models import Message
from sessions_app.prune import (
    BATCH_SIZE,
    BatchPacer,
    ConversationScope,
    Progress,
    TranscriptCapScope,
    _no_progress,
    conversations_prune,
    finished_work,
    finished_work_count,
    kind,
    transcripts_cap,
)

logger = logging.getLogger(__name__)

DEFAULT_RETENTION_DAYS = 90
DEFAULT_DAILY_NOTE_RETENTION_DAYS = 30
# Who the scheduled retention run is, in the audit log.
RETENTION_ACTOR = Actor.system("retention")


@dataclass
class PruneReport:
    """Rows removed (or, in a dry run, that would be) per kind, and the cutoffs applied."""

    tenant: Tenant
    dry_run: bool
    counts: Counter[str] = field(default_factory=Counter)
    cutoffs: dict[str, str | None] = field(default_factory=dict)
    # Messages that went for the transcript cap, not their age (also in counts["messages"]).
    transcript_evicted: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        return {kind: count for kind, count in sorted(self.counts.items()) if count}


# Other client backends of the database busy now or lately: running a statement (a request's
# query, or one waiting on a lock), inside a transaction, or back to idle within the window (a
# request's statements come and go: sampled once, "active" alone misses most of a busy web
# worker's). A plain role sees the state of its own role's backends only (another role's show
# NULL unless it has pg_read_all_stats): the web processes and the worker share one. Reading
# pg_stat_activity copies the backends' status array from shared memory: no lock, no I/O.
_PG_CLIENTS_BUSY = """
SELECT EXISTS (
    SELECT FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND backend_type = 'client backend'
      AND (state <> 'idle' OR state_change > clock_timestamp() - make_interval(secs => %s))
)
"""
# The window: a client idle for longer is not competing with retention now.
CLIENTS_BUSY_WINDOW_SECONDS = 0.1


def clients_busy(*, using: str, window: float = CLIENTS_BUSY_WINDOW_SECONDS) -> bool:
    """Whether another client of the database is busy (PostgreSQL: see _PG_CLIENTS_BUSY);
    False elsewhere (SQLite has no such view)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        if connection.in_atomic_block:
            # The view is a snapshot taken once per transaction: a fresh one.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(_PG_CLIENTS_BUSY, [window])
        row = cursor.fetchone()
    return bool(row and row[0])


@dataclass
class YieldToClients:
    """The pause between retention's batches of messages (BatchPacer's `sleep`, after each batch
    that left work): taken only while other clients of the database are busy. Beside requests,
    retention's backend then runs at most 1 / (1 + ratio) of the time; alone it runs flat out.
    Measured on a 2-core box shared with other work, 4 clients appending throughout one run and
    cycles of 100,000 expired messages (appenders' p99 while retention ran / just before it):
    without a pause 1.24, 1.40, 1.42, 1.67 (the last the quietest run); a pause of twice the
    batch's time 1.03, 1.22, 1.50; four times 1.06 (p50 1.01). Shorter batches while busy
    (20-40 ms, twice their time) gave 1.08 and 1.14 for 15% more database CPU a row, so the
    batches keep BatchPacer's budget. On a faster machine of the kind (appends of 3.5 ms, the
    bench's cleanup part, alternating runs): four times 1.43, 1.44, 1.53, 1.43, 1.42, 1.89, 1.32;
    nine times 1.30, 1.15, 1.36, 1.44, 1.18, 1.18; nineteen times (the default since) 1.10, 1.12,
    1.01, 1.20, 1.08, 1.31. Under saturation every batch takes a core from the appenders, so
    only a small share of the time spent in batches keeps their tail: with 19 retention deletes
    at a twentieth of its rate alone while clients are busy (5,500 rows/s there; 19,800,000 an
    hour). The counts are for the bench and the tests."""

    busy: Callable[[], bool]
    sleep: Callable[[float], None] = time.sleep
    checks: int = 0
    pauses: int = 0
    paused_seconds: float = 0.0

    def __call__(self, seconds: float) -> None:
        self.checks += 1
        if self.busy():
            self.pauses += 1
            self.paused_seconds += seconds
            self.sleep(seconds)


def retention_pacer(*, size: int = BATCH_SIZE, ratio: float | None = None) -> BatchPacer:
    """The pacer retention's message batches run under: sized by time (BatchPacer), and after
    each batch, while other clients of the database are busy, a pause of `ratio` (default
    settings.RETENTION_YIELD_RATIO) times the batch's time; no pause with 0, or off PostgreSQL."""
    ratio = settings.RETENTION_YIELD_RATIO if ratio is None else ratio
    using = router.db_for_write(Message)
    if ratio <= 0 or connections[using].vendor != "postgresql":
        return BatchPacer(size=size)
    busy = partial(clients_busy, using=using)
    return BatchPacer(size=size, pause_ratio=ratio, sleep=YieldToClients(busy=busy))


def _policy_days(policy: MemoryPolicy | None, name: str, default: int) -> int | None:
    return default if policy is None else getattr(policy, name)


def _scopes_for_tenant(*, tenant: Tenant, now: dt.datetime) -> list[ConversationScope]:
    """One scope per policy: the tenant's (every agent without a row of its own) and each
    agent override; "keep forever" (no days) is no scope at all."""
    policies = {policy.agent_id: policy for policy in MemoryPolicy.objects.filter(tenant=tenant)}
    overrides = frozenset(agent for agent in policies if agent)
    scopes: list[ConversationScope] = []
    days = _policy_days(policies.get(""), "retention_days", DEFAULT_RETENTION_DAYS)
    if days is not None:
        scopes.append(
            ConversationScope(
                tenant=tenant, cutoff=now - dt.timedelta(days=days), other_agents_than=overrides
            )
        )
    for agent in sorted(overrides):
        agent_days = policies[agent].retention_days
        if agent_days is not None:
            scopes.append(
                ConversationScope(
                    tenant=tenant,
                    cutoff=now - dt.timedelta(days=agent_days),
                    agents=frozenset({agent}),
                )
            )
    return scopes


def _transcript_scopes_for_tenant(*, tenant: Tenant) -> list[TranscriptCapScope]:
    """As _scopes_for_tenant, for the transcript cap: no cap (empty or 0) is no scope."""
    policies = {policy.agent_id: policy for policy in MemoryPolicy.objects.filter(tenant=tenant)}
    overrides = frozenset(agent for agent in policies if agent)
    scopes: list[TranscriptCapScope] = []
    tenant_policy = policies.get("")
    if tenant_policy is not None and tenant_policy.transcript_cap is not None:
        scopes.append(
            TranscriptCapScope(
                tenant=tenant, cap=tenant_policy.transcript_cap, other_agents_than=overrides
            )
        )
    for agent in sorted(overrides):
        cap = policies[agent].transcript_cap
        if cap is not None:
            scopes.append(TranscriptCapScope(tenant=tenant, cap=cap, agents=frozenset({agent})))
    return scopes


def retention_prune_tenant(
    *,
    tenant: Tenant,
    now: dt.datetime | None = None,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    progress: Progress = _no_progress,
    actor: Actor = RETENTION_ACTOR,
    pacer: BatchPacer | None = None,
) -> PruneReport:
    """Apply the tenant's retention policy once; audit it (one event) unless nothing went or
    it is a dry run. Idempotent: a second run right after finds nothing left.

    Messages go in batches sized by time (sessions_app.prune.BatchPacer, starting at
    `batch_size`), yielding to busy clients of the database between them (retention_pacer;
    `pacer` to choose its clock and pauses); the other kinds, in batches of `batch_size`."""
    now = now or timezone.now()
    report = PruneReport(tenant=tenant, dry_run=dry_run)
    try:
        _retention_apply(
            report=report,
            now=now,
            batch_size=batch_size,
            progress=progress,
            pacer=pacer or retention_pacer(size=batch_size),
        )
    finally:
        # Also when interrupted (a time limit, a lost connection): what went is audited, and
        # counted in the metric (here, not from the task's result, which a run cut short has
        # none of).
        if not dry_run:
            for name, rows in report.counts.items():
                if rows > 0:
                    metrics.RETENTION_ROWS_DELETED.labels(kind=name).inc(rows)
        if not dry_run and report.total:
            audit_event_record(
                tenant=tenant,
                actor=actor,
                action=AuditAction.PURGE,
                object_type="retention",
                counts=report.as_dict(),
                detail={
                    "cutoffs": report.cutoffs,
                    "now": now.isoformat(),
                    "transcript_evicted": report.transcript_evicted,
                },
            )
        logger.info(
            "retention%s tenant=%s %s",
            " (dry run)" if dry_run else "",
            tenant.slug,
            report.as_dict() or "nothing expired",
        )
    return report


def _retention_apply(
    *,
    report: PruneReport,
    now: dt.datetime,
    batch_size: int,
    progress: Progress,
    pacer: BatchPacer,
) -> None:
    tenant, dry_run = report.tenant, report.dry_run
    for scope in _scopes_for_tenant(tenant=tenant, now=now):
        label = "sessions" if scope.agents is None else f"sessions[{next(iter(scope.agents))}]"
        report.cutoffs[label] = scope.cutoff.isoformat()
        conversations_prune(
            scope=scope,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
            pacer=pacer,
            counts=report.counts,
        )
    for cap_scope in _transcript_scopes_for_tenant(tenant=tenant):
        label = (
            "transcript_cap"
            if cap_scope.agents is None
            else f"transcript_cap[{next(iter(cap_scope.agents))}]"
        )
        report.cutoffs[label] = f"{cap_scope.cap} messages"
        before = report.counts[kind(Message)]
        try:
            transcripts_cap(
                scope=cap_scope,
                dry_run=dry_run,
                batch_size=batch_size,
                progress=progress,
                pacer=pacer,
                counts=report.counts,
            )
        finally:
            report.transcript_evicted += report.counts[kind(Message)] - before
    tenant_policy = MemoryPolicy.objects.filter(tenant=tenant, agent_id="").first()
    note_days = _policy_days(
        tenant_policy, "daily_note_retention_days", DEFAULT_DAILY_NOTE_RETENTION_DAYS
    )
    report.cutoffs["daily_notes"] = None if note_days is None else f"{note_days} days"
    if note_days is not None:
        notes = note_daily_prune(
            tenant=tenant,
            older_than_days=note_days,
            now=now,
            batch_size=batch_size,
            dry_run=dry_run,
        )
        report.counts["daily_notes"] += notes
        progress("daily notes", notes)
    _prune_simple(
        report=report,
        queryset=memories_expired(tenant=tenant, now=now),
        order_by=("expires_at", "pk"),
        batch_size=batch_size,
        progress=progress,
    )
    _task_work_prune(
        report=report, policy=tenant_policy, now=now, batch_size=batch_size, progress=progress
    )
    idempotency_cutoff = now - dt.timedelta(hours=settings.MEMORYHUB_IDEMPOTENCY_TTL_HOURS)
    report.cutoffs["idempotency_records"] = idempotency_cutoff.isoformat()
    _prune_simple(
        report=report,
        queryset=idempotency_records_before(tenant=tenant, cutoff=idempotency_cutoff),
        order_by=("created_at", "pk"),
        batch_size=batch_size,
        progress=progress,
    )


def _prune_simple(
    *,
    report: PruneReport,
    queryset: QuerySet[Any],
    order_by: tuple[str, ...],
    batch_size: int,
    progress: Progress,
) -> None:
    if report.dry_run:
        # Cascades are counted too, so the dry run names the same kinds the run will.
        count = queryset.count()
        report.counts[kind(queryset.model)] += count
        for relation in queryset.model._meta.related_objects:
            if relation.on_delete is CASCADE:
                related = relation.related_model._default_manager.filter(
                    **{f"{relation.field.name}__in": queryset.values("pk")}
                )
                report.counts[kind(relation.related_model)] += related.count()
        progress(str(queryset.model._meta.verbose_name_plural), count)
        return
    delete_in_batches(
        queryset=queryset,
        order_by=order_by,
        batch_size=batch_size,
        counts=report.counts,
        progress=progress,
    )


def retention_prune(
    *,
    tenants: QuerySet[Tenant] | None = None,
    now: dt.datetime | None = None,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    progress: Progress = _no_progress,
    actor: Actor = RETENTION_ACTOR,
) -> list[PruneReport]:
    """retention_prune_tenant for every tenant (or the given ones), one clock for all."""
    now = now or timezone.now()
    return [
        retention_prune_tenant(
            tenant=tenant,
            now=now,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
            actor=actor,
        )
        for tenant in (tenants if tenants is not None else Tenant.objects.order_by("pk"))
    ]


DEFAULT_TASK_RETENTION_DAYS = 30


def _task_work_prune(
    *,
    report: PruneReport,
    policy: MemoryPolicy | None,
    now: dt.datetime,
    batch_size: int,
    progress: Progress,
) -> None:
    """Finished plans and task contexts (sessions_app.prune.finished_work) unchanged for
    `task_retention_days` (the tenant's policy; empty keeps them)."""
    days = _policy_days(policy, "task_retention_days", DEFAULT_TASK_RETENTION_DAYS)
    cutoff = None if days is None else now - dt.timedelta(days=days)
    report.cutoffs["plans"] = report.cutoffs["task_contexts"] = (
        None if cutoff is None else cutoff.isoformat()
    )
    if cutoff is None:
        return
    plans, tasks = finished_work(tenant=report.tenant, cutoff=cutoff)
    if report.dry_run:
        # Counted by sessions_app, not by _prune_simple: each row once across both cascades.
        report.counts.update(finished_work_count(tenant=report.tenant, plans=plans, tasks=tasks))
        progress("plans and task contexts", report.counts["plans"])
        return
    _prune_simple(
        report=report,
        queryset=plans,
        order_by=("updated_at", "pk"),
        batch_size=batch_size,
        progress=progress,
    )
    _prune_simple(
        report=report,
        queryset=tasks,
        order_by=("updated_at", "pk"),
        batch_size=batch_size,
        progress=progress,
    )
