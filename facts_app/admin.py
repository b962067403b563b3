from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from facts_app.models import Fact, Note, UserMemory, UserMemoryVersion
from facts_app.services.facts import fact_delete
from facts_app.services.memories import memory_delete
from memoryhub.accounts.admin import AuditedDeleteAdmin
from memoryhub.accounts.models import Actor
from memoryhub.accounts.services import audited_delete


class UserMemoryVersionInline(admin.TabularInline):
    model = UserMemoryVersion
    extra = 0
    fields = ("version", "content", "created_at", "source_session_id")
    readonly_fields = fields
    can_delete = False
    max_num = 0


@admin.register(UserMemory)
class UserMemoryAdmin(AuditedDeleteAdmin):
    list_display = ("key", "end_user", "tenant", "pinned", "expires_at", "version", "updated_at")
    list_filter = ("pinned", "tenant")
    search_fields = ("key", "content", "end_user__external_id")
    list_select_related = ("tenant", "end_user")
    raw_id_fields = ("end_user",)
    readonly_fields = ("version", "created_at", "updated_at")
    inlines = [UserMemoryVersionInline]

    def delete_audited(self, *, obj: UserMemory, actor: Actor) -> None:
        memory_delete(memory=obj, actor=actor)


@admin.register(UserMemoryVersion)
class UserMemoryVersionAdmin(admin.ModelAdmin):
    list_display = ("memory", "version", "created_at", "tenant")
    list_filter = ("tenant",)
    search_fields = ("content", "memory__key")
    list_select_related = ("memory", "tenant")
    raw_id_fields = ("memory",)


@admin.register(Fact)
class FactAdmin(AuditedDeleteAdmin):
    list_display = ("content", "end_user", "tenant", "created_at", "valid_until", "superseded_by")
    list_filter = ("tenant", ("superseded_by", admin.EmptyFieldListFilter))
    search_fields = ("content", "end_user__external_id")
    list_select_related = ("tenant", "end_user")
    raw_id_fields = ("end_user", "superseded_by")
    readonly_fields = ("content_hash", "search_text", "created_at", "updated_at")
    date_hierarchy = "created_at"

    def delete_audited(self, *, obj: Fact, actor: Actor) -> None:
        fact_delete(fact=obj, actor=actor)


@admin.register(Note)
class NoteAdmin(AuditedDeleteAdmin):
    """Notes are append-only: staff read them here; changes go through new versions."""

    list_display = ("end_user", "kind", "day", "version", "created_at", "tenant")
    list_filter = ("kind", "tenant")
    search_fields = ("content", "end_user__external_id")
    list_select_related = ("tenant", "end_user")
    raw_id_fields = ("end_user",)
    date_hierarchy = "created_at"

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def delete_audited(self, *, obj: Note, actor: Actor) -> None:
        # The API never deletes one note version (only retention prunes whole days), so
        # there is no note service to call: the audited delete itself is the service.
        audited_delete(
            obj=obj,
            tenant=obj.tenant,
            actor=actor,
            object_type="note",
            object_id=str(obj.pk),
        )
