"""The export of one person's data, audited. (Their erasure is
memoryhub.accounts.services.end_user_erase: the purge API and the admin erase people too.)"""

from __future__ import annotations

from collections import Counter
from typing import Any

from memoryhub.accounts.models import Actor, AuditAction, EndUser
from memoryhub.accounts.services import audit_event_record
from memoryhub.people.export import user_export_document


def end_user_export(*, end_user: EndUser, actor: Actor) -> dict[str, Any]:
    document = user_export_document(end_user=end_user)
    audit_event_record(
        tenant=end_user.tenant,
        actor=actor,
        action=AuditAction.EXPORT,
        object_type="end_user",
        object_id=end_user.external_id,
        counts=dict(Counter(record["type"] for record in document["records"])),
    )
    return document
