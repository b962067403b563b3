from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from memoryhub.accounts.admin import AuditedDeleteAdmin
from memoryhub.accounts.models import Actor
from memoryhub.core.errors import Conflict
from sessions_app import services, task_services
from sessions_app.models import (
    Message,
    Plan,
    PlanStatus,
    Session,
    StateEntry,
    SubTask,
    Summary,
    TaskContext,
)


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


class TaskContextInline(admin.TabularInline):
    model = TaskContext
    extra = 0
    fields = ("task_id", "event_type", "response_event", "updated_at")
    readonly_fields = fields
    show_change_link = True
    can_delete = False
    max_num = 0


class PlanInline(admin.TabularInline):
    model = Plan
    extra = 0
    fields = ("plan_id", "status", "goal_event", "updated_at")
    readonly_fields = fields
    show_change_link = True
    can_delete = False
    max_num = 0


@admin.register(Session)
class SessionAdmin(AuditedDeleteAdmin):
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
    # Pinned: imported history exempt from retention (memoryhub.transfer.retention).
    list_filter = ("tenant", "agent_id", "pinned")
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
    inlines = [StateEntryInline, SummaryInline, PlanInline, TaskContextInline, MessageInline]

    def delete_audited(self, *, obj: Session, actor: Actor) -> None:
        services.session_delete(session=obj, actor=actor)


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


# --- plans and task contexts --------------------------------------------------------------------
# Read-only here: every write goes through task_services, which bumps the version (the ETag), so
# a worker holding an older ETag is told its copy is stale. Staff may cancel plans and delete.


class _ReadOnlyWorkAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # created by workers and planners through the API

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SubTaskInline(admin.TabularInline):
    model = SubTask
    extra = 0
    fields = ("subtask_id", "created_at")
    readonly_fields = fields
    can_delete = False
    max_num = 0


@admin.register(Plan)
class PlanAdmin(_ReadOnlyWorkAdmin):
    list_display = (
        "plan_id",
        "status",
        "end_user",
        "goal_event",
        "session",
        "updated_at",
        "tenant",
    )
    list_filter = ("status", "tenant")
    search_fields = ("=plan_id", "goal_event", "end_user__external_id", "=session__id")
    list_select_related = ("tenant", "end_user")
    date_hierarchy = "updated_at"
    inlines = [TaskContextInline]
    actions = ["cancel_plans"]

    @admin.action(description="Cancel the selected running plans")
    def cancel_plans(self, request: HttpRequest, queryset: QuerySet[Plan]) -> None:
        cancelled = 0
        for plan in queryset.filter(status=PlanStatus.RUNNING).select_related("tenant"):
            try:
                task_services.plan_patch(
                    tenant=plan.tenant,
                    plan_id=plan.plan_id,
                    if_match=None,
                    status=PlanStatus.CANCELLED,
                )
            except Conflict:
                continue  # it finished meanwhile
            cancelled += 1
        self.message_user(request, f"Cancelled {cancelled} plan(s).", messages.SUCCESS)


class WaitingFilter(admin.SimpleListFilter):
    title = "waiting for sub-tasks"
    parameter_name = "waiting"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes (open)"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(sub_tasks__isnull=False).distinct()
        if self.value() == "no":
            return queryset.filter(sub_tasks__isnull=True)
        return queryset


@admin.register(TaskContext)
class TaskContextAdmin(_ReadOnlyWorkAdmin):
    list_display = (
        "task_id",
        "event_type",
        "plan",
        "session",
        "open_sub_tasks",
        "updated_at",
        "tenant",
    )
    list_filter = (WaitingFilter, "tenant")
    search_fields = ("=task_id", "event_type", "=plan__plan_id", "=sub_tasks__subtask_id")
    list_select_related = ("tenant", "plan")
    date_hierarchy = "updated_at"
    inlines = [SubTaskInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskContext]:
        return super().get_queryset(request).annotate(open_sub_task_count=Count("sub_tasks"))

    @admin.display(description="open sub-tasks", ordering="open_sub_task_count")
    def open_sub_tasks(self, task: Any) -> int:
        return int(task.open_sub_task_count)


@admin.register(SubTask)
class SubTaskAdmin(_ReadOnlyWorkAdmin):
    list_display = ("subtask_id", "task", "created_at", "tenant")
    list_filter = ("tenant",)
    search_fields = ("=subtask_id", "=task__task_id")
    list_select_related = ("tenant", "task")
