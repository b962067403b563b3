"""One person's memory as one JSON document (`GET /users/{id}/export/`).

The records are MemoryHub's export records (memoryhub.transfer.export), the same ones
`manage.py export_memory --user` writes as lines, under the header's fields:
{"format": "memoryhub.export", "schema_version": 1, ..., "records": [...]}. `manage.py
import_memory person.json --tenant X` reads the document back.
"""

from __future__ import annotations

from typing import Any

from memoryhub.accounts.models import EndUser
from memoryhub.transfer.export import export_records


def user_export_document(*, end_user: EndUser) -> dict[str, Any]:
    records = export_records(tenant=end_user.tenant, end_user=end_user)
    header = next(records)
    return {
        **{key: value for key, value in header.items() if key != "type"},
        "records": list(records),
    }
