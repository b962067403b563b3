"""Liveness (`/healthz`: the process answers) and readiness (`/readyz`: database and broker
answer)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from memoryhub.celery import app as celery_app

logger = logging.getLogger(__name__)

# A probe must answer quickly even when what it checks hangs: each check has this long (they run
# side by side), then counts as down.
CHECK_TIMEOUT_SECONDS = 0.5


def _load_clients() -> None:
    """Import the database backend and the broker's transport now, not within the first probe's
    deadline (redis-py alone takes ~0.4 s to import on a busy machine)."""
    _ = connection.vendor
    celery_app.connection_for_write().get_transport_cls()


_load_clients()


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _database_ok() -> bool:
    # In a thread of its own, so on a connection of its own: it also proves that a new
    # connection can be made (not "too many clients"). Closed here: the thread ends.
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:
        logger.warning("readyz: database unreachable", exc_info=True)
        return False
    finally:
        connection.close()
    return True


def _broker_ok() -> bool:
    try:
        # One attempt, no retry: a probe reports, the next probe tries again.
        with celery_app.connection_for_write(connect_timeout=CHECK_TIMEOUT_SECONDS) as conn:
            conn.ensure_connection(max_retries=0)
    except Exception:
        logger.warning("readyz: broker unreachable", exc_info=True)
        return False
    return True


def _run_checks(checks: dict[str, Callable[[], bool]]) -> dict[str, bool]:
    """Run the checks in threads, side by side; one that has not answered by the deadline is
    down. Its thread is left to finish on the client library's own timeout (the database's
    connect_timeout, the broker's connect_timeout above)."""
    results: dict[str, bool] = {}

    def run(name: str, check: Callable[[], bool]) -> None:
        results[name] = check()

    threads = [
        threading.Thread(target=run, args=(name, check), name=f"readyz-{name}", daemon=True)
        for name, check in checks.items()
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + CHECK_TIMEOUT_SECONDS
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    late = [name for name in checks if name not in results]
    if late:
        logger.warning("readyz: no answer within %.1f s from %s", CHECK_TIMEOUT_SECONDS, late)
    return {name: results.get(name, False) for name in checks}


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    checks = _run_checks({"database": _database_ok, "broker": _broker_ok})
    ready = all(checks.values())
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks},
        status=200 if ready else 503,
    )
