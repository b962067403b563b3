from __future__ import annotations

import contextlib
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from rest_framework_api_key.admin import APIKeyModelAdmin
from rest_framework_api_key.models import AbstractAPIKey
from rest_framework_api_key.models import APIKey as LibraryAPIKey

from memoryhub.accounts.forms import (
    POLICY_FIELDS,
    TENANT_ONLY_FIELDS,
    keep_when_empty,
    kept_values,
)
from memoryhub.accounts.models import (
    DEFAULT_API_KEY_SCOPES,
    Actor,
    ApiKey,
    ApiKeyScope,
    AuditEvent,
    EndUser,
    IdempotencyRecord,
    Membership,
    MemoryPolicy,
    Tenant,
    User,
)
from memoryhub.accounts.pages import actor_for_request
from memoryhub.accounts.services import api_key_issue, api_key_revoke, end_user_erase
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.locks import DELETE_RERUN_SQLSTATES, run_rerunning


class AuditedDeleteAdmin(admin.ModelAdmin):
    """Deletes go through the audited service the API uses (DESIGN.md §2), one audit event
    per object, whether from an object's delete page or the "delete selected" action.

    Subclasses name the service in `delete_audited`."""

    def delete_audited(self, *, obj: Any, actor: Actor) -> None:
        raise NotImplementedError

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with contextlib.suppress(ResourceNotFound):  # deleted by someone else meanwhile
            self.delete_audited(obj=obj, actor=actor_for_request(request))

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> Any:
        # Django runs the delete in a transaction of its own: only from out here can a delete
        # that PostgreSQL rolled back (a deadlock with a writer) run again, whole.
        view = super().delete_view
        return run_rerunning(
            lambda: view(request, object_id, extra_context), sqlstates=DELETE_RERUN_SQLSTATES
        )

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        # Stored idempotent responses are derived rows with a read-only admin: they go with
        # their person (the erasure must take them), so their missing delete permission must
        # not block the delete.
        deleted, model_count, perms_needed, protected = super().get_deleted_objects(objs, request)
        derived = {str(IdempotencyRecord._meta.verbose_name)}
        return deleted, model_count, perms_needed - derived, protected

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        actor = actor_for_request(request)

        def delete_all() -> None:
            # All or nothing, as Django's own bulk delete is.
            with transaction.atomic():
                for obj in queryset.all():
                    with contextlib.suppress(ResourceNotFound):  # gone meanwhile
                        self.delete_audited(obj=obj, actor=actor)

        run_rerunning(delete_all, sqlstates=DELETE_RERUN_SQLSTATES)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    list_display = ("username", "email", "is_staff", "is_superuser", "last_login")


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "tenant__slug")
    autocomplete_fields = ["user", "tenant"]


@admin.register(EndUser)
class EndUserAdmin(AuditedDeleteAdmin):
    list_display = ("external_id", "tenant", "display_name", "created_at")
    list_filter = ("tenant",)
    search_fields = ("external_id", "display_name")
    list_select_related = ("tenant",)

    def delete_audited(self, *, obj: EndUser, actor: Actor) -> None:
        end_user_erase(end_user=obj, actor=actor)


@admin.action(description="Revoke selected API keys")
def revoke_keys(modeladmin: Any, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
    count = 0
    actor = actor_for_request(request)
    for api_key in queryset.filter(revoked=False).select_related("tenant"):
        api_key_revoke(api_key=api_key, actor=actor)
        count += 1
    modeladmin.message_user(request, f"Revoked {count} key(s).", messages.SUCCESS)


# The library's own concrete APIKey model is unused (ours adds tenant and scopes); one list of
# "API keys" in the admin is enough.
admin.site.unregister(LibraryAPIKey)


class ApiKeyForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=ApiKeyScope.choices,
        initial=DEFAULT_API_KEY_SCOPES,
        widget=forms.CheckboxSelectMultiple,
    )

    class Meta:
        model = ApiKey
        fields = ["tenant", "name", "scopes", "expiry_date", "revoked"]


@admin.register(ApiKey)
class ApiKeyAdmin(APIKeyModelAdmin):
    form = ApiKeyForm
    list_display = (*APIKeyModelAdmin.list_display, "tenant", "scopes", "last_used_at")  # type: ignore[assignment]
    list_filter = (*APIKeyModelAdmin.list_filter, "tenant")  # type: ignore[assignment]
    search_fields = (*APIKeyModelAdmin.search_fields, "tenant__slug")  # type: ignore[assignment]
    actions = [revoke_keys]

    def save_model(
        self, request: HttpRequest, obj: AbstractAPIKey, form: Any = None, change: bool = False
    ) -> None:
        assert isinstance(obj, ApiKey)
        if change:
            obj.save()
            return
        secret = api_key_issue(api_key=obj, created_by=request.user)  # type: ignore[arg-type]
        messages.warning(
            request,
            f"The API key for {obj.name} is: {secret} — store it now: it will not be shown again.",
        )


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "tenant",
        "actor_type",
        "actor",
        "action",
        "object_type",
        "object_id",
    )
    list_filter = ("action", "actor_type", "tenant")
    search_fields = ("actor", "object_id", "object_type")
    date_hierarchy = "created_at"


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "tenant", "scope", "key", "response_status")
    list_filter = ("scope", "tenant")
    search_fields = ("key",)


class MemoryPolicyAdminForm(forms.ModelForm):
    class Meta:
        model = MemoryPolicy
        fields = ["tenant", "agent_id", *POLICY_FIELDS, *TENANT_ONLY_FIELDS]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        keep_when_empty(self)

    def clean(self) -> dict[str, Any]:
        return kept_values(self, super().clean() or {})


@admin.register(MemoryPolicy)
class MemoryPolicyAdmin(admin.ModelAdmin):
    form = MemoryPolicyAdminForm
    list_display = (
        "tenant",
        "agent_id",
        "memory_enabled",
        "extraction_enabled",
        "summary_threshold_tokens",
        "retention_days",
        "transcript_max_messages",
        "context_max_tokens",
        "updated_at",
    )
    list_filter = ("tenant", "memory_enabled", "extraction_enabled")
    search_fields = ("tenant__slug", "agent_id")
    fieldsets = (
        (None, {"fields": ("tenant", "agent_id", "memory_enabled")}),
        (
            "Summaries and extraction",
            {
                "fields": (
                    "enable_summarization",
                    "summary_threshold_tokens",
                    "summary_keep_recent",
                    "extraction_enabled",
                    "enable_user_memories",
                )
            },
        ),
        ("Working state and transcript", {"fields": ("state_cap", "transcript_max_messages")}),
        (
            "Context defaults",
            {
                "fields": (
                    "context_max_tokens",
                    "context_max_messages",
                    "context_max_memories",
                    "include_summary_on_truncation",
                    "recall_enabled",
                    "context_history_tokens",
                )
            },
        ),
        (
            "Retention",
            {"fields": ("retention_days", "daily_note_retention_days", "task_retention_days")},
        ),
    )
