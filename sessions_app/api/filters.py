from __future__ import annotations

import django_filters  # type: ignore[import-untyped]  # ships no type hints
from django.db.models import F, QuerySet

from memoryhub.core.filters import UtcIsoDateTimeFilter
from sessions_app.models import Session


class SessionFilter(django_filters.FilterSet):
    user_id = django_filters.CharFilter(
        method="filter_user_id", help_text="The bot's id of the person."
    )
    agent_id = django_filters.CharFilter(field_name="agent_id")
    active_since = UtcIsoDateTimeFilter(
        field_name="last_active_at", lookup_expr="gte", help_text="Active at or after (ISO 8601)."
    )
    active_before = UtcIsoDateTimeFilter(
        field_name="last_active_at", lookup_expr="lt", help_text="Active before (ISO 8601)."
    )

    class Meta:
        model = Session
        fields = ["user_id", "agent_id", "active_since", "active_before"]

    def filter_user_id(
        self, queryset: QuerySet[Session], name: str, value: str
    ) -> QuerySet[Session]:
        # The person's tenant is the sessions' tenant: naming it lets the database use the
        # (tenant, external_id) index instead of scanning every tenant's end users.
        return queryset.filter(end_user__tenant_id=F("tenant_id"), end_user__external_id=value)
