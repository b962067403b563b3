"""Reads of tenancy rows."""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from memoryhub.accounts.models import (
    API_KEY_DISPLAY_PREFIX,
    ApiKey,
    EndUser,
    IdempotencyRecord,
    MemoryPolicy,
    Tenant,
    end_user_id_is_storable,
)
from memoryhub.core.errors import ResourceNotFound

logger = logging.getLogger(__name__)


class ApiKeyInvalid(Exception):
    """The presented key is unknown, wrong, revoked or expired; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _key_prefix(presented: str) -> tuple[str, str]:
    raw = presented.removeprefix(API_KEY_DISPLAY_PREFIX)
    prefix, dot, _ = raw.partition(".")
    if not dot or not prefix:
        raise ApiKeyInvalid("Malformed API key.")
    return prefix, raw


def api_key_for_secret(*, presented: str) -> ApiKey:
    """Find and verify a presented key in one query (the tenant comes along for every request)."""
    prefix, raw = _key_prefix(presented)
    # prefix is unique: no ORDER BY needed (the model's default ordering would add one).
    found = list(ApiKey.objects.select_related("tenant").filter(prefix=prefix).order_by()[:1])
    api_key = found[0] if found else None
    # Hash comparison is constant-time (Sha512ApiKeyHasher.verify), whatever the outcome.
    if api_key is None or not api_key.is_valid(raw):
        raise ApiKeyInvalid("Invalid API key.")
    if api_key.revoked:
        raise ApiKeyInvalid("This API key has been revoked.")
    _refuse_if_expired(api_key)
    return api_key


def _refuse_if_expired(api_key: ApiKey) -> None:
    if api_key.expiry_date is not None and api_key.expiry_date <= timezone.now():
        raise ApiKeyInvalid("This API key has expired.")


# --- the verified-key cache ---------------------------------------------------------------------
# Every API request used to cost a join query (key + tenant) and a SHA-512 check before any work.
# A verified key is kept in Django's cache (Redis: shared by every process; local memory without
# it) for MEMORYHUB_AUTH_CACHE_SECONDS, under its prefix, with an HMAC of the presented key (never
# the key itself) that a later request must match. Whatever changes a key or its tenant deletes
# the entry at once (accounts.signals, services.api_key_cache_forget), in every process through
# the shared cache; the TTL only bounds what a bulk `update()` past the signals could leave.
# Only usable keys are cached: a revoked, wrong or unknown key always goes to the database.
AUTH_CACHE_FORMAT = 1
# What the library generates (get_random_string(8)): anything else is not worth a cache lookup
# (and a client's odd characters never reach a cache key).
_PREFIX_SHAPE = re.compile(r"[A-Za-z0-9]{1,32}")


def api_key_cache_key(*, prefix: str) -> str:
    return f"auth:api-key:{prefix}"


def _presented_digest(presented: str) -> str:
    # Keyed by SECRET_KEY: a copy of the cache cannot even check a guess offline.
    return salted_hmac("memoryhub.auth-cache", presented, algorithm="sha256").hexdigest()


def _auth_cache_seconds() -> int:
    seconds: int = settings.MEMORYHUB_AUTH_CACHE_SECONDS
    return seconds


def api_key_cache_key_for(*, presented: str) -> str | None:
    """The cache key a verified `presented` key would be kept under; None when the cache is
    off or the key is not worth a lookup (not of the library's shape)."""
    if _auth_cache_seconds() <= 0:
        return None
    try:
        prefix, _ = _key_prefix(presented)
    except ApiKeyInvalid:
        return None
    if not _PREFIX_SHAPE.fullmatch(prefix):
        return None
    return api_key_cache_key(prefix=prefix)


def api_key_cached(*, presented: str, read: Mapping[str, Any] | None = None) -> ApiKey | None:
    """The key `presented` is, from the cache and without a query (its tenant attached); None
    when it is not there (or the cache is off or unreachable): then ask api_key_for_secret.
    ApiKeyInvalid when the cached key has expired since (expiry is checked at every use).
    `read`: the cache's values the caller has read already (with others, in one round trip:
    the key's entry among them under api_key_cache_key_for if the cache holds it); read here
    otherwise."""
    seconds = _auth_cache_seconds()
    cache_key = api_key_cache_key_for(presented=presented)
    if cache_key is None:
        return None
    if read is not None:
        entry = read.get(cache_key)
    else:
        try:
            entry = cache.get(cache_key)
        except Exception:  # a cache outage costs the query, not the request
            logger.warning(
                "Auth cache unavailable; verifying the key in the database", exc_info=True
            )
            return None
    if not isinstance(entry, dict) or entry.get("format") != AUTH_CACHE_FORMAT:
        return None
    if not constant_time_compare(entry["digest"], _presented_digest(presented)):
        return None
    if time.time() - entry["cached_at"] >= seconds:
        return None
    key_fields, tenant_fields = entry["key"], entry["tenant"]
    api_key = ApiKey.from_db(DEFAULT_DB_ALIAS, list(key_fields), list(key_fields.values()))
    api_key.tenant = Tenant.from_db(
        DEFAULT_DB_ALIAS, list(tenant_fields), list(tenant_fields.values())
    )
    api_key.auth_cached_at = entry["cached_at"]  # type: ignore[attr-defined]
    if api_key.revoked:  # never stored so; a guard
        return None
    _refuse_if_expired(api_key)
    return api_key


def _field_values(obj: Any, *, leave_out: frozenset[str] = frozenset()) -> dict[str, Any]:
    return {
        field.attname: getattr(obj, field.attname)
        for field in type(obj)._meta.concrete_fields
        if field.attname not in leave_out
    }


def api_key_cache_store(*, api_key: ApiKey, presented: str) -> None:
    """Keep a key that has just been verified (by api_key_for_secret, or taken from the cache
    and marked used since) for the next requests. The entry keeps its first `cached_at`, so a
    rewrite never makes it live longer than the TTL."""
    seconds = _auth_cache_seconds()
    if seconds <= 0 or api_key.revoked or not _PREFIX_SHAPE.fullmatch(api_key.prefix):
        return
    now = time.time()
    cached_at: float = getattr(api_key, "auth_cached_at", now)
    remaining = seconds - (now - cached_at)
    if remaining <= 0:
        return
    entry = {
        "format": AUTH_CACHE_FORMAT,
        "digest": _presented_digest(presented),
        "cached_at": cached_at,
        # hashed_key stays out: nothing on a request's path reads it. (The primary key holds
        # the same hash, as the database does: a hash of a random secret authenticates no one.)
        "key": _field_values(api_key, leave_out=frozenset({"hashed_key"})),
        "tenant": _field_values(api_key.tenant),
    }
    try:
        cache.set(api_key_cache_key(prefix=api_key.prefix), entry, timeout=max(1, int(remaining)))
    except Exception:
        logger.warning("Auth cache unavailable; key not cached", exc_info=True)
    api_key.auth_cached_at = cached_at  # type: ignore[attr-defined]


def end_user_get_for_tenant(*, tenant: Tenant, external_id: str) -> EndUser:
    """The tenant's person with this id, or ResourceNotFound (also for another tenant's)."""
    if not end_user_id_is_storable(external_id):
        raise ResourceNotFound("No such user.")
    found = list(EndUser.objects.for_tenant(tenant).filter(external_id=external_id)[:1])
    if not found:
        raise ResourceNotFound("No such user.")
    return found[0]


# Policies are read on every append and context call but edited by staff now and then: each
# process keeps a tenant's rows for a few seconds (one query per tenant per TTL), and a save or
# delete in this process clears its copy at once (accounts.signals).
POLICY_CACHE_SECONDS = 5.0
_policy_cache: dict[int, tuple[float, dict[str, MemoryPolicy]]] = {}


def memory_policy_cache_clear() -> None:
    _policy_cache.clear()


def _tenant_policies(*, tenant_id: int) -> dict[str, MemoryPolicy]:
    now = time.monotonic()
    cached = _policy_cache.get(tenant_id)
    if cached is not None and now - cached[0] < POLICY_CACHE_SECONDS:
        return cached[1]
    rows = {policy.agent_id: policy for policy in MemoryPolicy.objects.filter(tenant_id=tenant_id)}
    _policy_cache[tenant_id] = (now, rows)
    return rows


def tenant_policies_cached(*, tenant_id: int) -> dict[str, MemoryPolicy]:
    """The tenant's policy rows by agent id ("" for the tenant's), from the short cache."""
    return _tenant_policies(tenant_id=tenant_id)


def memory_policy_for(
    *, tenant: Tenant | None = None, tenant_id: int | None = None, agent_id: str = ""
) -> MemoryPolicy:
    """The policy in force for an agent: its override, else the tenant's, else the defaults.

    The defaults come back as an unsaved MemoryPolicy (built now, so they follow the settings),
    so callers read one shape either way. Pass the tenant or, from a task, its id.
    """
    key = tenant.pk if tenant is not None else tenant_id
    if key is None:
        raise TypeError("memory_policy_for needs tenant or tenant_id")
    rows = _tenant_policies(tenant_id=key)
    return rows.get(agent_id) or rows.get("") or MemoryPolicy(tenant_id=key, agent_id=agent_id)


def memory_policy_for_every_agent(*, tenant: Tenant) -> MemoryPolicy | None:
    """The policy in force whatever the agent, when no agent of the tenant has a policy of its
    own (the usual case): an append can then decide its summary and extraction requests before
    it knows its session's agent. None when some agent has one."""
    rows = _tenant_policies(tenant_id=tenant.pk)
    if any(agent_id for agent_id in rows):
        return None
    return rows.get("") or MemoryPolicy(tenant_id=tenant.pk, agent_id="")


def memory_disabled_anywhere(*, tenant_id: int) -> bool:
    """Whether any of the tenant's policies turns memory off: when none does (the usual case),
    an append need not look up its session's agent before writing."""
    return any(
        not policy.memory_enabled for policy in _tenant_policies(tenant_id=tenant_id).values()
    )


def relevant_history_anywhere(*, tenant_id: int) -> bool:
    """Whether some agent of the tenant gets relevant history in its context (memory on, recall
    on, a history share): a context call may then embed its query before it has read its
    session, hence its agent."""
    rows = _tenant_policies(tenant_id=tenant_id)
    policies = list(rows.values())
    if "" not in rows:  # agents without a policy of their own follow the defaults
        policies.append(MemoryPolicy(tenant_id=tenant_id, agent_id=""))
    return any(
        policy.memory_enabled and policy.recall_enabled and policy.context_history_tokens > 0
        for policy in policies
    )


def idempotency_records_before(
    *, tenant: Tenant, cutoff: dt.datetime
) -> QuerySet[IdempotencyRecord]:
    """Stored idempotent responses older than `cutoff`: retries that late are not retries."""
    return IdempotencyRecord.objects.for_tenant(tenant).filter(created_at__lt=cutoff)
