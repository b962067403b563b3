"""The dashboard's reads: counts, activity per day, top agents, the last cleanup runs."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from facts_app.models import Fact, UserMemory
from memoryhub.accounts.models import AuditEvent, EndUser, Tenant
from sessions_app.models import Message, Session


@dataclass(frozen=True)
class DashboardCounts:
    end_users: int
    sessions: int
    messages: int
    tokens: int
    facts: int
    memories: int


def dashboard_counts(*, tenant: Tenant) -> DashboardCounts:
    # Message and token totals come from the sessions' counters: no scan of the messages.
    totals = Session.objects.for_tenant(tenant).aggregate(
        sessions=Count("pk"), messages=Sum("message_count"), tokens=Sum("token_count")
    )
    return DashboardCounts(
        end_users=EndUser.objects.for_tenant(tenant).count(),
        sessions=totals["sessions"] or 0,
        messages=totals["messages"] or 0,
        tokens=totals["tokens"] or 0,
        facts=Fact.objects.for_tenant(tenant).filter(superseded_by=None).count(),
        memories=UserMemory.objects.for_tenant(tenant).count(),
    )


def activity_per_day(*, tenant: Tenant, days: int = 30) -> dict[str, list[Any]]:
    """Messages and new sessions per UTC day over the last `days` days, zeros included, as
    the chart wants them: {"days": [...], "messages": [...], "sessions": [...]}."""
    today = timezone.now().astimezone(dt.UTC).date()
    first = today - dt.timedelta(days=days - 1)
    since = dt.datetime.combine(first, dt.time.min, tzinfo=dt.UTC)

    def per_day(queryset: Any) -> dict[dt.date, int]:
        rows = (
            queryset.filter(created_at__gte=since)
            .annotate(day=TruncDate("created_at", tzinfo=dt.UTC))
            .values("day")
            .annotate(count=Count("pk"))
            .values_list("day", "count")
        )
        return dict(rows)

    messages = per_day(Message.objects.for_tenant(tenant))
    sessions = per_day(Session.objects.for_tenant(tenant))
    labels = [first + dt.timedelta(days=offset) for offset in range(days)]
    return {
        "days": [day.isoformat() for day in labels],
        "messages": [messages.get(day, 0) for day in labels],
        "sessions": [sessions.get(day, 0) for day in labels],
    }


def top_agents(*, tenant: Tenant, limit: int = 5) -> list[dict[str, Any]]:
    return list(
        Session.objects.for_tenant(tenant)
        .values("agent_id")
        .annotate(sessions=Count("pk"), messages=Sum("message_count"))
        .order_by("-messages", "agent_id")[:limit]
    )


def cleanup_runs_recent(*, tenant: Tenant, limit: int = 5) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(tenant=tenant, object_type="retention").order_by("-created_at")[
            :limit
        ]
    )
