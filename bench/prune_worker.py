"""Run retention for one tenant, on a signal: for the benchmark's cleanup part.

    python bench/prune_worker.py TENANT_SLUG

It sets up Django (bench/parts/cleanup.py passes the environment: database, settings), prints
"ready", and for each line on stdin calls memoryhub.retention.prune.retention_prune_tenant for the
tenant (what the hourly beat task and `manage.py prune_memory --tenant SLUG` call) and prints one
JSON line: when it started and ended (time.monotonic(), which the bench's clients share), the
counts per kind, the seconds each batch of messages took, the CPU seconds of this process and of
its PostgreSQL backend (when the server runs on this machine), and how often retention looked
for busy clients between batches and paused for them. A process of its own, like the worker
that runs retention in production, so it takes no GIL from the bench's clients. It exits at the
end of its stdin.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def process_cpu_seconds(pid: int) -> float | None:
    """A process's CPU seconds so far (user + system), from /proc: a PostgreSQL backend's, when
    the server runs on this machine; None otherwise."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def main(slug: str) -> int:
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection

    from memoryhub.accounts.models import Tenant
    from memoryhub.core.rls import rls_set_system
    from memoryhub.retention.prune import YieldToClients, retention_pacer, retention_prune_tenant

    tenant = Tenant.objects.get(slug=slug)
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = int(cursor.fetchone()[0])
    # The system scope, as the hourly beat task runs retention (a system task: every tenant);
    # set before the signal, so the timed part pays only what the task pays.
    rls_set_system()
    print("ready", flush=True)
    for _ in sys.stdin:
        marks: list[tuple[float, str]] = []

        def progress(kind: str, rows: int, marks: list[tuple[float, str]] = marks) -> None:
            marks.append((time.monotonic(), str(kind)))

        pacer = retention_pacer()  # what retention_prune_tenant takes without one
        yielder = pacer.sleep if isinstance(pacer.sleep, YieldToClients) else None

        def pause(
            seconds: float, inner: Any = pacer.sleep, marks: list[tuple[float, str]] = marks
        ) -> None:
            # A batch's time starts after the pause before it (if any).
            inner(seconds)
            marks.append((time.monotonic(), "pause"))

        pacer.sleep = pause
        backend_cpu = process_cpu_seconds(backend)
        cpu = time.process_time()
        started = time.monotonic()
        report = retention_prune_tenant(tenant=tenant, progress=progress, pacer=pacer)
        ended = time.monotonic()
        cpu = time.process_time() - cpu
        backend_after = process_cpu_seconds(backend)
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
                    "cpu_seconds": cpu,
                    "backend_cpu_seconds": (
                        None
                        if backend_cpu is None or backend_after is None
                        else backend_after - backend_cpu
                    ),
                    "yield_checks": yielder.checks if yielder else 0,
                    "yield_pauses": yielder.pauses if yielder else 0,
                    "paused_seconds": yielder.paused_seconds if yielder else 0.0,
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: prune_worker.py TENANT_SLUG")
    sys.exit(main(sys.argv[1]))
