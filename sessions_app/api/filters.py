from __future__ import annotations

import django_filters  # type: ignore[import-untyped]  # ships no type hints

from memoryhub.core.filters import UtcIsoDateTimeFilter
from sessions_app.models import Session


class SessionFilter(django_filters.FilterSet):
    user_id = django_filters.CharFilter(
        field_name="end_user__external_id", help_text="The bot's id of the person."
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
