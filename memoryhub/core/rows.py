"""Rows read with a prebuilt statement, converted as the ORM's reads convert them.

A hot read that skips the queryset (building and compiling one cost more than the database's
time for a handful of rows) must still hand out the values a queryset would: JSON decoded,
times aware, booleans real on SQLite. The ORM's compiler applies, per column, the backend's
converters and then the field's; these two helpers do the same for a statement of our own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models.expressions import Col
from psycopg.pq import Format

# (position in the row, the column's converters in the ORM's order, the column expression)
ColumnConverters = list[tuple[int, list[Callable[..., Any]], Col]]


def column_converters(
    *, connection: BaseDatabaseWrapper, columns: Sequence[Col]
) -> ColumnConverters:
    """The converters the ORM applies to these columns on this connection, for the columns that
    have any."""
    found: ColumnConverters = []
    for position, column in enumerate(columns):
        functions = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        if functions:
            found.append((position, functions, column))
    return found


def row_converted(
    *, row: Sequence[Any], converters: ColumnConverters, connection: BaseDatabaseWrapper
) -> list[Any]:
    """The row's values as a queryset's read of the same columns gives them."""
    values = list(row)
    for position, functions, column in converters:
        value = values[position]
        for function in functions:
            value = function(value, column, connection)
        values[position] = value
    return values


def compiled_timestamps(cursor: CursorWrapper) -> None:
    """Times read on this cursor by psycopg's own timestamptz loader (compiled) instead of
    Django's, a Python subclass of it that only swaps the tzinfo for the connection's time zone:
    ~3 µs a value, most of a hundred facts' read. With the session's time zone UTC, as Django
    sets it, both give the same aware datetimes (tzinfo datetime.timezone.utc); elsewhere, or on
    another database, Django's loader stays."""
    connection = cursor.db
    if connection.vendor != "postgresql" or connection.timezone_name != "UTC":
        return
    loader = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, Format.TEXT)
    if loader is not None:
        cursor.cursor.adapters.register_loader(_TIMESTAMPTZ_OID, loader)


_TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid
