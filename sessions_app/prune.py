"""Retention's part in conversation memory: which sessions, messages and summaries a cutoff
expires, and their batched delete. The retention wing (memoryhub.retention) decides the cutoffs
from each tenant's policy, runs this and audits it; the purge by age runs it too."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Count, Exists, F, Model, OuterRef, Q, QuerySet, Sum, Value
from django.db.models.functions import Greatest

from memoryhub.accounts.idempotency import idempotency_responses_erase
from memoryhub.accounts.models import EndUser, Tenant
from memoryhub.accounts.services import delete_in_batches, end_user_recall_touch
from memoryhub.core.locks import rows_lock
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
    either some agents only or every agent but some (those with their own policy). Pinned
    sessions (imported history the importer chose to keep) are never in it, nor are their
    messages and summaries."""

    tenant: Tenant
    cutoff: dt.datetime
    end_user: EndUser | None = None
    agents: frozenset[str] | None = None
    other_agents_than: frozenset[str] = frozenset()

    def _narrow(self, queryset: QuerySet[Any], *, prefix: str) -> QuerySet[Any]:
        queryset = queryset.filter(**{f"{prefix}pinned": False})
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
            lambda ids: _messages_delete_prepare(tenant=scope.tenant, message_ids=ids),
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
            lock_first=_message_sessions_lock if queryset.model is Message else None,
        )
    if counts[kind(Message)]:
        # Search indexes hold these messages: tell them (a deleted session alone they notice).
        end_user_recall_touch(
            tenant=scope.tenant,
            end_user_ids=None if scope.end_user is None else [scope.end_user.pk],
        )
    return counts


def _message_sessions_lock(message_ids: list[int]) -> None:
    """Lock the sessions of messages about to go, before the messages: the order appends and
    session deletes lock in, and what keeps the sessions' counters still until the delete."""
    rows_lock(
        Session.objects.filter(
            pk__in=Message.objects.filter(pk__in=message_ids).values("session_id")
        )
    )


def _messages_delete_prepare(*, tenant: Tenant, message_ids: list[int]) -> None:
    _append_responses_erase(tenant=tenant, message_ids=message_ids)
    session_counters_subtract(message_ids=message_ids)


def session_counters_subtract(*, message_ids: list[int]) -> None:
    """Take messages about to be deleted off their sessions' counters, in the delete's
    transaction with the sessions and the messages locked: `message_count` and `token_count`
    stay exactly what the session stores (seed 004's `Len`), and `summarized_tokens` loses what
    the summary covered of them, so that token_count - summarized_tokens stays the
    unsummarized history a summary is due on. One UPDATE per session of the batch."""
    per_session = (
        Message.objects.filter(pk__in=message_ids)
        .order_by()  # no default ordering in the GROUP BY
        .values("session_id")
        .annotate(
            rows=Count("pk"),
            tokens=Sum("token_count"),
            summarized=Sum("token_count", filter=Q(seq__lte=F("session__summarized_seq"))),
        )
    )
    for row in per_session:
        Session.objects.filter(pk=row["session_id"]).update(
            message_count=Greatest(F("message_count") - row["rows"], Value(0)),
            token_count=Greatest(F("token_count") - (row["tokens"] or 0), Value(0)),
            summarized_tokens=Greatest(F("summarized_tokens") - (row["summarized"] or 0), Value(0)),
        )


def session_counters_recount(*, tenant: Tenant, batch_size: int = BATCH_SIZE) -> int:
    """Set every session's counters of the tenant to what it stores, counting its messages:
    the repair of counters that drifted before deletes kept them (retention and purges of old
    messages, until issue 15). Batches of sessions, each locked in its own transaction as an
    append would lock it; returns how many sessions had a counter corrected."""
    corrected = 0
    after: Any = None
    while True:
        sessions = Session.objects.for_tenant(tenant).order_by("pk")
        if after is not None:
            sessions = sessions.filter(pk__gt=after)
        ids = list(sessions.values_list("pk", flat=True)[:batch_size])
        if not ids:
            return corrected
        after = ids[-1]
        with transaction.atomic():
            rows_lock(Session.objects.filter(pk__in=ids))
            stored = {
                row["session_id"]: row
                for row in Message.objects.filter(session_id__in=ids)
                .order_by()
                .values("session_id")
                .annotate(
                    rows=Count("pk"),
                    tokens=Sum("token_count"),
                    summarized=Sum("token_count", filter=Q(seq__lte=F("session__summarized_seq"))),
                )
            }
            for session in Session.objects.filter(pk__in=ids).only(
                "message_count", "token_count", "summarized_tokens"
            ):
                row = stored.get(session.pk, {})
                true = (
                    row.get("rows") or 0,
                    row.get("tokens") or 0,
                    row.get("summarized") or 0,
                )
                if (session.message_count, session.token_count, session.summarized_tokens) != true:
                    Session.objects.filter(pk=session.pk).update(
                        message_count=true[0], token_count=true[1], summarized_tokens=true[2]
                    )
                    corrected += 1


@dataclass(frozen=True)
class TranscriptCapScope:
    """Seed 000's transcript cap for some sessions of a tenant: at most `cap` messages each,
    the oldest going first. Agents are narrowed as in ConversationScope."""

    tenant: Tenant
    cap: int
    agents: frozenset[str] | None = None
    other_agents_than: frozenset[str] = frozenset()

    def sessions_over_cap(self) -> QuerySet[Session]:
        # The counters are exact (session_counters_subtract), so they find the sessions over
        # the cap without counting anyone's messages.
        # A pinned session (imported history the user chose to keep) is exempt from every
        # retention rule, the cap included.
        sessions = Session.objects.for_tenant(self.tenant).filter(
            message_count__gt=self.cap, pinned=False
        )
        if self.agents is not None:
            sessions = sessions.filter(agent_id__in=self.agents)
        if self.other_agents_than:
            sessions = sessions.exclude(agent_id__in=self.other_agents_than)
        return sessions

    def evicted_messages(self, *, session_id: Any) -> QuerySet[Message]:
        """The session's messages past the cap: all up to the (cap+1)-th newest."""
        newest_evicted = (
            Message.objects.filter(session_id=session_id)
            .order_by("-seq")
            .values_list("seq", flat=True)[self.cap : self.cap + 1]
        )
        return Message.objects.for_tenant(self.tenant).filter(
            session_id=session_id, seq__lte=newest_evicted
        )


def transcripts_cap(
    *,
    scope: TranscriptCapScope,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    progress: Progress = _no_progress,
) -> Counter[str]:
    """Evict each session's oldest messages past the cap (FIFO), in the batches retention
    deletes in, keeping the counters exact and blanking stored responses that quote them."""
    counts: Counter[str] = Counter()
    touched: set[int] = set()
    over = list(scope.sessions_over_cap().order_by("pk").values_list("pk", "end_user_id"))
    for session_id, end_user_id in over:
        going = scope.evicted_messages(session_id=session_id)
        if dry_run:
            counts[kind(Message)] += going.count()
            continue
        before = counts[kind(Message)]
        delete_in_batches(
            queryset=going,
            order_by=("seq",),
            batch_size=batch_size,
            counts=counts,
            progress=progress,
            before_delete=lambda ids: _messages_delete_prepare(
                tenant=scope.tenant, message_ids=ids
            ),
            lock_first=_message_sessions_lock,
        )
        if counts[kind(Message)] > before and end_user_id is not None:
            touched.add(end_user_id)
    if touched:
        end_user_recall_touch(tenant=scope.tenant, end_user_ids=touched)
    if dry_run:
        progress("dry run", counts[kind(Message)])
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
