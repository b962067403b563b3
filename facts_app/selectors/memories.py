"""Reads of explicit memories."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q, QuerySet
from django.utils import timezone

from facts_app.models import UserMemory, UserMemoryVersion
from memoryhub.accounts.models import EndUser, Tenant
from memoryhub.core.errors import ResourceNotFound


def memory_list(
    *, tenant: Tenant, end_user: EndUser | None, include_expired: bool = False
) -> QuerySet[UserMemory]:
    """A person's memories (or the tenant-wide ones, end_user=None), pinned first, then by key."""
    memories = UserMemory.objects.for_tenant(tenant).filter(end_user=end_user)
    if not include_expired:
        memories = memories.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
    return memories.select_related("end_user").order_by("-pinned", "key")


@dataclass(frozen=True)
class MemoryRow:
    key: str
    content: str
    pinned: bool


@dataclass(frozen=True)
class MemoryLists:
    tenant_wide: list[MemoryRow]
    personal: list[MemoryRow]
    # The keys past the limit, in the same order: the context reports them as left out.
    tenant_wide_cut: list[str] = field(default_factory=list)
    personal_cut: list[str] = field(default_factory=list)


# The first `limit` memories of each owner (tenant-wide: end_user_id NULL, and the person), in
# memory_list's order, in one statement: a row number per owner does the cut, so each list is
# still capped on its own. Past the cut only the key is sent (the context names every memory it
# leaves out); the window reads those rows anyway. Written as SQL, not the ORM: this runs before
# nearly every model call a bot makes, and building it through the ORM (a window, a filter on
# it) cost ~2 ms of Python per call against ~0.1 ms in the database.
# The rows of both owners, each with its place in its owner's list (the context's gather reads
# them inside a statement of its own too: memoryhub.context.selectors).
CONTEXT_RANKED_MEMORIES_SQL = """
SELECT "end_user_id", "key", "content", "pinned",
       ROW_NUMBER() OVER (PARTITION BY "end_user_id" ORDER BY "pinned" DESC, "key") AS "place"
FROM "facts_app_usermemory"
WHERE "tenant_id" = %s AND ("end_user_id" IS NULL OR "end_user_id" = %s)
  AND ("expires_at" IS NULL OR "expires_at" > %s)
"""
_CONTEXT_MEMORIES_SQL = f"""
SELECT "end_user_id", "key", CASE WHEN "place" <= %s THEN "content" END, "pinned", "place"
FROM ({CONTEXT_RANKED_MEMORIES_SQL}) AS "ranked"
ORDER BY "pinned" DESC, "key"
"""  # noqa: S608 (no value in it: parameters only)


def context_ranked_memories_params(
    *, connection: BaseDatabaseWrapper, tenant_id: int, end_user_id: int | None
) -> list[Any]:
    """CONTEXT_RANKED_MEMORIES_SQL's parameters: unexpired now. end_user_id None matches no
    person (end_user_id = NULL is never true): the tenant-wide list alone."""
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    return [tenant_id, end_user_id, now]


def memory_lists_for_context(*, tenant_id: int, end_user_id: int | None, limit: int) -> MemoryLists:
    """The first `limit` of `memory_list(end_user=None)` and of `memory_list(end_user=...)`
    (empty without a person), in the same order, unexpired only, and the keys of the rest:
    one query instead of two."""
    limit = max(limit, 0)
    connection = connections[router.db_for_read(UserMemory)]
    params = context_ranked_memories_params(
        connection=connection, tenant_id=tenant_id, end_user_id=end_user_id
    )
    with connection.cursor() as cursor:
        cursor.execute(_CONTEXT_MEMORIES_SQL, [limit, *params])
        rows = cursor.fetchall()
    return memory_lists_from_rows(rows, limit=limit)


def memory_lists_from_rows(rows: Iterable[Sequence[Any]], *, limit: int) -> MemoryLists:
    """Rows of (end_user_id, key, content, pinned, place), in memory_list's order, content
    NULL past `limit`, as memory_lists_for_context returns them."""
    lists = MemoryLists(tenant_wide=[], personal=[])
    for owner_id, key, content, pinned, place in rows:
        if place > limit:
            (lists.tenant_wide_cut if owner_id is None else lists.personal_cut).append(key)
            continue
        target = lists.tenant_wide if owner_id is None else lists.personal
        target.append(MemoryRow(key=key, content=content, pinned=bool(pinned)))
    return lists


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


def memories_expired(*, tenant: Tenant, now: dt.datetime) -> QuerySet[UserMemory]:
    """Memories past their `expires_at` and not pinned: what retention removes."""
    return UserMemory.objects.for_tenant(tenant).filter(
        pinned=False, expires_at__isnull=False, expires_at__lte=now
    )
