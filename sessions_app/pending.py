"""One pending background task per session and kind, tracked by a timestamp column.

Summaries (`summary_requested_at`) and fact extraction (`extraction_requested_at`) share the
pattern: the first caller to set the column enqueues, after commit; the task clears it when done;
the beat sweep takes over a request that stayed set too long (its task was lost).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any, Literal

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memoryhub.core.after_response import after_response
from sessions_app.models import Session

PendingField = Literal["summary_requested_at", "extraction_requested_at", "embedding_requested_at"]


def pending_claim(
    *,
    session_id: uuid.UUID,
    field: PendingField,
    enqueue: Callable[[], None],
    stale_before: dt.datetime | None = None,
) -> bool:
    """Set `field` unless a request is already pending, and run `enqueue` after commit.

    Only the caller whose conditional UPDATE changed the row enqueues, so concurrent callers
    start one task. `stale_before` (the sweep) also takes over requests older than that.
    """
    pending = Q(**{f"{field}__isnull": True})
    if stale_before is not None:
        pending |= Q(**{f"{field}__lt": stale_before})
    stamp: dict[str, Any] = {field: timezone.now()}
    claimed = Session.objects.filter(pk=session_id).filter(pending).update(**stamp)
    if not claimed:
        return False
    # After commit (the worker must see the rows), and after the response has gone out: the
    # broker round trip is not the bot's to wait for. A lost enqueue leaves the request set,
    # and the sweep takes it over once stale.
    transaction.on_commit(lambda: after_response(enqueue), robust=True)
    return True


def pending_finish(*, session_id: uuid.UUID, field: PendingField, retry_later: bool) -> None:
    """The task is done with its request: clear it, or (`retry_later`, a permanent failure)
    re-stamp it so the next attempt is the sweep's rather than every following append's."""
    value: dict[str, Any] = {field: timezone.now() if retry_later else None}
    Session.objects.filter(pk=session_id).update(**value)
