from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from memoryhub.jobs.models import JobRun


@admin.register(JobRun)
class JobRunAdmin(admin.ModelAdmin):
    """Read-only: the rows are written by the worker (memoryhub.jobs.signals) alone."""

    list_display = ("session", "kind", "state", "attempt", "started_at", "finished_at", "tenant")
    list_filter = ("kind", "state", "tenant")
    search_fields = ("tenant__slug", "task_id", "error")
    list_select_related = ("tenant",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
