"""Run as a separate process by test_concurrency: appends messages through the service layer.

Usage: python -m tests.sessions_app.append_worker <tenant_id> <session_id> <count> <label>
Prints the seqs it was given as JSON.
"""

from __future__ import annotations

import json
import sys
import uuid


def main() -> None:
    import django

    django.setup()
    from memoryhub.accounts.models import Tenant
    from memoryhub.core.rls import rls_scope
    from sessions_app.services import MessageInput, message_append_batch

    tenant_id, session_id, count, label = sys.argv[1:5]
    tenant = Tenant.objects.get(pk=int(tenant_id))
    seqs = []
    # A new process's connection sees nothing until scoped (row-level security, core.rls).
    with rls_scope(tenant_id=tenant.pk):
        for i in range(int(count)):
            created = message_append_batch(
                tenant=tenant,
                session_id=uuid.UUID(session_id),
                messages=[MessageInput(role="user", content=f"{label}-{i}")],
            )
            seqs.append(created[0].seq)
    print(json.dumps(seqs))


if __name__ == "__main__":
    main()
