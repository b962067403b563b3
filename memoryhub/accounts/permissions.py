"""Scope checks for API keys: reads need `read`, writes need `write`, unless a view says more."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, permissions
from rest_framework.request import Request

from memoryhub.accounts.binding import PersonCredential
from memoryhub.accounts.models import ApiKey, ApiKeyScope

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class InsufficientScope(exceptions.PermissionDenied):
    default_code = "insufficient_scope"


class HasApiKeyScope(permissions.BasePermission):
    """Reads need `read`, writes need `write`; a view may ask for more with
    `required_scopes = {"POST": ["purge"]}`."""

    def has_permission(self, request: Request, view: Any) -> bool:
        api_key = request.auth
        if not isinstance(api_key, ApiKey | PersonCredential):
            raise exceptions.NotAuthenticated("An API key is required.")
        needed = self.scopes_for(request=request, view=view)
        missing = [scope for scope in needed if not api_key.has_scope(scope)]
        if missing:
            raise InsufficientScope(f"This API key lacks the scope(s): {', '.join(missing)}.")
        return True

    @staticmethod
    def scopes_for(*, request: Request, view: Any) -> list[str]:
        declared: dict[str, list[str]] = getattr(view, "required_scopes", {})
        if request.method in declared:
            return declared[request.method]
        return [ApiKeyScope.READ if request.method in SAFE_METHODS else ApiKeyScope.WRITE]
