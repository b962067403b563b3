"""Reads: GET ?last=20 on a session holding --read-rows messages, through the API and raw."""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from bench.config import Config
from bench.harness import ApiClient, Gunicorn, Setup, pg_connect
from bench.measure import BenchError, Latency, Verdict, judged, say, section
from bench.profiling import AUTH_PHASES, InProcessClient, Phase, print_profile, profile_requests

if TYPE_CHECKING:
    from memoryhub.accounts.models import Tenant

TARGET_READ_P95_MS = 3.0  # API last-20 read p95 at 1,000,000 rows, at most (issue 18)
TARGET_READ_ROWS = 1_000_000


@dataclass
class ReadSession:
    id: str
    rows: int
    table_rows: int
    loaded_seconds: float | None  # None: reused from an earlier run


def ensure_read_session(*, tenant: Tenant, database_url: str, rows: int) -> ReadSession:
    """A session holding exactly `rows` messages, bulk-loaded once and reused afterwards."""

    from sessions_app.models import Session
    from sessions_app.services import session_create_or_get

    marker = f"read-{rows}"
    session = (
        Session.objects.filter(tenant=tenant, metadata__bench=marker)
        .order_by("-message_count")
        .first()
    )
    if session is None:
        session, _ = session_create_or_get(
            tenant=tenant, agent_id="bench-read", metadata={"bench": marker}
        )
    with pg_connect(database_url) as conn:
        count, top = conn.execute(
            "SELECT count(*), coalesce(max(seq), 0) FROM sessions_app_message "
            "WHERE session_id = %s",
            (session.pk,),
        ).fetchone() or (0, 0)
        counters = conn.execute(
            "SELECT last_seq, message_count FROM sessions_app_session WHERE id = %s",
            (session.pk,),
        ).fetchone()
        loaded: float | None = None
        if (count, top) != (rows, rows) or counters != (rows, rows):
            say(f"loading {rows:,} messages into the read session (once; later runs reuse it)")
            started = time.perf_counter()
            conn.execute("DELETE FROM sessions_app_message WHERE session_id = %s", (session.pk,))
            conn.execute(
                """
                INSERT INTO sessions_app_message
                    (tenant_id, session_id, seq, role, content, name, tool_call_id, tool_calls,
                     metadata, token_count, created_at)
                SELECT %(tenant)s, %(session)s, g,
                       CASE WHEN g %% 2 = 1 THEN 'user' ELSE 'assistant' END,
                       'Message ' || g || ' of the read benchmark: what did we decide about the '
                           || 'deployment window on Thursday, and who is on call?',
                       '', '', NULL, '{}'::jsonb, 24,
                       now() - make_interval(secs => %(rows)s - g)
                FROM generate_series(1, %(rows)s) AS g
                """,
                {"tenant": tenant.pk, "session": session.pk, "rows": rows},
            )
            conn.execute(
                "UPDATE sessions_app_session SET last_seq = %(rows)s, message_count = %(rows)s, "
                "token_count = %(rows)s * 24, last_active_at = now(), updated_at = now() "
                "WHERE id = %(session)s",
                {"rows": rows, "session": session.pk},
            )
            conn.commit()
            conn.execute("ANALYZE sessions_app_message")
            conn.execute("ANALYZE sessions_app_session")
            conn.commit()
            loaded = time.perf_counter() - started
        total = conn.execute("SELECT count(*) FROM sessions_app_message").fetchone()
    return ReadSession(
        id=str(session.pk),
        rows=rows,
        table_rows=int(total[0]) if total else 0,
        loaded_seconds=loaded,
    )


RAW_READ = (
    "SELECT id, session_id, seq, role, content, name, tool_call_id, tool_calls, metadata, "
    "token_count, created_at FROM sessions_app_message "
    "WHERE tenant_id = %s AND session_id = %s ORDER BY seq DESC LIMIT 20"
)


def api_reads(*, port: int, secret: str, session_id: str, count: int) -> list[float]:
    api = ApiClient(port, secret)
    path = f"/api/v1/sessions/{session_id}/messages/?last=20"
    for _ in range(20):
        page = api.expect("GET", path, None, 200)
    if len(page["results"]) != 20 or not page["has_more"]:
        raise BenchError(f"GET ?last=20 returned {len(page['results'])} messages: {page!r:.300}")
    latencies: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        status, payload = api.request("GET", path)
        latencies.append(time.perf_counter() - started)
        if status != 200:
            raise BenchError(f"read answered {status}: {payload[:300]!r}")
    api.close()
    return latencies


