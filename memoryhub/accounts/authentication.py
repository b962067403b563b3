"""The one place a request becomes a tenant's: `Authorization: Bearer mh_…` (or `X-API-Key`),
or a person's: `Authorization: Bearer <a person-bound token>` (memoryhub.credentials)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from memoryhub.accounts.binding import PersonCredential
from memoryhub.accounts.models import ApiKey, Tenant
from memoryhub.accounts.selectors import (
    ApiKeyInvalid,
    api_key_cache_key_for,
    api_key_cache_store,
    api_key_cached,
    api_key_for_secret,
)
from memoryhub.accounts.services import api_key_mark_used
from memoryhub.core.errors import TooManyFailedAuthentications
from memoryhub.core.ratelimit import cache_read_many, client_address, window_hit, window_key
from memoryhub.core.rls import rls_for_tenant, rls_system_scope

# A person-bound token's verifier (the credentials app registers it when it loads; the kernel
# knows no token format): the presented token in, its credential out, ApiKeyInvalid if bad.
TokenVerifier = Callable[[str], PersonCredential]
_token_verifiers: list[TokenVerifier] = []


def token_verifier_register(verifier: TokenVerifier) -> None:
    if verifier not in _token_verifiers:
        _token_verifiers.append(verifier)


def _looks_like_token(presented: str) -> bool:
    # A JWT is three base64url parts, its header a JSON object (`eyJ`); our keys start `mh_`.
    return presented.startswith("eyJ") and presented.count(".") == 2


def _is_token(presented: str) -> bool:
    return _looks_like_token(presented) and bool(_token_verifiers)


def credential_for(
    presented: str, *, read: Mapping[str, Any] | None = None
) -> ApiKey | PersonCredential:
    """The key or person-bound token `presented` is, or ApiKeyInvalid. `read`: the cache's
    values the caller has read already (cache_read_many), the key's cached verification among
    them (under api_key_cache_key_for) if the cache holds it."""
    if _is_token(presented):
        # Row-level security: the tenant is what the lookup finds out, so it looks across
        # tenants.
        with rls_system_scope():
            return _token_verifiers[0](presented)
    # A key verified a moment ago: no query, and no system scope to enter and leave.
    cached = api_key_cached(presented=presented, read=read)
    if cached is not None:
        return cached
    with rls_system_scope():
        return api_key_for_secret(presented=presented)


@dataclass(frozen=True)
class PersonPrincipal:
    """What `request.user` is for a person-bound token."""

    credential: PersonCredential

    is_authenticated = True
    is_anonymous = False
    is_staff = False

    @property
    def tenant(self) -> Tenant:
        return self.credential.tenant

    def __str__(self) -> str:
        return self.credential.prefix


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

    def authenticate(
        self, request: Request
    ) -> tuple[ApiKeyPrincipal, ApiKey] | tuple[PersonPrincipal, PersonCredential] | None:
        presented = self._presented_key(request)
        if presented is None:
            return None
        # Wrong keys are counted per client address; past the limit, that address is refused
        # before its key is even looked up, whatever the key, until the window closes (a right
        # key from there would otherwise tell a guesser it had found one).
        limit: int = settings.MEMORYHUB_FAILED_AUTH_LIMIT
        window_seconds: int = settings.MEMORYHUB_FAILED_AUTH_WINDOW_SECONDS
        failures_key = f"auth-failures:{client_address(request) or 'unknown'}"
        # The failures' count and the key's cached verification in one cache round trip.
        failures_window = (
            window_key(key=failures_key, window_seconds=window_seconds) if limit else None
        )
        wanted: list[str] = []
        if failures_window is not None:
            wanted.append(failures_window[0])
        key_cache_key = None if _is_token(presented) else api_key_cache_key_for(presented=presented)
        if key_cache_key is not None:
            wanted.append(key_cache_key)
        read = cache_read_many(wanted)
        if failures_window is not None:
            failures_cache_key, retry_after = failures_window
            if int(read.get(failures_cache_key, 0)) >= limit:
                raise TooManyFailedAuthentications(wait=retry_after)
        try:
            credential = credential_for(presented, read=read)
        except ApiKeyInvalid as error:
            if limit:
                window_hit(key=failures_key, window_seconds=window_seconds)
            raise exceptions.AuthenticationFailed(error.reason) from None
        if isinstance(credential, PersonCredential):
            # The tenant, bound to the person: what every query of this request narrows by
            # (and what a row-level-security setting would be taken from).
            request.tenant = credential.tenant  # type: ignore[attr-defined]
            rls_for_tenant(credential.tenant)
            return PersonPrincipal(credential), credential
        api_key = credential
        rls_for_tenant(api_key.tenant)
        from_database = not hasattr(api_key, "auth_cached_at")
        last_used_at = api_key.last_used_at
        api_key_mark_used(
            api_key=api_key, resolution_seconds=settings.API_KEY_LAST_USED_RESOLUTION_SECONDS
        )
        if from_database or api_key.last_used_at != last_used_at:
            # Cached with the use just recorded, or the next requests would record it again.
            api_key_cache_store(api_key=api_key, presented=presented)
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
