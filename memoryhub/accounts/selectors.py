"""Reads of tenancy rows."""

from __future__ import annotations

from django.utils import timezone

from memoryhub.accounts.models import (
    API_KEY_DISPLAY_PREFIX,
    ApiKey,
    EndUser,
    MemoryPolicy,
    Tenant,
    end_user_id_is_storable,
)
from memoryhub.core.exceptions import ResourceNotFound


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


def memory_policy_for(*, tenant: Tenant, agent_id: str = "") -> MemoryPolicy:
    """The policy in force for an agent: its override, else the tenant's, else the defaults.

    The defaults come back as an unsaved MemoryPolicy, so callers read one shape either way.
    """
    candidates = {
        policy.agent_id: policy
        for policy in MemoryPolicy.objects.filter(tenant=tenant, agent_id__in={"", agent_id})
    }
    return candidates.get(agent_id) or candidates.get("") or MemoryPolicy(tenant=tenant)
