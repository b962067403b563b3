"""A named lock across processes and machines, for jobs that must not run twice at once.

PostgreSQL: a session-level advisory lock, held by this connection; if the process dies, the
connection closes and the lock goes with it, so a crashed run never blocks the next. (It needs
a real session: behind a transaction-pooling proxy such as PgBouncer in transaction mode, point
the workers at PostgreSQL directly. Advisory locks are re-entrant within one connection, so the
lock keeps apart processes, not two calls on one connection.) SQLite, which only ever serves one
machine: an flock on a file beside the Celery data, released by the kernel when the process dies.
"""

from __future__ import annotations

import fcntl
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection


@contextmanager
def exclusive_run(name: str) -> Iterator[bool]:
    """Yield True while holding the lock `name`, or False at once if someone else holds it."""
    if connection.vendor == "postgresql":
        key = zlib.crc32(name.encode())
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            acquired = bool(cursor.fetchone()[0])
        try:
            yield acquired
        finally:
            if acquired:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
        return
    folder = Path(settings.CELERY_DATA_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.lock").open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
