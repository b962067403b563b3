from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from memoryhub.transfer.models import ImportedRecord, PendingUpload


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


@admin.register(PendingUpload)
class PendingUploadAdmin(admin.ModelAdmin):
    """Read-only: the import page's uploads waiting for their confirmation (a day at most).
    Their chunks (the file's bytes) are not registered: staff have no need to read them. No
    delete either: its confirmation page would load every chunk to list it; they expire."""

    list_display = ("created_at", "tenant", "source", "name", "size", "created_by")
    list_filter = ("source", "tenant")
    search_fields = ("name",)
    exclude = ("token",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
