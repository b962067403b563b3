"""Retention's part in conversation memory: which sessions, messages and summaries a cutoff
expires, and their batched delete. The retention wing (memoryhub.retention) decides the cutoffs
from each tenant's policy, runs this and audits it; the purge by age runs it too."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, F, Model, OuterRef, Q, QuerySet

from memoryhub.accounts.idempotency import idempotency_responses_erase
from memoryhub.accounts.models import EndUser, Tenant
from memoryhub.accounts.services import delete_in_batches, end_user_recall_touch
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
from sessions_app.services import MESSAGE_APPEND_SCOPE, sessions_delete_prepare

BATCH_SIZE = 1000

Progress = Callable[[str, int], None]  # (kind, rows just deleted or counted)


def _no_progress(kind: str, rows: int) -> None:
    return None


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


def kind(model: type[Model]) -> str:
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
        counts[kind(Message)] = (
            Message.objects.for_tenant(scope.tenant)
            .filter(Q(pk__in=scope.expired_messages().values("pk")) | in_expired)
            .count()
        )
        counts[kind(Session)] = sessions.count()
        counts[kind(StateEntry)] = StateEntry.objects.filter(in_expired).count()
        counts[kind(Summary)] = (
            Summary.objects.for_tenant(scope.tenant)
            .filter(Q(pk__in=scope.replaced_summaries().values("pk")) | in_expired)
            .count()
        )
        # A session's plans and task contexts (and theirs sub-tasks) go with it.
        plans = Plan.objects.filter(in_expired)
        tasks = TaskContext.objects.filter(in_expired | Q(plan__in=plans.values("pk")))
        counts[kind(Plan)] = plans.count()
        counts[kind(TaskContext)] = tasks.count()
        counts[kind(SubTask)] = SubTask.objects.filter(task__in=tasks.values("pk")).count()
        progress("dry run", sum(counts.values()))
        return counts
    # Messages first, oldest first along (tenant, created_at): an expired session's messages
    # are all older than its last activity, so its own delete below is small. What goes takes
    # the stored responses that quote it along (blanked: accounts.idempotency).
    for queryset, order_by, before_delete in (
        (
            scope.expired_messages(),
            ("created_at", "pk"),
            lambda ids: _append_responses_erase(tenant=scope.tenant, message_ids=ids),
        ),
        (scope.replaced_summaries(), ("created_at", "pk"), None),
        (
            sessions,
            ("last_active_at", "pk"),
            lambda ids: sessions_delete_prepare(tenant=scope.tenant, session_ids=ids),
        ),
    ):
        delete_in_batches(
            queryset=queryset,
            order_by=order_by,
            batch_size=batch_size,
            counts=counts,
            progress=progress,
            before_delete=before_delete,
        )
    if counts[kind(Message)]:
        # Search indexes hold these messages: tell them (a deleted session alone they notice).
        end_user_recall_touch(
            tenant=scope.tenant,
            end_user_ids=None if scope.end_user is None else [scope.end_user.pk],
        )
    return counts


def _append_responses_erase(*, tenant: Tenant, message_ids: list[int]) -> None:
    """Blank the stored responses of the appends that stored these messages (about to go).

    A response quotes its message as `id`, or a batch's as `messages`, whose first is its
    oldest (times never decrease along seqs): a batch that lost any message to a cutoff lost
    that one. Only a backfill (an old `created_at`) meets a cutoff while its response is kept.
    """
    sessions = set(Message.objects.filter(pk__in=message_ids).values_list("session_id", flat=True))
    quoting = Q(response_body__id__in=message_ids) | Q(
        response_body__messages__0__id__in=message_ids
    )
    idempotency_responses_erase(
        tenant=tenant, session_ids=sessions, where=Q(scope=MESSAGE_APPEND_SCOPE) & quoting
    )


def finished_work(
    *, tenant: Tenant, cutoff: dt.datetime
) -> tuple[QuerySet[Plan], QuerySet[TaskContext]]:
    """Finished plans and task contexts unchanged since `cutoff`.

    A plan is finished when its status is completed, failed or cancelled; it goes with its task
    contexts. A task context is finished when it waits for no sub-task, or when its plan is
    finished: a context still waiting for sub-tasks of a running plan (or of none) stays until
    its worker deletes it, or its plan or session goes.
    """
    finished = list(FINISHED_PLAN_STATUSES)
    plans = Plan.objects.for_tenant(tenant).filter(status__in=finished, updated_at__lt=cutoff)
    tasks = TaskContext.objects.for_tenant(tenant).filter(
        ~Exists(SubTask.objects.filter(task=OuterRef("pk"))) | Q(plan__status__in=finished),
        updated_at__lt=cutoff,
    )
    return plans, tasks


def finished_work_count(
    *, tenant: Tenant, plans: QuerySet[Plan], tasks: QuerySet[TaskContext]
) -> Counter[str]:
    """What deleting `finished_work` would remove, each row once: a plan's cascade is two levels
    deep (its task contexts, their sub-tasks), and a context can go both ways."""
    going = TaskContext.objects.for_tenant(tenant).filter(
        Q(plan__in=plans.values("pk")) | Q(pk__in=tasks.values("pk"))
    )
    return Counter(
        {
            kind(Plan): plans.count(),
            kind(TaskContext): going.count(),
            kind(SubTask): SubTask.objects.filter(task__in=going.values("pk")).count(),
        }
    )
