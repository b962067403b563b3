from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from memoryhub.llm.models import LlmUsage


@admin.register(LlmUsage)
class LlmUsageAdmin(admin.ModelAdmin):
    """Read-only: the counters are written by llm_usage_record alone. Delete stays allowed
    so that deleting a tenant in the admin can cascade to its rows."""

    list_display = (
        "day",
        "tenant",
        "model",
        "purpose",
        "calls",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
    )
    list_filter = ("purpose", "day", "model", "tenant")
    search_fields = ("tenant__slug", "model")
    list_select_related = ("tenant",)
    date_hierarchy = "day"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
