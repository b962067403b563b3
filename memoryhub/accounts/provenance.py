"""Where a memory or a fact came from: the session it names must be the caller's tenant's.

Facts and memories (facts_app) may cite a session (sessions_app), but facts_app stands below
sessions_app and cannot look one up; sessions_app registers the lookup here when it loads, as
NetBox's apps register into its search.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from memoryhub.accounts.models import Tenant
from memoryhub.core.errors import InvalidInput

SessionLookup = Callable[[Tenant, uuid.UUID], bool]

_lookups: list[SessionLookup] = []


def session_lookup_register(lookup: SessionLookup) -> None:
    if lookup not in _lookups:
        _lookups.append(lookup)


def source_session_check(*, tenant: Tenant, session_id: uuid.UUID | None) -> None:
    """InvalidInput unless `session_id` is None or a session of `tenant` (another tenant's id
    reads as no such session: provenance never links across tenants)."""
    if session_id is None:
        return
    if not _lookups:
        raise RuntimeError("No session lookup is registered (is sessions_app installed?).")
    if not any(lookup(tenant, session_id) for lookup in _lookups):
        raise InvalidInput(
            field="source_session_id",
            message="No such session in this tenant.",
            code="not_found",
        )
