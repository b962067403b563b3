"""Tells drf-spectacular how bots authenticate, so Swagger UI offers an "Authorize" button."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "memoryhub.accounts.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "mh_<prefix>.<secret>",
            "description": "An API key: `Authorization: Bearer mh_…` (or the `X-API-Key` header).",
        }
