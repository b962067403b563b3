from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from sessions_app.models import Message, Session, StateEntry, Summary


class MessageInline(admin.TabularInline):
    model = Message
    extra = 0
    fields = ("seq", "role", "name", "content", "tool_call_id", "token_count", "created_at")
    readonly_fields = fields
    ordering = ("-seq",)
    show_change_link = True
    can_delete = False
    max_num = 0


class StateEntryInline(admin.TabularInline):
    model = StateEntry
    extra = 0
    fields = ("key", "value", "position", "updated_at")
    readonly_fields = ("position", "updated_at")
    ordering = ("position",)


class SummaryInline(admin.TabularInline):
    model = Summary
    extra = 0
    fields = ("through_seq", "model", "token_count", "text", "created_at")
    readonly_fields = fields
    ordering = ("-through_seq",)
    show_change_link = True
    can_delete = False
    max_num = 0


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "tenant",
        "end_user",
        "agent_id",
        "external_key",
        "message_count",
        "token_count",
        "last_active_at",
    )
    list_filter = ("tenant", "agent_id")
    search_fields = ("=id", "external_key", "end_user__external_id", "agent_id")
    list_select_related = ("tenant", "end_user")
    readonly_fields = (
        "id",
        "tenant",
        "created_at",
        "updated_at",
        "last_active_at",
        "message_count",
        "token_count",
        "last_seq",
        "state_clock",
        "summarized_tokens",
        "summary_requested_at",
    )
    raw_id_fields = ("end_user",)
    date_hierarchy = "last_active_at"
    inlines = [StateEntryInline, SummaryInline, MessageInline]


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ("session", "seq", "role", "name", "token_count", "created_at", "tenant")
    list_filter = ("role", "tenant")
    search_fields = ("content", "=session__id")
    list_select_related = ("session", "tenant")
    raw_id_fields = ("session",)
    readonly_fields = ("tenant", "session", "seq", "token_count", "created_at")
    date_hierarchy = "created_at"


@admin.register(StateEntry)
class StateEntryAdmin(admin.ModelAdmin):
    list_display = ("session", "key", "position", "updated_at", "tenant")
    list_filter = ("tenant",)
    search_fields = ("key", "=session__id")
    list_select_related = ("session", "tenant")
    raw_id_fields = ("session",)
    readonly_fields = ("tenant", "position", "updated_at")


@admin.register(Summary)
class SummaryAdmin(admin.ModelAdmin):
    list_display = ("session", "through_seq", "model", "token_count", "created_at", "tenant")
    list_filter = ("model", "tenant")
    search_fields = ("text", "=session__id")
    list_select_related = ("session", "tenant")
    raw_id_fields = ("session",)
    # Written by the summarization task (or PUT through the API); staff read them.
    readonly_fields = ("tenant", "session", "through_seq", "token_count", "model", "created_at")
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # derived from a session's messages, or PUT through the API
