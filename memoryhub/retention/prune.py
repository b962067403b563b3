"""Retention and purge by age: remove what a tenant's policy (or a purge request) says is
expired, in bounded batches, counting every row, and audit each run (the rules PicoBot's and
bub's stores keep).

What goes, per tenant (MemoryPolicy; an agent's row overrides the tenant's for its sessions):
- messages created more than `retention_days` ago, and sessions idle (last activity) for longer,
  with their state and summaries;
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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import CASCADE, Exists, F, Model, OuterRef, Q, QuerySet
from django.utils import timezone

from facts_app.models import UserMemory
from facts_app.services.notes import note_daily_prune
from memoryhub.accounts.models import (
    Actor,
    AuditAction,
    EndUser,
    IdempotencyRecord,
    MemoryPolicy,
    Tenant,
)
from memoryhub.accounts.services import (
    audit_event_record,
    deleted_kinds,
    end_user_recall_touch,
)
from sessions_app.models import (
    FINISHED_PLAN_STATUSES,
    Message,
    Plan,
    Session,
    StateEntry,
    SubTask,
    Summary,
    TaskContext,
)

logger = logging.getLogger(__name__)

BATCH_SIZE = 1000
DEFAULT_RETENTION_DAYS = 90
DEFAULT_DAILY_NOTE_RETENTION_DAYS = 30
# Who the scheduled retention run is, in the audit log.
RETENTION_ACTOR = Actor.system("retention")

Progress = Callable[[str, int], None]  # (kind, rows just deleted or counted)


def _no_progress(kind: str, rows: int) -> None:
    return None


@dataclass
class PruneReport:
    """Rows removed (or, in a dry run, that would be) per kind, and the cutoffs applied."""

    tenant: Tenant
    dry_run: bool
    counts: Counter[str] = field(default_factory=Counter)
    cutoffs: dict[str, str | None] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        return {kind: count for kind, count in sorted(self.counts.items()) if count}


@dataclass(frozen=True)
class ConversationScope:
    """The sessions and messages one cutoff applies to: a tenant, optionally one person, and
    either some agents only or every agent but some (those with their own policy)."""

    tenant: Tenant
    cutoff: dt.datetime
    end_user: EndUser | None = None
    agents: frozenset[str] | None = None
    other_agents_than: frozenset[str] = frozenset()

    def _narrow(self, queryset: QuerySet[Any], *, prefix: str) -> QuerySet[Any]:
        if self.end_user is not None:
            queryset = queryset.filter(**{f"{prefix}end_user": self.end_user})
        if self.agents is not None:
            queryset = queryset.filter(**{f"{prefix}agent_id__in": self.agents})
        if self.other_agents_than:
            queryset = queryset.exclude(**{f"{prefix}agent_id__in": self.other_agents_than})
        return queryset

    def expired_sessions(self) -> QuerySet[Session]:
        return self._narrow(
            Session.objects.for_tenant(self.tenant).filter(last_active_at__lt=self.cutoff),
            prefix="",
        )

    def expired_messages(self) -> QuerySet[Message]:
        return self._narrow(
            Message.objects.for_tenant(self.tenant).filter(created_at__lt=self.cutoff),
            prefix="session__",
        )

    def replaced_summaries(self) -> QuerySet[Summary]:
        return self._narrow(
            Summary.objects.for_tenant(self.tenant).filter(
                created_at__lt=self.cutoff, through_seq__lt=F("session__summarized_seq")
            ),
            prefix="session__",
        )


def _delete_in_batches(
    *,
    queryset: QuerySet[Any],
    order_by: tuple[str, ...],
    batch_size: int,
    counts: Counter[str],
    progress: Progress,
) -> None:
    """Delete what `queryset` selects, `batch_size` ids at a time along `order_by` (an index),
    adding what each DELETE really removed (cascades included) to `counts`."""
    while True:
        ids = list(queryset.order_by(*order_by).values_list("pk", flat=True)[:batch_size])
        if not ids:
            return
        with transaction.atomic():
            # The filter again, not just the ids: a row that stopped matching is kept.
            _, per_model = queryset.filter(pk__in=ids).order_by().delete()
        removed = deleted_kinds(per_model=per_model)
        counts.update(removed)
        progress(queryset.model._meta.verbose_name_plural, sum(removed.values()))
        if len(ids) < batch_size:
            return


def _kind(model: type[Model]) -> str:
    return str(model._meta.verbose_name_plural).replace(" ", "_")


def conversations_prune(
    *,
    scope: ConversationScope,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    progress: Progress = _no_progress,
) -> Counter[str]:
    """Messages older than the scope's cutoff, sessions idle since before it (with their
    state and summaries), and replaced summaries older than it."""
    counts: Counter[str] = Counter()
    sessions = scope.expired_sessions()
    if dry_run:
        in_expired = Q(session__in=sessions.values("pk"))
        counts[_kind(Message)] = (
            Message.objects.for_tenant(scope.tenant)
            .filter(Q(pk__in=scope.expired_messages().values("pk")) | in_expired)
            .count()
        )
        counts[_kind(Session)] = sessions.count()
        counts[_kind(StateEntry)] = StateEntry.objects.filter(in_expired).count()
        counts[_kind(Summary)] = (
            Summary.objects.for_tenant(scope.tenant)
            .filter(Q(pk__in=scope.replaced_summaries().values("pk")) | in_expired)
            .count()
        )
        # A session's plans and task contexts (and theirs sub-tasks) go with it.
        plans = Plan.objects.filter(in_expired)
        tasks = TaskContext.objects.filter(in_expired | Q(plan__in=plans.values("pk")))
        counts[_kind(Plan)] = plans.count()
        counts[_kind(TaskContext)] = tasks.count()
        counts[_kind(SubTask)] = SubTask.objects.filter(task__in=tasks.values("pk")).count()
        progress("dry run", sum(counts.values()))
        return counts
    # Messages first, oldest first along (tenant, created_at): an expired session's messages
    # are all older than its last activity, so its own delete below is small.
    for queryset, order_by in (
        (scope.expired_messages(), ("created_at", "pk")),
        (scope.replaced_summaries(), ("created_at", "pk")),
        (sessions, ("last_active_at", "pk")),
    ):
        _delete_in_batches(
            queryset=queryset,
            order_by=order_by,
            batch_size=batch_size,
            counts=counts,
            progress=progress,
        )
    if counts[_kind(Message)]:
        # Search indexes hold these messages: tell them (a deleted session alone they notice).
        end_user_recall_touch(
            tenant=scope.tenant,
            end_user_ids=None if scope.end_user is None else [scope.end_user.pk],
        )
    return counts


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


def retention_prune_tenant(
    *,
    tenant: Tenant,
    now: dt.datetime | None = None,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    progress: Progress = _no_progress,
    actor: Actor = RETENTION_ACTOR,
) -> PruneReport:
    """Apply the tenant's retention policy once; audit it (one event) unless nothing went or
    it is a dry run. Idempotent: a second run right after finds nothing left."""
    now = now or timezone.now()
    report = PruneReport(tenant=tenant, dry_run=dry_run)
    try:
        _retention_apply(report=report, now=now, batch_size=batch_size, progress=progress)
    finally:
        # Also when interrupted (a time limit, a lost connection): what went is audited.
        if not dry_run and report.total:
            audit_event_record(
                tenant=tenant,
                actor=actor,
                action=AuditAction.PURGE,
                object_type="retention",
                counts=report.as_dict(),
                detail={"cutoffs": report.cutoffs, "now": now.isoformat()},
            )
        logger.info(
            "retention%s tenant=%s %s",
            " (dry run)" if dry_run else "",
            tenant.slug,
            report.as_dict() or "nothing expired",
        )
    return report


def _retention_apply(
    *, report: PruneReport, now: dt.datetime, batch_size: int, progress: Progress
) -> None:
    tenant, dry_run = report.tenant, report.dry_run
    for scope in _scopes_for_tenant(tenant=tenant, now=now):
        label = "sessions" if scope.agents is None else f"sessions[{next(iter(scope.agents))}]"
        report.cutoffs[label] = scope.cutoff.isoformat()
        report.counts.update(
            conversations_prune(
                scope=scope, dry_run=dry_run, batch_size=batch_size, progress=progress
            )
        )
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
        queryset=UserMemory.objects.for_tenant(tenant).filter(
            pinned=False, expires_at__isnull=False, expires_at__lte=now
        ),
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
        queryset=IdempotencyRecord.objects.for_tenant(tenant).filter(
            created_at__lt=idempotency_cutoff
        ),
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
        report.counts[_kind(queryset.model)] += count
        for relation in queryset.model._meta.related_objects:
            if relation.on_delete is CASCADE:
                related = relation.related_model._default_manager.filter(
                    **{f"{relation.field.name}__in": queryset.values("pk")}
                )
                report.counts[_kind(relation.related_model)] += related.count()
        progress(str(queryset.model._meta.verbose_name_plural), count)
        return
    _delete_in_batches(
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
    """Finished plans and task contexts unchanged for `task_retention_days` (the tenant's
    policy; empty keeps them).

    A plan is finished when its status is completed, failed or cancelled; it goes with its task
    contexts. A task context is finished when it waits for no sub-task, or when its plan is
    finished: a context still waiting for sub-tasks of a running plan (or of none) stays until
    its worker deletes it, or its plan or session goes.
    """
    days = _policy_days(policy, "task_retention_days", DEFAULT_TASK_RETENTION_DAYS)
    cutoff = None if days is None else now - dt.timedelta(days=days)
    report.cutoffs["plans"] = report.cutoffs["task_contexts"] = (
        None if cutoff is None else cutoff.isoformat()
    )
    if cutoff is None:
        return
    finished = list(FINISHED_PLAN_STATUSES)
    plans = Plan.objects.for_tenant(report.tenant).filter(
        status__in=finished, updated_at__lt=cutoff
    )
    tasks = TaskContext.objects.for_tenant(report.tenant).filter(
        ~Exists(SubTask.objects.filter(task=OuterRef("pk"))) | Q(plan__status__in=finished),
        updated_at__lt=cutoff,
    )
    if report.dry_run:
        # Counted here, not by _prune_simple: a plan's cascade is two levels deep (its task
        # contexts, their sub-tasks), and a context can go both ways; count each row once.
        going = TaskContext.objects.for_tenant(report.tenant).filter(
            Q(plan__in=plans.values("pk")) | Q(pk__in=tasks.values("pk"))
        )
        report.counts[_kind(Plan)] += plans.count()
        report.counts[_kind(TaskContext)] += going.count()
        report.counts[_kind(SubTask)] += SubTask.objects.filter(task__in=going.values("pk")).count()
        progress("plans and task contexts", report.counts[_kind(Plan)])
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
