from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from memoryhub.transfer.models import ImportedRecord


@admin.register(ImportedRecord)
class ImportedRecordAdmin(admin.ModelAdmin):
    """Read-only: what each imported record became (written by the import alone). Deleting a
    row lets the same source record be imported again."""

    list_display = ("created_at", "tenant", "source", "kind", "object_id")
    list_filter = ("source", "kind", "tenant")
    search_fields = ("object_id",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
