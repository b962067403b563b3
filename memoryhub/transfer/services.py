"""Writes of the transfer package beside the import itself: the audit of an export."""

from __future__ import annotations

from memoryhub.accounts.models import Actor, AuditAction, EndUser, Tenant
from memoryhub.accounts.services import audit_event_record


def tenant_export_audit(
    *, tenant: Tenant, end_user: EndUser | None, actor: Actor, records: int
) -> None:
    """An export takes everything out: who did it is kept, like a purge."""
    audit_event_record(
        tenant=tenant,
        actor=actor,
        action=AuditAction.EXPORT,
        object_type="end_user" if end_user else "tenant",
        object_id=end_user.external_id if end_user else tenant.slug,
        counts={"records": records},
    )
