"""Work to do once the response has gone out, off the client's latency path.

Django sends `request_finished` when the server closes the response: after the body has been
written to the client. Inside a request, `after_response(work)` keeps `work` until then; outside
one (a Celery task, a command, a test calling a service) it runs at once. Used for enqueueing
background tasks after an append: a broker round trip the bot need not wait for. Work that
fails there is logged, not raised (the response is sent); what it was for must be recoverable
by other means — for task enqueues, the beat sweeps re-enqueue requests left pending.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from memoryhub.core.rls import rls_current, rls_restored

logger = logging.getLogger(__name__)

_pending = threading.local()


def after_response(work: Callable[[], None]) -> None:
    queue: list[Callable[[], None]] | None = getattr(_pending, "queue", None)
    if queue is None:
        work()
    else:
        # The request's row-level-security scope is gone by then (core.rls): take it along.
        scope = rls_current()

        def scoped() -> None:
            with rls_restored(scope):
                work()

        queue.append(scoped)


def request_started(**_: Any) -> None:
    _pending.queue = []


def request_finished(**_: Any) -> None:
    queue: list[Callable[[], None]] = getattr(_pending, "queue", None) or []
    _pending.queue = None
    for work in queue:
        try:
            work()
        except Exception:
            logger.exception("work after the response failed: %r", work)
