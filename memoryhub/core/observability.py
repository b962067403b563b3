"""What operators see of each request and task: a request id, one access-log line, and the
request and task series of memoryhub.core.metrics.

- `RequestObservabilityMiddleware` (first in MIDDLEWARE, so it also times and labels what the
  other middleware refuse) takes a sane incoming `X-Request-ID` or makes one, answers with it,
  counts the request's database queries and their time (a wrapper on the connection: no
  special database engine needed), observes the request's latency under its URL *pattern*,
  and logs one line with the request id, tenant, route, status and duration.
- The request id travels with the tasks a request enqueues (a message header) and is bound,
  with the task's name and id, to every log record the task writes (`LogContextFilter`).
- `LOG_FORMAT=json` (the default without DEBUG) writes each record as one JSON object
  (python-json-logger), with those fields as keys; `text` keeps the plain lines.
"""

from __future__ import annotations

import contextvars
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.utils.functional import SimpleLazyObject, empty

from memoryhub.core import metrics

logger = logging.getLogger("memoryhub.request")

REQUEST_ID_HEADER = "X-Request-ID"
# What a proxy or client may hand us as its request id: short, printable, no spaces, so it can
# go into a header and a log line as is. Anything else is replaced by our own.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+=@-]{0,127}")
# The message header a task's request id travels in.
TASK_REQUEST_ID_HEADER = "memoryhub_request_id"

_log_context: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "memoryhub_log_context", default=MappingProxyType({})
)


def log_context() -> Mapping[str, str]:
    """The request id (and, in a task, its name and id) bound to the current request or task."""
    return _log_context.get()


class LogContextFilter(logging.Filter):
    """Adds the bound request id, task name and task id to every record (as attributes, so the
    JSON formatter writes them as keys); records already carrying one keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _log_context.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def json_formatter() -> logging.Formatter:
    """One JSON object per record: time, level, logger, message, and any extra fields."""
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
    )


def request_id_from(value: str | None) -> str:
    """The client's (or proxy's) request id when it is sane, else a new one."""
    if value and _SANE_REQUEST_ID.fullmatch(value):
        return value
    return uuid.uuid4().hex


class _QueryTimer:
    """A connection execute wrapper: counts the queries run through it and their time."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - started
            self.count += 1


def _route_of(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    route = getattr(match, "route", None)
    return f"/{route}" if route is not None else metrics.UNMATCHED_ROUTE


def _tenant_slug(request: HttpRequest) -> str:
    """The tenant a page (`request.tenant`) or an API key (DRF sets the key's principal as the
    request's user) acted for; "" when none. Never loads a lazy user: that would be a query
    for a request that did not need one."""
    tenant = request.__dict__.get("tenant")
    if tenant is None:
        user = request.__dict__.get("user")
        if isinstance(user, SimpleLazyObject):
            wrapped = user.__dict__.get("_wrapped", empty)
            user = None if wrapped is empty else wrapped
        tenant = getattr(user, "tenant", None)
    return str(getattr(tenant, "slug", "") or "")


class RequestObservabilityMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_from(request.META.get("HTTP_X_REQUEST_ID"))
        request.request_id = request_id  # type: ignore[attr-defined]
        # Not reset when the response is returned: work that runs after the response has gone
        # (task enqueues, memoryhub.core.after_response) still belongs to this request. The
        # next request on this thread binds its own.
        _log_context.set({"request_id": request_id})
        queries = _QueryTimer()
        started = time.perf_counter()
        with connection.execute_wrapper(queries):
            response = self.get_response(request)
        duration = time.perf_counter() - started
        response.headers[REQUEST_ID_HEADER] = request_id
        route = _route_of(request)
        status = response.status_code
        metrics.HTTP_REQUEST_DURATION.labels(
            route=route, method=_method_label(request.method), status=str(status)
        ).observe(duration)
        metrics.HTTP_REQUEST_DB_QUERIES.labels(route=route).observe(queries.count)
        metrics.HTTP_REQUEST_DB_DURATION.labels(route=route).observe(queries.seconds)
        if not logger.isEnabledFor(logging.INFO):
            # The access line is off (LOG_LEVEL above INFO): skip building its fields.
            return response
        # The path without its query string: queries carry people's words (search `q=`).
        logger.info(
            "%s %s %s %.1fms",
            request.method,
            request.path,
            status,
            duration * 1000,
            extra={
                "tenant": _tenant_slug(request),
                "route": route,
                "method": request.method,
                "path": request.path,
                "status": status,
                "duration_ms": round(duration * 1000, 2),
                "db_queries": queries.count,
                "db_ms": round(queries.seconds * 1000, 2),
            },
        )
        return response


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _method_label(method: str | None) -> str:
    # A client may send any token as its method: keep the label's values bounded.
    return method if method in _METHODS else "other"


# --- Celery: the request id in task messages, task series, the task's log context --------------

_task_started: dict[str, tuple[float, contextvars.Token[Mapping[str, str]]]] = {}

_OUTCOMES = {"SUCCESS": "succeeded", "FAILURE": "failed", "RETRY": "retried"}


def task_publishing(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """before_task_publish: the enqueuing request's id goes along in the message headers."""
    request_id = _log_context.get().get("request_id")
    if request_id and headers is not None:
        headers.setdefault(TASK_REQUEST_ID_HEADER, request_id)


def task_starting(task_id: str = "", task: Any = None, **_: Any) -> None:
    """task_prerun: bind the task's name, id and (if it came from a request) request id."""
    if task is None:
        return
    context = {"task_name": str(task.name), "task_id": str(task_id)}
    request_id = getattr(task.request, TASK_REQUEST_ID_HEADER, None)
    if isinstance(request_id, str) and request_id:
        context["request_id"] = request_id
    _task_started[task_id] = (time.perf_counter(), _log_context.set(context))


def task_ended(task_id: str = "", task: Any = None, state: str | None = None, **_: Any) -> None:
    """task_postrun: count the run by outcome and observe its time; unbind its context."""
    started = _task_started.pop(task_id, None)
    if task is None:
        return
    name = str(task.name)
    metrics.CELERY_TASKS.labels(task=name, outcome=_OUTCOMES.get(state or "", "other")).inc()
    if started is None:
        return
    metrics.CELERY_TASK_DURATION.labels(task=name).observe(time.perf_counter() - started[0])
    try:
        _log_context.reset(started[1])
    except ValueError:
        _log_context.set({})  # ended in another context than it started (never in practice)


def celery_logger_configured(logger: logging.Logger | None = None, **_: Any) -> None:
    """after_setup_logger / after_setup_task_logger: Celery installs its own handlers in a
    worker; give them the configured format and the log context."""
    if logger is None:
        return
    for handler in logger.handlers:
        if settings.LOG_FORMAT == "json":
            handler.setFormatter(json_formatter())
        if not any(isinstance(f, LogContextFilter) for f in handler.filters):
            handler.addFilter(LogContextFilter())


def connect_celery_signals() -> None:
    from celery import signals

    signals.before_task_publish.connect(task_publishing, weak=False, dispatch_uid="mh-obs-publish")
    signals.task_prerun.connect(task_starting, weak=False, dispatch_uid="mh-obs-prerun")
    signals.task_postrun.connect(task_ended, weak=False, dispatch_uid="mh-obs-postrun")
    signals.after_setup_logger.connect(
        celery_logger_configured, weak=False, dispatch_uid="mh-obs-logger"
    )
    signals.after_setup_task_logger.connect(
        celery_logger_configured, weak=False, dispatch_uid="mh-obs-task-logger"
    )
