"""Response headers Django's SecurityMiddleware does not send."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase


class PermissionsPolicyMiddleware:
    """`Permissions-Policy: settings.PERMISSIONS_POLICY`: turns off browser features (camera,
    microphone, geolocation…) for every page, so injected content could not ask for them."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if settings.PERMISSIONS_POLICY:
            response.headers.setdefault("Permissions-Policy", settings.PERMISSIONS_POLICY)
        return response
