"""Reads of tenancy rows."""

from __future__ import annotations

import datetime as dt
import time

from django.db.models import QuerySet
from django.utils import timezone

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


class ApiKeyInvalid(Exception):
    """The presented key is unknown, wrong, revoked or expired; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def api_key_for_secret(*, presented: str) -> ApiKey:
    """Find and verify a presented key in one query (the tenant comes along for every request)."""
    raw = presented.removeprefix(API_KEY_DISPLAY_PREFIX)
    prefix, dot, _ = raw.partition(".")
    if not dot or not prefix:
        raise ApiKeyInvalid("Malformed API key.")
    # prefix is unique: no ORDER BY needed (the model's default ordering would add one).
    found = list(ApiKey.objects.select_related("tenant").filter(prefix=prefix).order_by()[:1])
    api_key = found[0] if found else None
    # Hash comparison is constant-time (Sha512ApiKeyHasher.verify), whatever the outcome.
    if api_key is None or not api_key.is_valid(raw):
        raise ApiKeyInvalid("Invalid API key.")
    if api_key.revoked:
        raise ApiKeyInvalid("This API key has been revoked.")
    if api_key.expiry_date is not None and api_key.expiry_date <= timezone.now():
        raise ApiKeyInvalid("This API key has expired.")
    return api_key


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


def memory_disabled_anywhere(*, tenant_id: int) -> bool:
    """Whether any of the tenant's policies turns memory off: when none does (the usual case),
    an append need not look up its session's agent before writing."""
    return any(
        not policy.memory_enabled for policy in _tenant_policies(tenant_id=tenant_id).values()
    )


def idempotency_records_before(
    *, tenant: Tenant, cutoff: dt.datetime
) -> QuerySet[IdempotencyRecord]:
    """Stored idempotent responses older than `cutoff`: retries that late are not retries."""
    return IdempotencyRecord.objects.for_tenant(tenant).filter(created_at__lt=cutoff)
