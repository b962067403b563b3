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
from memoryhub.core.coalesce import Coalescer
from sessions_app.models import Session

PendingField = Literal["summary_requested_at", "extraction_requested_at", "embedding_requested_at"]

# The kind of an append's request, as its gathered key names it ("summary:<uuid>"): the names are
# in messages queued in the broker, so a deploy must keep them.
APPEND_KINDS: dict[PendingField, str] = {
    "summary_requested_at": "summary",
    "extraction_requested_at": "extraction",
    "embedding_requested_at": "embedding",
}


def pending_claim(
    *,
    session_id: uuid.UUID,
    field: PendingField,
    enqueue: Callable[[], None],
    stale_before: dt.datetime | None = None,
    from_append: bool = False,
    claimed: bool = False,
) -> bool:
    """Set `field` unless a request is already pending, and run `enqueue` after commit.

    Only the caller whose conditional UPDATE changed the row enqueues, so concurrent callers
    start one task. `stale_before` (the sweep) also takes over requests older than that.
    `from_append` (an append's request) has the enqueue gathered with the process's other
    appends' (pending_enqueue_after_append) instead. `claimed`: the caller's own statement set
    `field` already, as that UPDATE would have (an append's claim): only the enqueue is left.
    """
    if not claimed:
        pending = Q(**{f"{field}__isnull": True})
        if stale_before is not None:
            pending |= Q(**{f"{field}__lt": stale_before})
        stamp: dict[str, Any] = {field: timezone.now()}
        if not Session.objects.filter(pk=session_id).filter(pending).update(**stamp):
            return False
    if from_append:
        transaction.on_commit(
            lambda: pending_enqueue_after_append(
                session_id=session_id, field=field, enqueue=enqueue
            ),
            robust=True,
        )
        return True
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


def pending_enqueue_after_append(
    *, session_id: uuid.UUID, field: PendingField, enqueue: Callable[[], None]
) -> None:
    """The enqueue of an append's request, after commit.

    In a web process the publish is not the append's to pay: the request joins the other
    appends' (APPEND_REQUESTS), and the process publishes one `enqueue_appended_requests` task
    per APPEND_GATHER_SECONDS for all of them, from a thread of its own; the worker runs each
    request's `enqueue`. Measured (bench llm part's worst case, a summary per append and an
    extraction per reply, in-process CPU): publishing them cost ~1 ms of the web process's CPU
    each, 1.5 per append; gathered, the append's on/off difference went from +2.9 to +1.3 ms (the
    rest is the request's own UPDATE). Lost requests (the process killed meanwhile, the broker
    down) stay set in the database, and the sweeps take them over once stale. Eager tasks
    (tests) run `enqueue` after the response, as before.
    """
    from sessions_app.tasks import enqueue_appended_requests  # the task module imports this one

    if enqueue_appended_requests.app.conf.task_always_eager:
        after_response(enqueue)
        return
    APPEND_REQUESTS.add(f"{APPEND_KINDS[field]}:{session_id}")


def _appended_requests_publish(keys: list[str]) -> None:
    from sessions_app.tasks import enqueue_appended_requests

    enqueue_appended_requests.apply_async((keys,))


APPEND_GATHER_SECONDS = 0.5
APPEND_REQUESTS = Coalescer(
    name="append-requests", flush=_appended_requests_publish, window=APPEND_GATHER_SECONDS
)
