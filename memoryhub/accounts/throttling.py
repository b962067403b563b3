"""The per-key request rate of the API (MEMORYHUB_RATE_LIMIT_PER_KEY), counted in the cache.

A key past its rate gets 429 `rate_limited` with `Retry-After` (memoryhub.core.errors). The
counters live in Django's cache: Redis when REDIS_URL is set, so every web process counts
against the same number; local memory otherwise, where each process counts alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from memoryhub.accounts.binding import PersonCredential
from memoryhub.accounts.models import ApiKey
from memoryhub.core.ratelimit import window_hit

if TYPE_CHECKING:  # rest_framework.views imports this module while it defines APIView
    from rest_framework.views import APIView


class ApiKeyRateThrottle(SimpleRateThrottle):
    """DRF's rate syntax (`600/min`) and 429 answer, over the cache's atomic fixed-window
    counters (memoryhub.core.ratelimit) instead of DRF's per-request timestamp lists."""

    scope = "api_key"

    def __init__(self) -> None:
        # DRF's own __init__ does just this, into attributes its type stubs do not declare.
        self.rate = self.get_rate()
        self._limit, self._window_seconds = self.parse_rate(self.rate)
        self._retry_after: int | None = None

    def get_rate(self) -> str | None:
        # Read per request (DRF builds a throttle per request), so settings overrides apply.
        rate: str | None = settings.MEMORYHUB_RATE_LIMIT_PER_KEY
        return rate

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        api_key = request.auth
        if not isinstance(api_key, ApiKey | PersonCredential):
            return None  # no key, no per-key limit (the schema and docs are open)
        return f"rate:{self.scope}:{api_key.prefix}"

    def allow_request(self, request: Request, view: APIView) -> bool:
        if self._limit is None or self._window_seconds is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        window = window_hit(key=key, window_seconds=self._window_seconds)
        self._retry_after = window.retry_after
        return window.count <= self._limit

    def wait(self) -> float | None:
        return self._retry_after
