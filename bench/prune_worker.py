"""Run retention once for one tenant, on a signal: for the benchmark's cleanup part.

    python bench/prune_worker.py TENANT_SLUG

It sets up Django (bench/parts/cleanup.py passes the environment: database, settings), prints
"ready", waits for a line on stdin, calls memoryhub.retention.prune.retention_prune_tenant for the
tenant (what the hourly beat task and `manage.py prune_memory --tenant SLUG` call), and prints one
JSON line: when it started and ended (time.monotonic(), which the bench's clients share), the
counts per kind, and the seconds each batch of messages took. A process of its own, like the
worker that runs retention in production, so it takes no GIL from the bench's clients.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(slug: str) -> int:
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection

    from memoryhub.accounts.models import Tenant
    from memoryhub.core.rls import rls_set_system
    from memoryhub.retention.prune import retention_prune_tenant

    tenant = Tenant.objects.get(slug=slug)
    connection.ensure_connection()
    # The system scope, as the hourly beat task runs retention (a system task: every tenant);
    # set before the signal, so the timed part pays only what the task pays.
    rls_set_system()
    print("ready", flush=True)
    if not sys.stdin.readline():
        return 1
    marks: list[tuple[float, str]] = []

    def progress(kind: str, rows: int) -> None:
        marks.append((time.monotonic(), str(kind)))

    started = time.monotonic()
    report = retention_prune_tenant(tenant=tenant, progress=progress)
    ended = time.monotonic()
    batches: list[float] = []
    previous = started
    for at, kind in marks:
        if kind == "messages":
            batches.append(at - previous)
        previous = at
    print(
        json.dumps(
            {
                "started": started,
                "ended": ended,
                "counts": report.as_dict(),
                "message_batches": batches,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: prune_worker.py TENANT_SLUG")
    sys.exit(main(sys.argv[1]))
