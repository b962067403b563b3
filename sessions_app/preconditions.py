"""Optimistic concurrency for plans and task contexts: ETags, `If-Match`, 412 and 428.

Every write bumps the row's `version`; the ETag is `Plan.etag` / `TaskContext.etag`, a hash of
the row's primary key and that version (sessions_app.models.work_etag).

The ETags are *strong*: `If-Match` compares strongly (RFC 9110 §13.1.1), so a weak ETag could
never satisfy it, and our JSON for one version is byte-for-byte the same every time. A `W/"…"`
tag sent in `If-Match` therefore never matches; `*` matches any current version (the client
says, explicitly, "overwrite whatever is there").
"""

from __future__ import annotations

from dataclasses import dataclass

from memoryhub.core.errors import PreconditionFailed, PreconditionRequired

IF_MATCH = "If-Match"


@dataclass(frozen=True)
class IfMatch:
    """A parsed `If-Match` header: `*`, or the entity tags it lists."""

    any: bool
    tags: frozenset[str]

    def matches(self, etag: str) -> bool:
        return self.any or etag in self.tags


def if_match_from(raw: str | None) -> IfMatch | None:
    """None when the header is absent. Tags are kept as sent (quotes and `W/` included), so a
    weak or malformed tag simply matches nothing."""
    if raw is None:
        return None
    tags = frozenset(part.strip() for part in raw.split(",") if part.strip())
    return IfMatch(any="*" in tags, tags=tags - {"*"})


def precondition_check(*, if_match: IfMatch | None, etag: str, required: bool) -> None:
    """Raise 428 when a required If-Match is missing and 412 when it does not match `etag`.
    Call it with the row locked, so the version compared is the version written over."""
    if if_match is None:
        if required:
            raise PreconditionRequired()
        return
    if not if_match.matches(etag):
        raise PreconditionFailed()
