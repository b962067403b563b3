"""Prepared statements for the few statements whose one plan fits every value.

Django sends every statement with its values inlined (psycopg's client-side binding, and no
prepared statements: Django turns psycopg's off so that connection poolers work), so PostgreSQL
parses, rewrites (row-level security's policies included) and plans each one anew. For the
append's statements — the session's counters bumped by primary key, the message inserted, one
statement on PostgreSQL (sessions_app.services._claim_and_insert) — that was most of
PostgreSQL's CPU per append: 1.6-1.9 ms against 1.0 ms prepared, in-process on a 2-core machine
(bench/README.md, "Seventh round").

Inside `statements_prepared()`, the statements Django sends on the connection go through
psycopg's server-side binding with `prepare=True`: PostgreSQL parses and plans each one once per
connection and runs it by name after (psycopg keeps the names, at most `prepared_max` of them,
per connection). Only for statements whose plan does not depend on the values: a generic plan
is what PostgreSQL settles on for a prepared statement, and under row-level security a generic
plan can be far worse than a custom one for a read (bench/README.md, "Caveats": a read of the
last messages sorting the whole session, when its LIMIT was a parameter; the context's read
writes its limits into the statement). An update or a read by primary key and an insert have
one plan.

Each connection runs them with their generic plan from the first execution (`plan_cache_mode =
force_generic_plan`, set once per server connection by `generic_plans_baseline`). PostgreSQL's
own choice (`auto`) plans a statement for its values again as long as the generic plan's
estimate is higher than the custom plans': for the context's read (a session's last messages,
through an index whose rows per session it can only guess without the value) that was every
time, so only the parse was saved (1.60 -> 1.48 ms, against 0.86 ms generic, at 100,000
messages).

`DATABASE_PREPARED_STATEMENTS=false` turns this off, for a PgBouncer in transaction mode older
than 1.21 (it cannot carry a prepared statement from one transaction to the next server
connection); SQLite has nothing to prepare.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections


class _LoggedQuery:
    """What Django's query log reads of the statement a cursor ran (`cursor._query.query`, in
    DatabaseOperations.last_executed_query): psycopg keeps nothing there for a prepared one, so
    the log (DEBUG's, the tests' captured queries) would show None. Composed with the values,
    as Django's own cursors log it, and only when something reads it."""

    def __init__(self, cursor: Any, sql: Any, params: Any) -> None:
        self._cursor, self._sql, self._params = cursor, sql, params

    @property
    def query(self) -> bytes:
        import psycopg

        text = psycopg.ClientCursor(self._cursor.connection).mogrify(self._sql, self._params)
        return text.encode()


@functools.cache
def _prepared_cursor_class() -> type:
    # Built on first use: the PostgreSQL backend's module imports psycopg, which a SQLite
    # deployment need not load.
    from django.db.backends.postgresql.base import (  # type: ignore[attr-defined] # psycopg 3 only
        ServerBindingCursor,
    )

    class PreparedCursor(ServerBindingCursor):
        """Django's server-side binding cursor, every statement prepared."""

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            kwargs["prepare"] = True
            result = super().execute(query, params, **kwargs)
            self._query = _LoggedQuery(self, query, params)
            return result

    return PreparedCursor


_NEVER_BY_COUNT = 2**31 - 1


@contextmanager
def statements_prepared(*, using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Inside: the connection's statements are prepared (above). Only around statements whose
    plan does not depend on their values."""
    connection = connections[using]
    if connection.vendor != "postgresql" or not settings.DATABASE_PREPARED_STATEMENTS:
        yield
        return
    connection.ensure_connection()
    driver = connection.connection
    previous = driver.cursor_factory, driver.prepare_threshold
    # Django's cursors come from the driver's factory (DatabaseWrapper.create_cursor), and are
    # still wrapped by Django: its execute wrappers (row-level security, the query metrics) and
    # its query log see these statements as any other.
    driver.cursor_factory = _prepared_cursor_class()
    # psycopg prepares nothing, not even on request, while the threshold is None (Django's
    # setting); this one is never reached, so only the cursor's prepare=True prepares.
    driver.prepare_threshold = _NEVER_BY_COUNT
    try:
        yield
    finally:
        driver.cursor_factory, driver.prepare_threshold = previous


# A mark on the driver's connection: with a pool, connection_created is sent at every checkout
# of the same server connection, and the setting outlives the checkout.
_GENERIC_PLANS_SET = "_memoryhub_generic_plans"


def generic_plans_baseline(sender: Any, connection: Any, **_: Any) -> None:
    """connection_created: the statements prepared above run with their generic plan (no
    statement is prepared outside them: Django leaves psycopg's own preparing off). Once per
    server connection, on the driver's cursor (not one of the request's queries)."""
    if connection.vendor != "postgresql" or not settings.DATABASE_PREPARED_STATEMENTS:
        return
    driver = connection.connection
    if getattr(driver, _GENERIC_PLANS_SET, False):
        return
    with driver.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
    setattr(driver, _GENERIC_PLANS_SET, True)