def raw_reads(*, database_url: str, tenant_id: int, session_id: str, count: int) -> list[float]:

    session = uuid.UUID(session_id)
    latencies: list[float] = []
    # Scoped to the tenant as the API's connection is: both pay the same row-level security.
    # Never prepared (as Django sends it): under row-level security the policy's filter lowers
    # the row estimate, and the generic plan PostgreSQL settles on for a prepared statement
    # sorts the whole session instead of walking (session, seq) backwards: 231 ms, not 0.1 ms,
    # at 100,000 messages.
    with pg_connect(database_url, tenant=tenant_id, autocommit=True) as conn:
        for _ in range(20):
            rows = conn.execute(RAW_READ, (tenant_id, session), prepare=False).fetchall()
        if len(rows) != 20:
            raise BenchError(f"raw read returned {len(rows)} rows")
        for _ in range(count):
            started = time.perf_counter()
            conn.execute(RAW_READ, (tenant_id, session), prepare=False).fetchall()
            latencies.append(time.perf_counter() - started)
    return latencies


def read_mark(api: Latency, config: Config) -> str:
    return judged(api.p95_ms <= TARGET_READ_P95_MS, config.read_rows >= TARGET_READ_ROWS)


def read_note(config: Config) -> str:
    if config.read_rows >= TARGET_READ_ROWS:
        return ""
    return f"  (the target is set at {TARGET_READ_ROWS:,} rows: --big)"


READ_PHASES: list[Phase] = [
    *AUTH_PHASES,
    (
        1,
        "session lookup (session_get_for_tenant)",
        "sessions_app/selectors.py",
        "session_get_for_tenant",
        "max",
    ),
    (
        1,
        "query-string validation (MessageListQuerySerializer)",
        "rest_framework/serializers.py",
        "is_valid",
        "max",
    ),
    (
        1,
        "messages query (message_list_last)",
        "sessions_app/selectors.py",
        "message_list_last",
        "max",
    ),
    (
        1,
        "output serialization (MessageOutputSerializer)",
        "rest_framework/serializers.py",
        "data",
        "max",
    ),
]


def sizes_line(config: Config) -> str:
    return f"read session of {config.read_rows:,} messages, {config.reads} reads"


def run(setup: Setup, server: Gunicorn) -> tuple[Latency, Latency]:
    """The API's reads, then the raw ones; returns both latencies (API first)."""
    config = setup.config
    assert setup.read_session is not None
    session_id = setup.read_session.id
    section(f"Reads: GET ?last=20 on a {config.read_rows:,}-message session, one client")
    api = Latency.of(
        api_reads(port=server.port, secret=setup.secret, session_id=session_id, count=config.reads)
    )
    raw = Latency.of(
        raw_reads(
            database_url=config.database_url,
            tenant_id=setup.tenant.pk,
            session_id=session_id,
            count=config.reads,
        )
    )
    say(f"API  {api.line()}")
    say(f"raw  {raw.line()}")
    say(
        f"ratio API/raw {raw.p50_ms / api.p50_ms:.3f} (as rates: raw p50 / API p50)    "
        f"API p95 {api.p95_ms:.2f} ms "
        f"(target <= {TARGET_READ_P95_MS:.0f} ms)  {read_mark(api, config)}" + read_note(config)
    )
    return api, raw


def record(result: tuple[Latency, Latency], setup: Setup) -> dict[str, Any]:
    assert setup.read_session is not None
    return {
        "read_api": asdict(result[0]),
        "read_raw": asdict(result[1]),
        "read_rows": setup.config.read_rows,
        "messages_table_rows": setup.read_session.table_rows,
    }


def profile(setup: Setup, client: InProcessClient) -> dict[str, Any]:
    assert setup.read_session is not None
    config = setup.config
    read_url = f"/api/v1/sessions/{setup.read_session.id}/messages/?last=20"

    def read(index: int) -> None:
        client("GET", read_url, None, 200)

    section(f"Profile of one read of the last 20 ({config.read_rows:,}-message session)")
    reads = profile_requests(
        what="read",
        request=read,
        count=config.profile_requests,
        phases=READ_PHASES,
        dump=config.profile_out if config.only == ("reads",) else None,
    )
    print_profile(reads, top=False)
    return {"read": asdict(reads)}


def summary(result: tuple[Latency, Latency], config: Config, profiles: dict[str, Any]) -> None:
    api = result[0]
    say(
        f"read    API p50 {api.p50_ms:6.2f} ms   p95 {api.p95_ms:6.2f} ms"
        f"{'':10}target p95 <= {TARGET_READ_P95_MS:.0f} ms "
        f"{read_mark(api, config)}{read_note(config)}"
    )


def verdicts(result: tuple[Latency, Latency], config: Config) -> list[Verdict]:
    api, raw = result
    return [
        Verdict(
            target=f"last-20 read p95 <= {TARGET_READ_P95_MS:.0f} ms at "
            f"{TARGET_READ_ROWS:,} messages",
            measured=f"p95 {api.p95_ms:.2f} ms at {config.read_rows:,}",
            baseline=f"p95 {raw.p95_ms:.2f} ms",
            ratio=f"{api.p95_ms / raw.p95_ms:.1f}x raw",
            ok=api.p95_ms <= TARGET_READ_P95_MS if config.read_rows >= TARGET_READ_ROWS else None,
        )
    ]
