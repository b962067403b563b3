"""What every format's reader shares: reading a time, and reporting a record it cannot read.

A reader raises Unreadable where a record (a line, a row, a field of one) does not match its
store, with the reason as the message, and reports it with `skipped()`: the import goes on, and
the report names the record's origin and why, so nothing is dropped silently.
"""

from __future__ import annotations

import datetime as dt

from memoryhub.transfer.types import Origin, Skipped


class Unreadable(Exception):
    """A record, or a part of one, that cannot be imported; the message is the report's reason."""


def skipped(*, kind: str, origin: Origin, error: Unreadable) -> Skipped:
    """The report's line for a record of `kind` at `origin` that raised `error`."""
    return Skipped(kind=kind, origin=origin, reason=str(error))


def parse_time(*, text: str) -> dt.datetime | None:
    """An ISO 8601 / RFC 3339 time, aware; None if `text` is not one.

    Takes what the stores write: "Z" or an offset (kept), nanoseconds (cut to microseconds, as
    Python keeps no finer), a space for the "T" (SQLite's `YYYY-MM-DD HH:MM:SS`), surrounding
    white space. A time without an offset is UTC: where the stores write one, it comes from
    SQLite's clock functions, which write UTC.
    """
    try:
        parsed = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def required_time(*, text: str, what: str) -> dt.datetime:
    """`parse_time`, for a time the record cannot do without: Unreadable if it is not one."""
    parsed = parse_time(text=text)
    if parsed is None:
        raise Unreadable(f"{what} {text!r} is not an ISO 8601 time.")
    return parsed
