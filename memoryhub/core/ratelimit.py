"""Counters in Django's cache for the API's limits: requests per key, failed keys per address.

Fixed windows (a counter per key and window, started with `add` and bumped with `incr`), not
DRF's list of timestamps: `incr` is atomic in Redis, so N web processes sharing one cache count
exactly, and a counter is one integer however high the limit. The price is that a client can
spend a window's allowance at its very end and the next one's at the start (at most twice the
rate for a moment).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from rest_framework.throttling import BaseThrottle

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WindowCount:
    count: int
    retry_after: int  # seconds until this window closes (at least 1)


def window_key(*, key: str, window_seconds: int) -> tuple[str, int]:
    """The cache key of `key`'s current window, and the seconds until the window closes
    (window_hit counts there; a caller may read the count with other values: cache_read_many)."""
    now = time.time()
    start = int(now // window_seconds) * window_seconds
    retry_after = max(1, math.ceil(start + window_seconds - now))
    return f"memoryhub:{key}:{start}", retry_after


def cache_read_many(keys: list[str]) -> dict[str, Any]:
    """The values of `keys` that are in the cache, read in one round trip (Redis: one MGET);
    {} when the cache is out: each reader then does as on a miss (a count is 0, fail open)."""
    if not keys:
        return {}
    try:
        found: dict[str, Any] = cache.get_many(keys)
    except Exception:  # as above: a cache outage must not take the API down with it
        logger.warning("Cache unavailable; reading %s as missing", keys, exc_info=True)
        return {}
    return found


def window_hit(*, key: str, window_seconds: int) -> WindowCount:
    """Count one event in the current window of `key` and return the window's count."""
    cache_key, retry_after = window_key(key=key, window_seconds=window_seconds)
    try:
        # The counter outlives its window by a little so an incr never meets an expired key.
        cache.add(cache_key, 0, timeout=window_seconds + 5)
        try:
            count = cache.incr(cache_key)
        except ValueError:  # evicted between add and incr (a full local-memory cache)
            cache.set(cache_key, 1, timeout=window_seconds + 5)
            count = 1
    except Exception:  # a cache outage must not take the API down with it
        logger.warning("Rate-limit cache unavailable; not counting %s", key, exc_info=True)
        return WindowCount(count=0, retry_after=retry_after)
    return WindowCount(count=int(count), retry_after=retry_after)


def client_address(request: Any) -> str | None:
    """The client's IP address: REMOTE_ADDR, or, behind `NUM_PROXIES` trusted proxies, the
    address the outermost of them saw (X-Forwarded-For counted from the right, so a client
    cannot choose it). DRF's own rule, so the API's limits and the login lockout (django-axes
    stores it in an IP address column) name a client alike. None when there is none (a request
    built in a test); REMOTE_ADDR when the header's entry is not an address."""
    remote_addr: str | None = request.META.get("REMOTE_ADDR") or None
    try:
        return str(ipaddress.ip_address((BaseThrottle().get_ident(request) or "").strip()))
    except ValueError:
        return remote_addr
