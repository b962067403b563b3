"""Writes to explicit memories: save by key (keeping the old text as a version) and delete."""

from __future__ import annotations

import datetime as dt
import uuid

from django.db import IntegrityError, transaction

from facts_app.embedding import vectors_request
from facts_app.models import UserMemory, UserMemoryVector, UserMemoryVersion
from memoryhub.accounts.models import Actor, EndUser, Tenant
from memoryhub.accounts.provenance import source_session_check
from memoryhub.accounts.redaction import redact_for_write
from memoryhub.accounts.services import audited_delete, end_user_hold


def memory_save(
    *,
    tenant: Tenant,
    end_user: EndUser | None,
    key: str,
    content: str,
    pinned: bool | None = None,
    expires_at: dt.datetime | None = None,
    clear_expires_at: bool = False,
    source_session_id: uuid.UUID | None = None,
) -> tuple[UserMemory, bool]:
    """Create or update the memory under `key`; returns it and whether it was created.

    A changed text moves the old one into UserMemoryVersion first: nothing is silently lost.
    The text is masked or refused as the tenant's redaction policy says (accounts.redaction).
    """
    source_session_check(tenant=tenant, session_id=source_session_id)
    content = redact_for_write(
        tenant_id=tenant.pk,
        values={"content": content},
        object_type="memory",
        object_id=f"{end_user.external_id if end_user else ''}/{key}",
    )["content"]
    for attempt in range(2):
        try:
            with transaction.atomic():
                if end_user is not None:
                    end_user_hold(end_user_id=end_user.pk)  # before the memory's row: 404 if erased
                memory = (
                    UserMemory.objects.for_tenant(tenant)
                    .select_for_update()
                    .filter(end_user=end_user, key=key)
                    .first()
                )
                if memory is None:
                    memory = UserMemory.objects.create(
                        tenant=tenant,
                        end_user=end_user,
                        key=key,
                        content=content,
                        pinned=bool(pinned),
                        expires_at=expires_at,
                        source_session_id=source_session_id,
                    )
                    vectors_request(kind="memory", tenant_id=tenant.pk, ids=[memory.pk])
                    return memory, True
                if memory.content != content:
                    UserMemoryVersion.objects.create(
                        tenant=tenant,
                        memory=memory,
                        version=memory.version,
                        content=memory.content,
                        source_session_id=memory.source_session_id,
                        created_at=memory.updated_at,
                    )
                    memory.content = content
                    memory.version += 1
                    memory.source_session_id = source_session_id
                    # The old text's vector goes with it; the new one is embedded after commit.
                    UserMemoryVector.objects.filter(memory_id=memory.pk).delete()
                    vectors_request(kind="memory", tenant_id=tenant.pk, ids=[memory.pk])
                if pinned is not None:
                    memory.pinned = pinned
                if expires_at is not None or clear_expires_at:
                    memory.expires_at = expires_at
                memory.save()
                return memory, False
        except IntegrityError:
            # Two first saves of one key raced; the loser retries as an update.
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


def memory_delete(*, memory: UserMemory, actor: Actor) -> None:
    """Delete a memory and its earlier versions (audited)."""
    owner = memory.end_user.external_id if memory.end_user else "*"
    audited_delete(
        obj=memory,
        tenant=memory.tenant,
        actor=actor,
        object_type="user_memory",
        object_id=f"{owner}:{memory.key}",
    )
