"""In-process profiles of one request (Django's WSGI handler, no HTTP): every DB statement
timed where Django executes it, then the same requests under cProfile, summed into phases.
Each part names its phases (a list of Phase) and calls profile_requests and print_profile."""

from __future__ import annotations

import cProfile
import io
import math
import pstats
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.config import ROOT
from bench.measure import BenchError, say


@dataclass
class QueryStat:
    sql: str
    count: int
    seconds: float


@dataclass
class ProfileResult:
    what: str
    requests: int
    wall_ms: float  # mean per request, unprofiled
    db_ms: float  # statements + commit + health check, unprofiled
    statements_per_request: float
    queries: list[QueryStat] = field(default_factory=list)
    phases: list[tuple[int, str, float | None]] = field(default_factory=list)  # indent, label, ms
    profiled_total_ms: float = 0.0
    top_cumulative: list[tuple[float, float, float, str]] = field(default_factory=list)
    top_own: list[tuple[float, float, float, str]] = field(default_factory=list)


IN_LIST = re.compile(r"IN \((?:%s, )*%s\)")


def short_sql(sql: str) -> str:
    text = " ".join(sql.split())
    text = re.sub(r"^SELECT (.+?) FROM ", "SELECT … FROM ", text)
    text = re.sub(r"^INSERT INTO (\S+) \((.+?)\) VALUES .*", r"INSERT INTO \1 (…) VALUES (…)", text)
    text = re.sub(r"^(UPDATE \S+ SET )(.+?)( WHERE .*)$", r"\1…\3", text)
    return text if len(text) <= 110 else text[:107] + "..."


def short_function(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    for anchor in ("site-packages/", str(ROOT) + "/", "/lib/python3"):
        if anchor in filename:
            filename = filename.split(anchor, 1)[1]
            break
    return f"{filename}:{line}({name})"


# A phase is (indent, label, file suffix, function name, how): "max" takes the outermost match
# (nested calls of one function), "sum" adds up distinct functions of that name (e.g. the
# compilers' as_sql). A missing function (renamed in the app) shows as n/a.
Phase = tuple[int, str, str, str, str]
AUTH_PHASES: list[Phase] = [
    (
        1,
        "authentication (ApiKeyAuthentication, its query)",
        "memoryhub/accounts/authentication.py",
        "authenticate",
        "max",
    ),
    (1, "permission (scope check)", "memoryhub/accounts/permissions.py", "has_permission", "max"),
]
TAIL_PHASES: list[Phase] = [
    (0, "JSON rendering (Response.rendered_content)", "rest_framework/response.py",
     "rendered_content", "max"),
    (0, "database work, inside the phases above:", "", "", ""),
    (1, "ORM: building SQL (compilers' as_sql)", "django/db/models/sql/compiler.py", "as_sql",
     "sum"),
    (1, "statements: send + wait (CursorWrapper._execute)", "django/db/backends/utils.py",
     "_execute", "max"),
    (1, "commit", "django/db/backends/base/base.py", "_commit", "max"),
    (1, "health check SELECT 1 (CONN_HEALTH_CHECKS)", "django/db/backends/postgresql/base.py",
     "is_usable", "max"),
]  # fmt: skip


def cumulative(stats: dict[Any, Any], suffix: str, name: str, how: str = "max") -> float | None:
    found = [
        value[3]
        for (filename, _line, function), value in stats.items()
        if function == name and filename.endswith(suffix)
    ]
    if not found:
        return None
    return sum(found) if how == "sum" else max(found)


class InProcessClient:
    """Calls Django's WSGI handler directly: the entry point gunicorn calls, with the same
    request_started/request_finished signals (connection reuse and health checks), minus HTTP."""

    def __init__(self, secret: str) -> None:
        from django.core.handlers.wsgi import WSGIHandler

        self.app = WSGIHandler()
        self.secret = secret

    def __call__(self, method: str, url: str, body: bytes | None, expect: int) -> None:
        path, _, query = url.partition("?")
        data = body or b""
        environ = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "127.0.0.1",
            "HTTP_AUTHORIZATION": f"Bearer {self.secret}",
            "HTTP_ACCEPT": "application/json",
            "wsgi.input": io.BytesIO(data),
            "wsgi.errors": sys.stderr,
            "wsgi.url_scheme": "http",
            "wsgi.version": (1, 0),
            "wsgi.multithread": False,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        if body is not None:
            environ["CONTENT_TYPE"] = "application/json"
            environ["CONTENT_LENGTH"] = str(len(data))
        status: list[str] = []

        def start_response(
            code: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], object]:
            status.append(code)
            return lambda chunk: None

        result = self.app(environ, start_response)
        try:
            b"".join(result)
        finally:
            result.close()  # fires request_finished, as gunicorn does
        if not status or not status[0].startswith(str(expect)):
            raise BenchError(f"in-process {method} {url} answered {status}, expected {expect}")


