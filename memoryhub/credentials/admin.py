"""Person tokens in the admin: read-only (a token is minted through the API or the person's
page, where it is shown once), with an audited revoke. The signing keys are not shown: their
salts are half of each tenant's secret."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from memoryhub.accounts.pages import actor_for_request
from memoryhub.credentials.models import PersonToken
from memoryhub.credentials.services import person_token_revoke


@admin.register(PersonToken)
class PersonTokenAdmin(admin.ModelAdmin):
    list_display = ("jti", "tenant", "end_user", "scopes", "expires_at", "revoked_at")
    list_filter = ("tenant", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("jti", "end_user__external_id")
    list_select_related = ("tenant", "end_user")
    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: PersonToken | None = None) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens (audited)")
    def revoke(self, request: HttpRequest, queryset: QuerySet[PersonToken]) -> None:
        tokens = list(queryset.select_related("tenant", "end_user"))
        for token in tokens:
            person_token_revoke(token=token, actor=actor_for_request(request))
        self.message_user(request, f"Revoked {len(tokens)} token(s).", messages.SUCCESS)
