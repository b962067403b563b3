"""Liveness (`/healthz`: the process answers) and readiness (`/readyz`: database and broker
answer)."""

from __future__ import annotations

import logging

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from memoryhub.celery import app as celery_app

logger = logging.getLogger(__name__)


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:
        logger.warning("readyz: database unreachable", exc_info=True)
        return False
    return True


def _broker_ok() -> bool:
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception:
        logger.warning("readyz: broker unreachable", exc_info=True)
        return False
    return True


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database_ok(), "broker": _broker_ok()}
    ready = all(checks.values())
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks},
        status=200 if ready else 503,
    )