def profile_requests(
    *,
    what: str,
    request: Callable[[int], None],
    count: int,
    phases: list[Phase],
    dump: Path | None = None,
) -> ProfileResult:
    """`count` requests unprofiled (wall time, every DB statement timed), then `count` more
    under cProfile (where the Python time goes)."""
    from django.db import connection

    for index in range(30):  # warm-up: lazy imports, tokenizer, connection
        request(-1 - index)

    queries: dict[str, QueryStat] = {}
    extra = {"commit": QueryStat("COMMIT", 0, 0.0), "health": QueryStat("SELECT 1", 0, 0.0)}

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            # One line per statement, whatever the length of its IN (...) list (in_bulk).
            key = IN_LIST.sub("IN (…)", sql)
            stat = queries.setdefault(key, QueryStat(short_sql(key), 0, 0.0))
            stat.count += 1
            stat.seconds += time.perf_counter() - started

    def timed(stat: QueryStat, function: Callable[[], Any]) -> Callable[[], Any]:
        def wrapper() -> Any:
            started = time.perf_counter()
            try:
                return function()
            finally:
                stat.count += 1
                stat.seconds += time.perf_counter() - started

        return wrapper

    # COMMIT and the health check bypass execute_wrapper: time them on this connection object.
    db: Any = connection
    db._commit = timed(extra["commit"], db._commit)
    db.is_usable = timed(extra["health"], db.is_usable)
    try:
        with connection.execute_wrapper(record):
            started = time.perf_counter()
            for index in range(count):
                request(index)
            wall = time.perf_counter() - started
    finally:
        del db._commit  # the instance attributes go; the methods show through again
        del db.is_usable

    profiler = cProfile.Profile()
    profiler.enable()
    for index in range(count, 2 * count):
        request(index)
    profiler.disable()
    if dump is not None:
        profiler.dump_stats(dump)
    stats: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    per = 1000 / count
    total = cumulative(stats, "django/core/handlers/wsgi.py", "__call__") or math.nan
    dispatch = cumulative(stats, "rest_framework/views.py", "dispatch")
    rendering = cumulative(stats, "rest_framework/response.py", "rendered_content")
    rows: list[tuple[int, str, float | None]] = []
    if dispatch is not None:
        outside = total - dispatch - (rendering or 0.0)
        rows.append((0, "Django middleware, routing, WSGI, signals", outside * per))
        rows.append((0, "DRF view (APIView.dispatch), of which:", dispatch * per))
    for indent, label, suffix, name, how in [*phases, *TAIL_PHASES]:
        value = cumulative(stats, suffix, name, how) if name else None
        rows.append((indent, label, value * per if value is not None else None))

    def entry(key: Any, value: Any) -> tuple[float, float, float, str]:
        return (value[3] * per, value[2] * per, value[1] / count, short_function(key))

    # Everything at or above the view's dispatch is the chain of middleware wrappers: all ~100%.
    ceiling = dispatch if dispatch is not None else 0.95 * total
    top_cumulative = sorted(
        (entry(key, value) for key, value in stats.items() if value[3] < ceiling), reverse=True
    )[:15]
    top_own = sorted(
        (entry(key, value) for key, value in stats.items()), key=lambda row: row[1], reverse=True
    )[:10]

    statements = list(queries.values())
    db_seconds = sum(s.seconds for s in statements) + sum(s.seconds for s in extra.values())
    return ProfileResult(
        what=what,
        requests=count,
        wall_ms=1000 * wall / count,
        db_ms=1000 * db_seconds / count,
        statements_per_request=sum(s.count for s in statements) / count,
        queries=[*statements, *(s for s in extra.values() if s.count)],
        phases=rows,
        profiled_total_ms=total * per,
        top_cumulative=top_cumulative,
        top_own=top_own,
    )


def print_profile(result: ProfileResult, *, top: bool) -> None:
    n = result.requests
    say(
        f"unprofiled, {n} requests in-process (no HTTP, no concurrency): "
        f"{result.wall_ms:.2f} ms per {result.what}"
    )
    say(
        f"DB: {result.statements_per_request:.1f} ORM statements + commit + health check = "
        f"{result.db_ms:.2f} ms ({100 * result.db_ms / result.wall_ms:.0f}% of it; "
        "each timed around its round trip to PostgreSQL)"
    )
    for stat in result.queries:
        say(f"  {1000 * stat.seconds / n:6.3f} ms  x{stat.count / n:<4.1f} {stat.sql}")
    say(
        f"where the time goes (cProfile, {n} more requests; inclusive ms per {result.what}; "
        "cProfile inflates Python time, not DB waits):"
    )
    total = result.profiled_total_ms
    say(f"  {total:7.2f} ms  100%  whole request (WSGIHandler.__call__)")
    for indent, label, value in result.phases:
        text = "  " * indent + label
        if label.endswith(":") and value is None:
            say(f"  {'':17}{text}")
        elif value is None:
            say(f"  {'n/a':>7}           {text}")
        else:
            say(f"  {value:7.2f} ms  {100 * value / total:3.0f}%  {text}")
    if not top:
        return
    say(f"top 15 by cumulative time, below APIView.dispatch (ms per {result.what}):")
    say(f"  {'cum ms':>7}  {'own ms':>7}  {'calls':>5}  function")
    for cum, own, calls, name in result.top_cumulative:
        say(f"  {cum:7.3f}  {own:7.3f}  {calls:5.1f}  {name}")
    say(f"top 10 by own time (ms per {result.what}):")
    for cum, own, calls, name in result.top_own:
        say(f"  {cum:7.3f}  {own:7.3f}  {calls:5.1f}  {name}")
