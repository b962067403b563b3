"""A named lock across processes and machines, for jobs that must not run twice at once.

PostgreSQL: a session-level advisory lock, held by this connection; if the process dies, the
connection closes and the lock goes with it, so a crashed run never blocks the next. (It needs
a real session: behind a transaction-pooling proxy such as PgBouncer in transaction mode, point
the workers at PostgreSQL directly. Advisory locks are re-entrant within one connection, so the
lock keeps apart processes, not two calls on one connection.) SQLite, which only ever serves one
machine: an flock on a file beside the Celery data, released by the kernel when the process dies.

Also the row locks that keep writers and deleters of the same rows in step (one order for all:
a person's row, then their sessions', then what lies under those), and the rerun of a
transaction that PostgreSQL rolled back for a deadlock or a serialization failure.
"""

from __future__ import annotations

import fcntl
import logging
import random
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, connection, connections, transaction
from django.db.models import QuerySet

logger = logging.getLogger(__name__)

T = TypeVar("T")


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


# --- row locks ----------------------------------------------------------------------------------


def rows_hold(queryset: QuerySet[Any]) -> list[Any]:
    """Lock the rows `queryset` selects until the transaction ends, against being deleted (or
    their keys changed), and return their primary keys: none when they are gone.

    `FOR KEY SHARE OF` the queryset's own table on PostgreSQL — the lock a foreign-key check
    takes — so it waits only for a delete (an erasure's `FOR UPDATE`), never for another writer,
    and a deleter waits for it. A writer takes it on the rows it is about to write under, before
    writing: its foreign keys are checked only at commit (they are deferred), which is too late
    to keep a concurrent delete from either failing or being failed. On SQLite the IMMEDIATE
    transaction already holds the whole database, and this is a plain read.
    """
    database = connections[queryset.db]
    if not database.in_atomic_block:
        raise transaction.TransactionManagementError("rows_hold() needs a transaction.")
    keys = queryset.order_by("pk").values_list("pk", flat=True)
    if database.vendor != "postgresql":
        return list(keys)
    sql, params = keys.query.sql_with_params()
    table = database.ops.quote_name(queryset.model._meta.db_table)
    with database.cursor() as cursor:
        cursor.execute(f"{sql} FOR KEY SHARE OF {table}", params)
        return [row[0] for row in cursor.fetchall()]


def rows_lock(queryset: QuerySet[Any]) -> list[Any]:
    """Lock the rows `queryset` selects for a delete (`FOR UPDATE`, in primary-key order, so
    two deleters of overlapping rows queue instead of deadlocking) and return their keys."""
    return list(
        queryset.select_for_update(of=("self",)).order_by("pk").values_list("pk", flat=True)
    )


# --- reruns -------------------------------------------------------------------------------------

# PostgreSQL's "deadlock detected" (40P01) and "could not serialize access" (40001): it rolled
# the whole transaction back, and the same transaction run again may well succeed.
RERUN_SQLSTATES = frozenset({"40P01", "40001"})
# A transaction that deletes may also meet a foreign-key violation at commit (23503): a row was
# written under a parent it deleted, by a path that did not hold the parent first. Run again,
# its collector finds that row and deletes it too.
DELETE_RERUN_SQLSTATES = RERUN_SQLSTATES | {"23503"}
RERUN_ATTEMPTS = 5
RERUN_FIRST_DELAY_SECONDS = 0.02


def sqlstate_of(error: BaseException) -> str | None:
    """The SQLSTATE of a database error Django wrapped (psycopg 3, or psycopg2's pgcode)."""
    cause = error.__cause__
    return getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)


def run_rerunning(
    work: Callable[[], T],
    *,
    sqlstates: frozenset[str] = RERUN_SQLSTATES,
    attempts: int = RERUN_ATTEMPTS,
) -> T:
    """Run `work`, which opens its own transaction, and run it again (up to `attempts` times in
    all, after a short jittered pause that doubles) when PostgreSQL rolled it back with one of
    `sqlstates`: a deadlock or a serialization failure, by default.

    Inside an outer transaction it runs once: the rollback took the outer transaction too, so
    only whoever opened that one can run it again.
    """
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except DatabaseError as error:
            if (
                attempt == attempts
                or connection.in_atomic_block
                or sqlstate_of(error) not in sqlstates
            ):
                raise
            logger.info("running a transaction again after %s (attempt %d)", error, attempt)
        time.sleep(RERUN_FIRST_DELAY_SECONDS * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")
