"""The one place a request becomes a tenant's: `Authorization: Bearer mh_…` (or `X-API-Key`)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from memoryhub.accounts.models import ApiKey, Tenant
from memoryhub.accounts.selectors import ApiKeyInvalid, api_key_for_secret
from memoryhub.accounts.services import api_key_mark_used
from memoryhub.core.errors import TooManyFailedAuthentications
from memoryhub.core.ratelimit import client_address, window_count, window_hit


@dataclass(frozen=True)
class ApiKeyPrincipal:
    """What `request.user` is for a bot: not a Django user, just the key's identity."""

    api_key: ApiKey

    is_authenticated = True
    is_anonymous = False
    is_staff = False

    @property
    def tenant(self) -> Tenant:
        return self.api_key.tenant

    def __str__(self) -> str:
        return f"api_key:{self.api_key.prefix}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[ApiKeyPrincipal, ApiKey] | None:
        presented = self._presented_key(request)
        if presented is None:
            return None
        # Wrong keys are counted per client address; past the limit, that address is refused
        # before its key is even looked up, whatever the key, until the window closes (a right
        # key from there would otherwise tell a guesser it had found one).
        limit: int = settings.MEMORYHUB_FAILED_AUTH_LIMIT
        window_seconds: int = settings.MEMORYHUB_FAILED_AUTH_WINDOW_SECONDS
        failures_key = f"auth-failures:{client_address(request) or 'unknown'}"
        if limit:
            failures = window_count(key=failures_key, window_seconds=window_seconds)
            if failures.count >= limit:
                raise TooManyFailedAuthentications(wait=failures.retry_after)
        try:
            api_key = api_key_for_secret(presented=presented)
        except ApiKeyInvalid as error:
            if limit:
                window_hit(key=failures_key, window_seconds=window_seconds)
            raise exceptions.AuthenticationFailed(error.reason) from None
        api_key_mark_used(
            api_key=api_key, resolution_seconds=settings.API_KEY_LAST_USED_RESOLUTION_SECONDS
        )
        request.tenant = api_key.tenant  # type: ignore[attr-defined]
        return ApiKeyPrincipal(api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="memoryhub"'

    def _presented_key(self, request: Request) -> str | None:
        header = authentication.get_authorization_header(request).decode("latin-1").strip()
        if header:
            keyword, _, value = header.partition(" ")
            if keyword.lower() != self.keyword.lower() or not value.strip():
                raise exceptions.AuthenticationFailed(
                    "Use the header `Authorization: Bearer <api key>`."
                )
            return value.strip()
        api_key_header = request.META.get("HTTP_X_API_KEY", "").strip()
        return api_key_header or None
