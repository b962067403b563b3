"""Reads of explicit memories."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.utils import timezone

from facts_app.models import UserMemory, UserMemoryVersion
from memoryhub.accounts.models import EndUser, Tenant
from memoryhub.core.exceptions import ResourceNotFound


def memory_list(
    *, tenant: Tenant, end_user: EndUser | None, include_expired: bool = False
) -> QuerySet[UserMemory]:
    """A person's memories (or the tenant-wide ones, end_user=None), pinned first, then by key."""
    memories = UserMemory.objects.for_tenant(tenant).filter(end_user=end_user)
    if not include_expired:
        memories = memories.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
    return memories.select_related("end_user").order_by("-pinned", "key")


def memory_get(*, tenant: Tenant, end_user: EndUser | None, key: str) -> UserMemory:
    found = list(
        UserMemory.objects.for_tenant(tenant)
        .filter(end_user=end_user, key=key)
        .select_related("end_user")[:1]
    )
    if not found:
        raise ResourceNotFound("No memory under this key.")
    return found[0]


def memory_versions(*, memory: UserMemory) -> QuerySet[UserMemoryVersion]:
    """Earlier texts, newest first (the current text is the memory itself)."""
    return UserMemoryVersion.objects.filter(tenant_id=memory.tenant_id, memory=memory).order_by(
        "-version"
    )
