"""Appends: N clients each POST one message at a time to its own session, then the same
transaction raw with psycopg (lock the session row, next seq, insert, update, commit)."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from bench.config import Config
from bench.harness import ApiClient, Gunicorn, Setup, pg_connect
from bench.measure import (
    AppendResult,
    BenchError,
    Verdict,
    Worker,
    append_result,
    check_stop,
    cpu_line,
    mark,
    run_clients,
    say,
    say_appends,
    section,
)
from bench.profiling import AUTH_PHASES, InProcessClient, Phase, print_profile, profile_requests

# Issue 18's targets. Reported, never asserted.
TARGET_RATIO = 0.30  # API append rate / raw append rate (the same transaction), at least
TARGET_APPEND_P99_MS = 25.0  # API append p99, under
TARGET_CLIENTS = 4  # both, with this many concurrent clients


def message_content(client: int, index: int) -> str:
    # ~170 characters, like a short chat turn; identical for the API and the raw runs.
    return (
        f"Benchmark message {index} from client {client}: could you remind me what we decided "
        "about the deployment window on Thursday, and who is on call for the database?"
    )


def api_append_worker(
    *,
    port: int,
    secret: str,
    session_id: str,
    client: int,
    warmup: int,
    count: int,
    roles: tuple[str, ...] = ("user",),
    after: Callable[[], None] | None = None,
) -> Worker:
    """Appends one message at a time, the roles taking turns; `after` runs after each append
    (warm-up included), outside the timed request."""
    path = f"/api/v1/sessions/{session_id}/messages/"

    def body(index: int) -> bytes:
        role = roles[index % len(roles)]
        return json.dumps({"role": role, "content": message_content(client, index)}).encode()

    def work(barrier: threading.Barrier) -> list[float]:
        api = ApiClient(port, secret)
        for index in range(warmup):
            check_stop()
            api.expect("POST", path, json.loads(body(index - warmup)), 201)
            if after is not None:
                after()
        bodies = [body(index) for index in range(count)]
        barrier.wait()
        latencies: list[float] = []
        for data in bodies:
            check_stop()
            started = time.perf_counter()
            status, payload = api.request("POST", path, data)
            latencies.append(time.perf_counter() - started)
            if status != 201:
                raise BenchError(f"append answered {status}: {payload[:300]!r}")
            if after is not None:
                after()
        api.close()
        return latencies

    return work


def get_worker(*, port: int, path: str, status: int, warmup: int, count: int) -> Worker:
    """GETs one path without a key again and again (the stack's floor: see `floor`)."""

    def work(barrier: threading.Barrier) -> list[float]:
        api = ApiClient(port, "")
        api.headers = {"Accept": "application/json"}
        for _ in range(warmup):
            check_stop()
            got, payload = api.request("GET", path)
            if got != status:
                raise BenchError(f"GET {path} answered {got}: {payload[:300]!r}")
        barrier.wait()
        latencies: list[float] = []
        for _ in range(count):
            check_stop()
            started = time.perf_counter()
            got, payload = api.request("GET", path)
            latencies.append(time.perf_counter() - started)
            if got != status:
                raise BenchError(f"GET {path} answered {got}: {payload[:300]!r}")
        api.close()
        return latencies

    return work


RAW_LOCK = "SELECT last_seq FROM sessions_app_session WHERE tenant_id = %s AND id = %s FOR UPDATE"
RAW_INSERT = (
    "INSERT INTO sessions_app_message (tenant_id, session_id, seq, role, content, name, "
    "tool_call_id, tool_calls, metadata, token_count, created_at) "
    "VALUES (%s, %s, %s, %s, %s, '', '', NULL, '{}'::jsonb, %s, %s) RETURNING id"
)
RAW_UPDATE = (
    "UPDATE sessions_app_session SET last_seq = last_seq + 1, message_count = message_count + 1, "
    "token_count = token_count + %s, last_active_at = %s, updated_at = %s WHERE id = %s"
)


def raw_append_worker(
    *,
    database_url: str,
    tenant_id: int,
    session_id: str,
    client: int,
    warmup: int,
    count: int,
    connections: list[Any],
) -> Worker:
    """The API's append transaction without Django: BEGIN; lock the session row; insert the
    message at last_seq + 1; bump the session's counters; COMMIT."""
    import psycopg

    session = uuid.UUID(session_id)

    def append(conn: psycopg.Connection[Any], index: int) -> None:
        content = message_content(client, index)
        tokens = max(1, len(content) // 4)  # the API counts with tiktoken; raw does no such work
        now = dt.datetime.now(dt.UTC)
        with conn.transaction():
            row = conn.execute(RAW_LOCK, (tenant_id, session)).fetchone()
            if row is None:
                raise BenchError(f"raw session {session} is missing")
            conn.execute(RAW_INSERT, (tenant_id, session, row[0] + 1, "user", content, tokens, now))
            conn.execute(RAW_UPDATE, (tokens, now, now, session))

    def work(barrier: threading.Barrier) -> list[float]:
        # As the plain role scoped to the tenant, as the API's connection is: same RLS price.
        conn = pg_connect(database_url, tenant=tenant_id, autocommit=True)
        # Closed by the caller after the CPU sample: an exited backend's CPU time is not counted.
        connections.append(conn)
        for index in range(warmup):
            check_stop()
            append(conn, -1 - index)
        barrier.wait()
        latencies: list[float] = []
        for index in range(count):
            check_stop()
            started = time.perf_counter()
            append(conn, index)
            latencies.append(time.perf_counter() - started)
        return latencies

    return work


def check_gapless(database_url: str, session_ids: list[str], expected: int) -> None:
    """Each append session must hold seqs 1..expected with counters to match."""

    with pg_connect(database_url) as conn:
        for session_id in session_ids:
            row = conn.execute(
                "SELECT count(*), min(m.seq), max(m.seq), s.last_seq, s.message_count "
                "FROM sessions_app_session s JOIN sessions_app_message m ON m.session_id = s.id "
                "WHERE s.id = %s GROUP BY s.last_seq, s.message_count",
                (uuid.UUID(session_id),),
            ).fetchone()
            if row != (expected, 1, expected, expected, expected):
                raise BenchError(
                    f"session {session_id}: expected seqs 1..{expected} and matching counters, "
                    f"found (count, min, max, last_seq, message_count) = {row}"
                )


APPEND_PHASES: list[Phase] = [
    *AUTH_PHASES,
    (1, "request JSON parsing", "rest_framework/request.py", "_parse", "max"),
    (
        1,
        "validation (MessageInputSerializer)",
        "sessions_app/api/views.py",
        "_validated_messages",
        "max",
    ),
    (1, "token counting (tiktoken)", "memoryhub/core/tokens.py", "count_tokens", "max"),
    (
        1,
        "append + output (run_idempotent -> perform)",
        "memoryhub/core/idempotency.py",
        "run_idempotent",
        "max",
    ),
    (
        2,
        "append service: lock, insert, update, commit",
        "sessions_app/services.py",
        "message_append_batch",
        "max",
    ),
    (
        2,
        "output serialization (MessageOutputSerializer)",
        "rest_framework/serializers.py",
        "data",
        "max",
    ),
]


def sizes_line(config: Config) -> str:
    return f"{config.clients} clients x {config.appends} appends (+{config.warmup} warm-up each)"


def run(setup: Setup, server: Gunicorn) -> tuple[AppendResult, AppendResult, AppendResult]:
    """The API's appends, then the raw ones, then the floor; returns the three in that order."""
    config = setup.config
    api_sessions = [setup.new_session(f"api-{i}") for i in range(config.clients)]
    raw_sessions = [setup.new_session(f"raw-{i}") for i in range(config.clients)]
    section(f"Appends: {config.clients} concurrent clients, one session each")
    outcome = run_clients(
        [
            api_append_worker(
                port=server.port,
                secret=setup.secret,
                session_id=session_id,
                client=i,
                warmup=config.warmup,
                count=config.appends,
            )
            for i, session_id in enumerate(api_sessions)
        ],
        server_group=server.pid,
    )
    api = append_result(outcome)
    say_appends("API  ", api, rate_width=8)
    raw_connections: list[Any] = []
    outcome = run_clients(
        [
            raw_append_worker(
                database_url=config.database_url,
                tenant_id=setup.tenant.pk,
                session_id=session_id,
                client=i,
                warmup=config.warmup,
                count=config.appends,
                connections=raw_connections,
            )
            for i, session_id in enumerate(raw_sessions)
        ],
        server_group=server.pid,
    )
    for conn in raw_connections:
        conn.close()
    raw = append_result(outcome)
    say_appends("raw  ", raw, rate_width=8)
    check_gapless(config.database_url, api_sessions + raw_sessions, config.warmup + config.appends)
    say("check: every session holds seqs 1..N without gaps, and its counters match")
    ratio = api.rate / raw.rate
    floor_result = floor(setup, server, raw)
    p99_ok = api.latency.p99_ms < TARGET_APPEND_P99_MS
    say(
        f"ratio API/raw {ratio:.3f} (target >= {TARGET_RATIO})  {mark(ratio >= TARGET_RATIO)}"
        f"    API p99 {api.latency.p99_ms:.2f} ms (target < {TARGET_APPEND_P99_MS:.0f} ms)  "
        f"{mark(p99_ok)}"
    )
    return api, raw, floor_result


# What the stack costs before an append does anything: the same clients GET /healthz, which
# goes through gunicorn, every middleware and the URL resolver and reaches no table. Its rate
# against the raw append's bounds the ratio any append through this stack could reach.
FLOOR_PATH = "/healthz"


def floor(setup: Setup, server: Gunicorn, raw: AppendResult) -> AppendResult:
    config = setup.config
    outcome = run_clients(
        [
            get_worker(
                port=server.port,
                path=FLOOR_PATH,
                status=200,
                warmup=config.warmup,
                count=config.appends,
            )
            for _ in range(config.clients)
        ],
        server_group=server.pid,
    )
    result = append_result(outcome)
    say(
        f"floor {result.appends} x GET {FLOOR_PATH} in {result.seconds:5.2f} s = "
        f"{result.rate:8.1f}/s = {result.rate / raw.rate:.2f} x the raw append rate "
        "(gunicorn, middleware, URL resolving; no key, no table)"
    )
    say(f"      {cpu_line(result.cpu, 'request')}")
    return result


def record(result: tuple[AppendResult, AppendResult, AppendResult], setup: Setup) -> dict[str, Any]:
    api, raw, floor_result = result
    return {
        "append_api": asdict(api),
        "append_raw": asdict(raw),
        "append_floor_healthz": asdict(floor_result),
        "append_ratio": api.rate / raw.rate,
    }


def profile(setup: Setup, client: InProcessClient) -> dict[str, Any]:
    session_id = setup.new_session("profile")
    append_url = f"/api/v1/sessions/{session_id}/messages/"

    def append(index: int) -> None:
        body = json.dumps({"role": "user", "content": message_content(0, index)}).encode()
        client("POST", append_url, body, 201)

    section("Profile of one append (in-process)")
    appends = profile_requests(
        what="append",
        request=append,
        count=setup.config.profile_requests,
        phases=APPEND_PHASES,
        dump=setup.config.profile_out,
    )
    print_profile(appends, top=True)
    return {"append": asdict(appends)}


def summary(
    result: tuple[AppendResult, AppendResult, AppendResult],
    config: Config,
    profiles: dict[str, Any],
) -> None:
    api, raw, floor_result = result
    ratio = api.rate / raw.rate
    say(
        f"append  API {api.rate:7.1f}/s   raw {raw.rate:7.1f}/s   ratio {ratio:.3f}"
        f"{'':9}target >= {TARGET_RATIO}      {mark(ratio >= TARGET_RATIO)}"
    )
    say(
        f"append  API p50 {api.latency.p50_ms:6.2f} ms   p99 {api.latency.p99_ms:6.2f} ms"
        f"{'':10}target p99 < {TARGET_APPEND_P99_MS:.0f} ms  "
        f"{mark(api.latency.p99_ms < TARGET_APPEND_P99_MS)}"
    )
    say(
        f"append  floor GET {FLOOR_PATH} {floor_result.rate:7.1f}/s = "
        f"{floor_result.rate / raw.rate:.2f} x raw: no append through this stack gets past it"
    )


def verdicts(
    result: tuple[AppendResult, AppendResult, AppendResult], config: Config
) -> list[Verdict]:
    api, raw, _ = result
    ratio = api.rate / raw.rate
    judged = config.clients == TARGET_CLIENTS
    note = f"n/a (set at {TARGET_CLIENTS} clients, ran {config.clients})"
    return [
        Verdict(
            target=f"append rate API/raw >= {TARGET_RATIO:.2f}x ({TARGET_CLIENTS} clients)",
            measured=f"{api.rate:.1f} appends/s",
            baseline=f"{raw.rate:.1f} appends/s",
            ratio=f"{ratio:.3f}",
            ok=ratio >= TARGET_RATIO if judged else None,
            note=note,
        ),
        Verdict(
            target=f"append p99 < {TARGET_APPEND_P99_MS:.0f} ms ({TARGET_CLIENTS} clients)",
            measured=f"p99 {api.latency.p99_ms:.2f} ms",
            baseline=f"p99 {raw.latency.p99_ms:.2f} ms",
            ratio=f"{api.latency.p99_ms / raw.latency.p99_ms:.1f}x raw",
            ok=api.latency.p99_ms < TARGET_APPEND_P99_MS if judged else None,
            note=note,
        ),
    ]
