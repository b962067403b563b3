#!/usr/bin/env python
"""MemoryHub benchmark: the API against raw psycopg, on PostgreSQL.

    .venv/bin/python bench/run.py            # quick: 4 x 300 appends, a 100,000-message session,
                                             #   100,000 facts across 1,000 users
    .venv/bin/python bench/run.py --big      # 4 x 1,000 appends, a 1,000,000-message session,
                                             #   1,000,000 facts across 10,000 users
    .venv/bin/python bench/run.py --only facts   # one part only (appends, reads, facts, context)

It serves the API the way production does (gunicorn, several workers, DEBUG off) and measures:

1. appends: N clients, each on its own session, POST one message at a time; then the same
   transaction done raw with psycopg (lock the session row, next seq, insert, update, commit).
   Prints both rates, their ratio and the API's latency percentiles.
2. reads: GET ?last=20 on a session holding --read-rows messages, through the API and raw.
3. fact search: GET /api/v1/facts/search/?q=<question>&user_id=<user> over --facts facts spread
   across --fact-users users, one client; then the ranking query the API runs (captured from the
   selector), raw with psycopg, and its EXPLAIN (ANALYZE, BUFFERS).
4. context: GET /api/v1/sessions/{id}/context/?max_tokens=4000 on two sessions of one person
   (1,000 messages, and --context-rows), interleaved; p95 of each and their ratio.
5. profiles of one append, one read, one search and one context call, in-process (Django's
   WSGI handler, no HTTP): each DB statement's time and where the Python time goes (auth,
   validation, queries, serialization, context assembly).

It is a report: the exit code is 0 unless something broke. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import datetime as dt
import http.client
import io
import json
import math
import os
import platform
import pstats
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    from memoryhub.accounts.models import Tenant

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/memoryhub_bench"
TENANT_SLUG = "memoryhub-bench"

# The targets from the issue. Reported, never asserted.
TARGET_RATIO = 0.15  # API append rate / raw append rate, at least
TARGET_APPEND_P99_MS = 50.0  # API append p99, under
TARGET_READ_P95_MS = 10.0  # API last-20 read p95 at 1,000,000 rows, at most
TARGET_READ_ROWS = 1_000_000
TARGET_SEARCH_P95_MS = 20.0  # API user-scoped fact search p95 at 1,000,000 facts, at most
TARGET_SEARCH_FACTS = 1_000_000
TARGET_CONTEXT_P95_MS = 25.0  # API context call p95, both sessions, at most
TARGET_CONTEXT_RATIO = 1.3  # p95(1,000,000-message session) / p95(1,000-message session), at most
TARGET_CONTEXT_ROWS = 1_000_000
CONTEXT_SMALL_ROWS = 1_000  # the short session the long one is compared with
CONTEXT_MAX_TOKENS = 4_000

SIZES = {
    # name: (appends per client, read rows, reads)
    "default": (300, 100_000, 300),
    "big": (1_000, 1_000_000, 1_000),
}
FACT_SIZES = {
    # name: (facts, users they belong to, searches); ~100 facts per user in both
    "default": (100_000, 1_000, 300),
    "big": (1_000_000, 10_000, 1_000),
}
CONTEXT_SIZES = {
    # name: (messages in the long session, timed calls per session)
    "default": (100_000, 300),
    "big": (1_000_000, 1_000),
}
# Summarization and extraction on vs off (issue 4): p99(on) / p99(off), at most.
TARGET_LLM_P99_RATIO = 1.2
LLM_TENANTS = {"off": "memoryhub-bench-llm-off", "on": "memoryhub-bench-llm-on"}
# Alternated, so both modes see the same machine; --appends per client split over each mode's.
LLM_ROUNDS = ("off", "on") * 3
# Cleanup while appending (issue 5): appenders' p99 during the cleanup / without it, at most.
TARGET_CLEANUP_P99_RATIO = 2.0
CLEANUP_TENANT = "memoryhub-bench-retention"
CLEANUP_RETENTION_DAYS = 90
CLEANUP_AGE_DAYS = 200  # the expired messages' age (the newest: 200 days - rows seconds)
CLEANUP_HOLDERS = 4  # live sessions holding the expired messages
CLEANUP_SIZES = {
    # name: (expired messages, seconds of appends without the cleanup)
    "default": (100_000, 10),
    "big": (1_000_000, 20),
}
# The Celery broker the bench's processes enqueue to: REDIS_URL's server with this database, or
# (no REDIS_URL) kombu's filesystem transport in a temporary folder. No worker consumes it; the
# queue is emptied at the end.
BENCH_REDIS_DB = 12
CELERY_QUEUE = "celery"
PARTS = ("appends", "reads", "facts", "context", "llm", "cleanup")  # what --only chooses from


class BenchError(Exception):
    """Something broke (not: a target was missed). Printed without a traceback."""


# --- small helpers ------------------------------------------------------------------------------


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile of `values` (seconds in, seconds out)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Latency:
    count: int
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        return cls(
            count=len(seconds),
            mean_ms=1000 * sum(seconds) / len(seconds) if seconds else math.nan,
            p50_ms=1000 * percentile(seconds, 50),
            p95_ms=1000 * percentile(seconds, 95),
            p99_ms=1000 * percentile(seconds, 99),
            max_ms=1000 * max(seconds) if seconds else math.nan,
        )

    def line(self) -> str:
        return (
            f"p50 {self.p50_ms:6.2f} ms   p95 {self.p95_ms:6.2f} ms   p99 {self.p99_ms:6.2f} ms"
            f"   max {self.max_ms:6.2f} ms   mean {self.mean_ms:6.2f} ms"
        )


def mark(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 94 - len(title)), flush=True)


def say(text: str = "") -> None:
    print(text, flush=True)


def message_content(client: int, index: int) -> str:
    # ~170 characters, like a short chat turn; identical for the API and the raw runs.
    return (
        f"Benchmark message {index} from client {client}: could you remind me what we decided "
        "about the deployment window on Thursday, and who is on call for the database?"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def database_name(url: str) -> str:
    name = urlsplit(url).path.lstrip("/")
    if not name:
        raise BenchError(f"--database-url {url!r} names no database.")
    return name


# --- configuration ------------------------------------------------------------------------------


@dataclass
class Config:
    database_url: str
    clients: int
    appends: int
    warmup: int
    read_rows: int
    reads: int
    facts: int
    fact_users: int
    searches: int
    context_rows: int
    context_calls: int
    llm_reset_every: int
    cleanup_rows: int
    cleanup_seconds: float
    only: tuple[str, ...]  # the parts to run, in PARTS order
    workers: int
    worker_class: str
    threads: int
    profile: bool
    profile_requests: int
    profile_out: Path | None
    save: bool
    big: bool


def parse_args(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        description="Benchmark MemoryHub's append and read paths against raw psycopg.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL),
        help="PostgreSQL database to use (created if missing; env BENCH_DATABASE_URL).",
    )
    parser.add_argument(
        "--big",
        action="store_true",
        help=f"Big sizes: {SIZES['big'][0]} appends per client, a "
        f"{SIZES['big'][1]:,}-message session, {SIZES['big'][2]} reads, "
        f"{FACT_SIZES['big'][0]:,} facts across {FACT_SIZES['big'][1]:,} users, "
        f"{FACT_SIZES['big'][2]} searches.",
    )
    parser.add_argument("--clients", type=int, default=4, help="Concurrent append clients.")
    parser.add_argument(
        "--appends",
        type=int,
        default=None,
        help=f"Timed appends per client (default {SIZES['default'][0]}, --big {SIZES['big'][0]}).",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=50,
        help="Untimed appends per client first (fewer leaves cold-worker outliers in the p99).",
    )
    parser.add_argument(
        "--read-rows",
        type=int,
        default=None,
        help=f"Messages in the read session (default {SIZES['default'][1]:,}, "
        f"--big {SIZES['big'][1]:,}).",
    )
    parser.add_argument(
        "--reads",
        type=int,
        default=None,
        help=f"Timed GET ?last=20 reads (default {SIZES['default'][2]}, --big {SIZES['big'][2]}).",
    )
    parser.add_argument(
        "--facts",
        type=int,
        default=None,
        help=f"Facts to search (default {FACT_SIZES['default'][0]:,}, "
        f"--big {FACT_SIZES['big'][0]:,}).",
    )
    parser.add_argument(
        "--fact-users",
        type=int,
        default=None,
        help=f"Users the facts belong to (default {FACT_SIZES['default'][1]:,}, "
        f"--big {FACT_SIZES['big'][1]:,}).",
    )
    parser.add_argument(
        "--searches",
        type=int,
        default=None,
        help=f"Timed fact searches (default {FACT_SIZES['default'][2]}, "
        f"--big {FACT_SIZES['big'][2]}).",
    )
    parser.add_argument(
        "--context-rows",
        type=int,
        default=None,
        help="Messages in the long context session, compared with a "
        f"{CONTEXT_SMALL_ROWS:,}-message one (default {CONTEXT_SIZES['default'][0]:,}, "
        f"--big {CONTEXT_SIZES['big'][0]:,}).",
    )
    parser.add_argument(
        "--context-calls",
        type=int,
        default=None,
        help=f"Timed context calls per session (default {CONTEXT_SIZES['default'][1]}, "
        f"--big {CONTEXT_SIZES['big'][1]}).",
    )
    parser.add_argument(
        "--llm-reset-every",
        type=int,
        default=1,
        help="llm part: clear the sessions' summary and extraction requests (as a finished task "
        "does) after every N-th append; 1 makes every append request a summary and every "
        "assistant reply an extraction (the worst case).",
    )
    parser.add_argument(
        "--cleanup-rows",
        type=int,
        default=None,
        help="Expired messages the cleanup part deletes (default "
        f"{CLEANUP_SIZES['default'][0]:,}, --big {CLEANUP_SIZES['big'][0]:,}).",
    )
    parser.add_argument(
        "--cleanup-seconds",
        type=float,
        default=None,
        help="Seconds the cleanup part's appenders run without the cleanup, for their baseline "
        f"p99 (default {CLEANUP_SIZES['default'][1]}, --big {CLEANUP_SIZES['big'][1]}).",
    )
    parser.add_argument(
        "--only",
        default=",".join(PARTS),
        help=f"Comma-separated parts to run, of: {', '.join(PARTS)}.",
    )
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers.")
    parser.add_argument(
        "--worker-class", default="sync", help="gunicorn worker class (sync, gthread)."
    )
    parser.add_argument("--threads", type=int, default=1, help="gunicorn threads per worker.")
    parser.add_argument("--no-profile", action="store_true", help="Skip the in-process profiles.")
    parser.add_argument(
        "--profile-requests",
        type=int,
        default=300,
        help="Requests to time, and as many to profile, for each in-process profile.",
    )
    parser.add_argument(
        "--profile-out",
        type=Path,
        default=None,
        help="Also write the raw cProfile data here (read it with: python -m pstats FILE).",
    )
    parser.add_argument(
        "--no-save", action="store_true", help="Do not write bench/results/<time>.json."
    )
    args = parser.parse_args(argv)
    size = SIZES["big" if args.big else "default"]
    fact_size = FACT_SIZES["big" if args.big else "default"]
    context_size = CONTEXT_SIZES["big" if args.big else "default"]
    cleanup_size = CLEANUP_SIZES["big" if args.big else "default"]
    only = {part.strip() for part in args.only.split(",") if part.strip()}
    if not only or only - set(PARTS):
        parser.error(f"--only takes a comma-separated list of: {', '.join(PARTS)}")
    config = Config(
        database_url=args.database_url,
        clients=args.clients,
        appends=args.appends if args.appends is not None else size[0],
        warmup=args.warmup,
        read_rows=args.read_rows if args.read_rows is not None else size[1],
        reads=args.reads if args.reads is not None else size[2],
        facts=args.facts if args.facts is not None else fact_size[0],
        fact_users=args.fact_users if args.fact_users is not None else fact_size[1],
        searches=args.searches if args.searches is not None else fact_size[2],
        context_rows=args.context_rows if args.context_rows is not None else context_size[0],
        context_calls=args.context_calls if args.context_calls is not None else context_size[1],
        llm_reset_every=args.llm_reset_every,
        cleanup_rows=args.cleanup_rows if args.cleanup_rows is not None else cleanup_size[0],
        cleanup_seconds=(
            args.cleanup_seconds if args.cleanup_seconds is not None else cleanup_size[1]
        ),
        only=tuple(part for part in PARTS if part in only),
        workers=args.workers,
        worker_class=args.worker_class,
        threads=args.threads,
        profile=not args.no_profile,
        profile_requests=args.profile_requests,
        profile_out=args.profile_out,
        save=not args.no_save,
        big=args.big,
    )
    for name in (
        "clients",
        "appends",
        "read_rows",
        "reads",
        "facts",
        "fact_users",
        "searches",
        "context_calls",
        "llm_reset_every",
        "cleanup_rows",
        "cleanup_seconds",
        "workers",
        "threads",
        "profile_requests",
    ):
        if getattr(config, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if config.read_rows < 21:
        parser.error("--read-rows must be at least 21 (the read asks for the last 20)")
    if config.facts < config.fact_users:
        parser.error("--facts must be at least --fact-users (every user holds facts)")
    if config.context_rows < 100:
        parser.error("--context-rows must be at least 100")
    return config


# --- PostgreSQL and Django setup ----------------------------------------------------------------


def check_postgres_and_create_database(url: str) -> dict[str, str]:
    """Fail clearly if PostgreSQL is unreachable; create the bench database if missing."""
    import psycopg
    from psycopg import sql

    name = database_name(url)
    maintenance = with_database(url, "postgres")
    parts = urlsplit(url)
    try:
        conn = psycopg.connect(maintenance, connect_timeout=5, autocommit=True)
    except psycopg.OperationalError as error:
        raise BenchError(
            f"cannot reach PostgreSQL at {parts.hostname}:{parts.port or 5432} "
            f"as {parts.username or '(default user)'}:\n  {str(error).strip()}\n"
            "Start PostgreSQL, or point --database-url / BENCH_DATABASE_URL at a server where "
            "this user may create databases."
        ) from None
    with conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            say(f"creating database {name!r}")
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        info: dict[str, str] = {}
        for setting in ("server_version", "fsync", "synchronous_commit", "shared_buffers"):
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(setting))).fetchone()
            info[setting] = str(row[0]) if row else "?"
    return info


def django_environment(database_url: str) -> dict[str, str]:
    env = os.environ.copy()
    env.pop("GUNICORN_CMD_ARGS", None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
            "DATABASE_URL": database_url,
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": "bench-" + secrets.token_urlsafe(50),
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
            # WhiteNoise warns once per worker that staticfiles/ is missing; the API needs none.
            "PYTHONWARNINGS": "ignore:No directory at",
            # Enqueued tasks really go to the broker (a summary or extraction request's
            # `delay()` after commit), never run in the request.
            "CELERY_TASK_ALWAYS_EAGER": "false",
        }
    )
    env.pop("LLM_BASE_URL", None)  # offline, unless a part says otherwise (llm)
    redis_url = env.get("REDIS_URL", "")
    if redis_url:
        # The same server, a database of the bench's own: its queue is emptied at the end.
        parts = urlsplit(redis_url)
        env["REDIS_URL"] = urlunsplit(
            (parts.scheme, parts.netloc, f"/{BENCH_REDIS_DB}", parts.query, parts.fragment)
        )
    else:
        # The filesystem broker in a folder of its own, not the project's .celery/ (a worker
        # started by `make run` would take the bench's tasks); removed at the end.
        env["CELERY_DATA_DIR"] = tempfile.mkdtemp(prefix="bench-celery-")
    return env


def broker_description(env: dict[str, str]) -> str:
    if env.get("REDIS_URL"):
        parts = urlsplit(env["REDIS_URL"])
        return f"Redis {parts.hostname}:{parts.port or 6379} database {BENCH_REDIS_DB}"
    return f"kombu filesystem in {env['CELERY_DATA_DIR']}"


def broker_queue_size() -> int:
    """Messages waiting in the bench broker's Celery queue (nothing consumes them)."""
    from memoryhub.celery import app

    with app.connection_for_write() as conn:
        declared = conn.default_channel.queue_declare(queue=CELERY_QUEUE, passive=False)
        return int(declared.message_count)


def broker_purge(env: dict[str, str]) -> int:
    """Empty the bench broker's queue (Redis) or remove its folder (filesystem)."""
    import shutil

    if not env.get("REDIS_URL"):
        shutil.rmtree(env["CELERY_DATA_DIR"], ignore_errors=True)
        return 0
    from memoryhub.celery import app

    with app.connection_for_write() as conn:
        return int(conn.default_channel.queue_purge(queue=CELERY_QUEUE) or 0)


def migrate(env: dict[str, str]) -> None:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"manage.py migrate failed:\n{done.stdout}\n{done.stderr}")
    say(f"migrations applied ({time.perf_counter() - started:.1f} s)")


def setup_django(env: dict[str, str]) -> None:
    os.environ.update(env)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        import django
    except ImportError:
        raise BenchError(
            "Django is not importable: run with the project's venv (.venv/bin/python)."
        ) from None
    # WhiteNoise warns that staticfiles/ is missing (no collectstatic); the API needs none.
    warnings.filterwarnings("ignore", message="No directory at")
    django.setup()


def bench_tenant() -> Tenant:
    from memoryhub.accounts.models import Tenant
    from memoryhub.accounts.services import tenant_create

    tenant = Tenant.objects.filter(slug=TENANT_SLUG).first()
    return tenant or tenant_create(slug=TENANT_SLUG, name="Benchmark")


def create_api_key(tenant: Tenant) -> tuple[Any, str]:
    from memoryhub.accounts.services import api_key_create

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    return api_key_create(tenant=tenant, name=f"bench {stamp}", scopes=["read", "write"])


@dataclass
class ReadSession:
    id: str
    rows: int
    table_rows: int
    loaded_seconds: float | None  # None: reused from an earlier run


def ensure_read_session(*, tenant: Tenant, database_url: str, rows: int) -> ReadSession:
    """A session holding exactly `rows` messages, bulk-loaded once and reused afterwards."""
    import psycopg

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
    with psycopg.connect(database_url) as conn:
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


# --- the fact set -------------------------------------------------------------------------------

# Facts are sentences "<subject> <verb> <object> <context>." with each part drawn from 50 words
# or phrases, so a term matches about 2% of the facts (a few, like "music", more): a question's
# OR of 2-4 terms then matches some 5-10% of a user's facts, as a real store's would.
FACT_SUBJECTS = [
    "She", "He", "Her brother", "His sister", "Her mother", "His father", "Her daughter",
    "His son", "Her husband", "His wife", "Her partner", "His boss", "Her manager",
    "His colleague", "Her best friend", "His neighbour", "Her grandmother", "His grandfather",
    "Her cousin", "His uncle", "Her aunt", "His roommate", "Her teacher", "His doctor",
    "Her dentist", "His landlord", "Her coach", "His mentor", "Her team", "His family",
    "Her dog", "His cat", "Her kids", "His parents", "Her friend Anna", "His friend Tom",
    "Her nephew", "His niece", "Her girlfriend", "His boyfriend", "Her client", "His assistant",
    "Her flatmate", "His twin", "Her stepfather", "His godmother", "Her trainer",
    "His therapist", "Her bandmate", "His classmate",
]  # fmt: skip
FACT_VERBS = [
    "likes", "loves", "hates", "prefers", "dislikes", "enjoys", "avoids", "is allergic to",
    "wants to try", "recommended", "bought", "ordered", "cooks", "drinks", "plays", "collects",
    "listens to", "watches", "reads about", "talks about", "dreams about", "is afraid of",
    "is learning", "teaches", "studies", "writes about", "sells", "rents", "borrowed", "lost",
    "forgot", "misses", "booked", "cancelled", "visited", "photographed", "painted", "repaired",
    "cleaned", "shared", "gave away", "received", "asked about", "complained about",
    "laughed about", "argued about", "saved money for", "paid for", "signed up for", "gave up",
]  # fmt: skip
# (object, the tag a fact about it gets)
FACT_OBJECTS = [
    ("green tea", "food"), ("black coffee", "food"), ("dark chocolate", "food"),
    ("Italian food", "food"), ("sushi", "food"), ("spicy curry", "food"), ("vegan pizza", "food"),
    ("red wine", "food"), ("craft beer", "food"), ("oat milk", "food"), ("peanuts", "health"),
    ("shellfish", "health"), ("gluten", "health"), ("strawberries", "food"), ("cheese", "food"),
    ("jazz music", "music"), ("classical music", "music"), ("heavy metal", "music"),
    ("the piano", "music"), ("the guitar", "music"), ("dark mode", "preference"),
    ("early meetings", "work"), ("the night shift", "work"), ("remote work", "work"),
    ("the new laptop", "work"), ("Python programming", "work"), ("electric cars", "travel"),
    ("mountain bikes", "sport"), ("hiking boots", "sport"), ("yoga classes", "sport"),
    ("swimming lessons", "sport"), ("tennis", "sport"), ("football", "sport"),
    ("basketball", "sport"), ("chess", "hobby"), ("board games", "hobby"),
    ("video games", "hobby"), ("science fiction", "books"), ("crime novels", "books"),
    ("poetry", "books"), ("horror movies", "movies"), ("cooking shows", "movies"),
    ("Spanish", "language"), ("Japanese", "language"), ("gardening", "hobby"),
    ("houseplants", "hobby"), ("flying", "travel"), ("crowded trains", "travel"),
    ("the beach", "travel"), ("ski trips", "travel"),
]  # fmt: skip
FACT_CONTEXTS = [
    "on weekends", "every morning", "after work", "since 2019", "at the office",
    "during holidays", "in the summer", "in winter", "with friends", "on her own",
    "twice a week", "when stressed", "on Fridays", "before bed", "at home", "in Berlin",
    "in London", "since childhood", "this year", "last month", "at lunch", "on Sundays",
    "with the kids", "at the gym", "on trips abroad", "at parties", "in the evening",
    "on the train", "at Christmas", "on birthdays", "every day", "once a month", "in spring",
    "in autumn", "at university", "during the pandemic", "since the move", "after the surgery",
    "for years", "these days", "at the cafe", "with colleagues", "in Paris", "in Tokyo",
    "near the lake", "on rainy days", "at night", "when travelling", "with her partner",
    "with his partner",
]  # fmt: skip
# What a bot asks before answering: natural questions over the same words (stopwords and all).
FACT_QUESTIONS = [
    "does she like green tea?",
    "what music does he listen to?",
    "is her brother allergic to peanuts?",
    "what does his sister cook on weekends?",
    "which sports does she play?",
    "does he prefer dark mode?",
    "what did her mother buy last month?",
    "where does his family travel in the summer?",
    "what is she afraid of?",
    "does his boss like early meetings?",
    "what games does her son play?",
    "what wine does he drink?",
    "which language is she learning?",
    "what does her partner think about remote work?",
    "is he vegan?",
    "does she enjoy hiking on weekends?",
    "what books does he read before bed?",
    "what food is her daughter allergic to?",
    "when does his colleague go swimming?",
    "does her dog like cheese?",
    "what did he cancel this year?",
]


@dataclass
class FactSet:
    rows: int
    users: int
    user_ids: list[str]  # external ids, index i = user i + 1
    table_rows: int
    loaded_seconds: float | None  # None: reused from an earlier run


def fact_user_prefix(rows: int, users: int) -> str:
    return f"bench:facts-{rows}-{users}:"


FACT_LOAD = """
INSERT INTO facts_app_fact
    (tenant_id, end_user_id, content, content_hash, search_text, tags, metadata,
     source_session_id, source_message_ids, created_at, updated_at, valid_until,
     superseded_by_id)
SELECT %(tenant)s, w.uid[u.n], f.content, md5(f.content || g.g),
       -- what facts_app.services.facts.fact_search_text builds: content, tags, the user's id
       f.content || E'\\n' || f.tag_text || E'\\n' || w.ext[u.n],
       f.tags, '{}'::jsonb, NULL, '[]'::jsonb,
       now() - make_interval(secs => (%(rows)s - g.g) * 30),
       now() - make_interval(secs => (%(rows)s - g.g) * 30),
       CASE WHEN p.v <= 2 THEN now() - make_interval(days => p.v::int)  -- 2%% expired
            WHEN p.v <= 5 THEN now() + make_interval(days => 30 * p.v::int)  -- 3%% expire later
       END,
       NULL
FROM (SELECT %(uids)s::bigint[] AS uid, %(exts)s::text[] AS ext, %(subjects)s::text[] AS s,
             %(verbs)s::text[] AS vb, %(objects)s::text[] AS o, %(tagged)s::text[] AS t,
             %(contexts)s::text[] AS c) AS w
CROSS JOIN generate_series(1, %(rows)s) AS g(g)
-- users take turns, so a user's facts are spread over the table as if they came in over time
CROSS JOIN LATERAL (SELECT 1 + (g.g - 1) %% %(users)s AS n) AS u
CROSS JOIN LATERAL (
    SELECT 1 + (hashint8extended(g.g, 1) & 2147483647) %% 50 AS s,
           1 + (hashint8extended(g.g, 2) & 2147483647) %% 50 AS vb,
           1 + (hashint8extended(g.g, 3) & 2147483647) %% 50 AS o,
           1 + (hashint8extended(g.g, 4) & 2147483647) %% 50 AS c,
           1 + (hashint8extended(g.g, 5) & 2147483647) %% 100 AS v,
           (hashint8extended(g.g, 6) & 2147483647) %% 10 = 0 AS important  -- 10%% tagged important
) AS p
CROSS JOIN LATERAL (
    SELECT w.s[p.s] || ' ' || w.vb[p.vb] || ' ' || w.o[p.o] || ' ' || w.c[p.c] || '.' AS content,
           CASE WHEN p.important THEN jsonb_build_array(w.t[p.o], 'important')
                ELSE jsonb_build_array(w.t[p.o]) END AS tags,
           w.t[p.o] || CASE WHEN p.important THEN ' important' ELSE '' END AS tag_text
) AS f
"""


def ensure_fact_set(*, tenant: Tenant, database_url: str, rows: int, users: int) -> FactSet:
    """`rows` facts spread evenly over `users` end users of the tenant, bulk-loaded once and
    reused afterwards (found by the users' external-id prefix and the count of their facts)."""
    import psycopg

    prefix = fact_user_prefix(rows, users)
    width = len(str(users))
    external_ids = [f"{prefix}{n:0{width}d}" for n in range(1, users + 1)]
    with psycopg.connect(database_url) as conn:
        found_users, found_facts = conn.execute(
            "SELECT count(DISTINCT u.id), count(f.id) FROM accounts_enduser u "
            "LEFT JOIN facts_app_fact f ON f.end_user_id = u.id "
            "WHERE u.tenant_id = %s AND u.external_id LIKE %s",
            (tenant.pk, prefix + "%"),
        ).fetchone() or (0, 0)
        loaded: float | None = None
        if (found_users, found_facts) != (users, rows):
            say(
                f"loading {rows:,} facts across {users:,} users "
                "(once; later runs reuse them; a minute or more per million)"
            )
            started = time.perf_counter()
            conn.execute(
                "DELETE FROM facts_app_fact WHERE end_user_id IN (SELECT id FROM accounts_enduser"
                " WHERE tenant_id = %s AND external_id LIKE %s)",
                (tenant.pk, prefix + "%"),
            )
            conn.execute(
                "INSERT INTO accounts_enduser (tenant_id, external_id, display_name, metadata, "
                "created_at) SELECT %s, e, '', '{}'::jsonb, now() FROM unnest(%s::text[]) AS e "
                "ON CONFLICT (tenant_id, external_id) DO NOTHING",
                (tenant.pk, external_ids),
            )
            by_external: dict[str, int] = dict(
                conn.execute(
                    "SELECT external_id, id FROM accounts_enduser "
                    "WHERE tenant_id = %s AND external_id = ANY(%s)",
                    (tenant.pk, external_ids),
                ).fetchall()
            )
            conn.execute(
                FACT_LOAD,
                {
                    "tenant": tenant.pk,
                    "rows": rows,
                    "users": users,
                    "uids": [by_external[e] for e in external_ids],
                    "exts": external_ids,
                    "subjects": FACT_SUBJECTS,
                    "verbs": FACT_VERBS,
                    "objects": [name for name, _ in FACT_OBJECTS],
                    "tagged": [tag for _, tag in FACT_OBJECTS],
                    "contexts": FACT_CONTEXTS,
                },
            )
            conn.commit()
            # VACUUM, not only ANALYZE: it also merges the GIN index's pending list (a bulk
            # insert leaves up to gin_pending_list_limit of entries every search would scan)
            # and sets the visibility map, as autovacuum would on a live table.
            conn.autocommit = True
            conn.execute("VACUUM ANALYZE facts_app_fact")
            conn.execute("ANALYZE accounts_enduser")
            loaded = time.perf_counter() - started
        total = conn.execute("SELECT count(*) FROM facts_app_fact").fetchone()
    return FactSet(
        rows=rows,
        users=users,
        user_ids=external_ids,
        table_rows=int(total[0]) if total else 0,
        loaded_seconds=loaded,
    )


# --- gunicorn -----------------------------------------------------------------------------------


class Gunicorn:
    """gunicorn in its own process group; stopped (group-wide) on exit, Ctrl-C included."""

    def __init__(self, *, env: dict[str, str], workers: int, worker_class: str, threads: int):
        self.env = env
        self.workers = workers
        self.worker_class = worker_class
        self.threads = threads
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in stop())
            prefix="bench-gunicorn-", suffix=".log", delete=False
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> None:
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "memoryhub.wsgi:application",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--workers",
            str(self.workers),
            "--worker-class",
            self.worker_class,
            "--threads",
            str(self.threads),
            "--log-level",
            "warning",
            "--error-logfile",
            "-",
            "--timeout",
            "60",
        ]  # no --access-logfile: gunicorn then writes no access log
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90  # a busy machine slows the workers' imports
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"gunicorn exited with {self.process.returncode}:\n{self.tail()}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
                conn.close()
            time.sleep(0.2)
        raise BenchError(f"gunicorn did not answer /healthz within 90 s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        self.log.flush()
        text = Path(self.log.name).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        self.process = None
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


# --- HTTP client --------------------------------------------------------------------------------


class ApiClient:
    """One keep-alive http.client connection (stdlib only). gunicorn's sync workers close the
    connection after each response; http.client then reconnects on the next request."""

    def __init__(self, port: int, secret: str) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {secret}", "Accept": "application/json"}
        self.json_headers = {**self.headers, "Content-Type": "application/json"}

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = self.json_headers if body is not None else self.headers
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=body, headers=headers)
                response = self.conn.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # Only a kept-alive connection the server had already closed gets here.
                self.conn.close()
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def expect(self, method: str, path: str, body: Any, status: int) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        got, payload = self.request(method, path, data)
        if got != status:
            raise BenchError(
                f"{method} {path} answered {got}, expected {status}: {payload[:300]!r}"
            )
        return json.loads(payload)

    def close(self) -> None:
        self.conn.close()


# --- concurrent clients -------------------------------------------------------------------------


Worker = Callable[[threading.Barrier], list[float]]
# Set when a client fails or the run is interrupted: the other clients stop at their next request.
STOP = threading.Event()


def check_stop() -> None:
    if STOP.is_set():
        raise BenchError("stopped")


@dataclass
class ClientsOutcome:
    wall: float  # seconds from the barrier to the last client's end
    latencies: list[list[float]]  # per client
    cpu_before: CpuSample | None
    cpu_after: CpuSample | None


def run_clients(workers: list[Worker], server_group: int | None = None) -> ClientsOutcome:
    """Run each worker in its own thread. A worker warms up, waits on the barrier, then does its
    timed part and returns its latencies. CPU use is sampled around the timed part."""
    barrier = threading.Barrier(len(workers) + 1)
    results: list[list[float]] = [[] for _ in workers]
    errors: list[BaseException] = []

    def target(index: int, worker: Worker) -> None:
        try:
            results[index] = worker(barrier)
        except BaseException as error:
            errors.append(error)
            STOP.set()
            barrier.abort()

    threads = [
        threading.Thread(target=target, args=(i, w), name=f"client-{i}", daemon=True)
        for i, w in enumerate(workers)
    ]
    STOP.clear()
    for thread in threads:
        thread.start()
    try:
        try:
            barrier.wait(timeout=300)
        except threading.BrokenBarrierError:
            STOP.set()
            for thread in threads:
                thread.join(timeout=30)
            if errors:
                raise errors[0] from None
            raise BenchError("clients did not finish their warm-up within 300 s") from None
        started = time.perf_counter()
        before = cpu_sample(server_group)
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
        after = cpu_sample(server_group)
    except BaseException:  # Ctrl-C included: let the clients stop before cleaning up
        STOP.set()
        for thread in threads:
            thread.join(timeout=10)
        raise
    if errors:
        raise errors[0]
    return ClientsOutcome(wall, results, before, after)


@dataclass
class AppendResult:
    appends: int
    seconds: float
    rate: float
    latency: Latency
    cpu: dict[str, float] | None  # CPU ms per append by owner (see cpu_per_request)


def append_result(outcome: ClientsOutcome) -> AppendResult:
    latencies = [value for client in outcome.latencies for value in client]
    return AppendResult(
        appends=len(latencies),
        seconds=outcome.wall,
        rate=len(latencies) / outcome.wall,
        latency=Latency.of(latencies),
        cpu=cpu_per_request(outcome.cpu_before, outcome.cpu_after, len(latencies)),
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
        conn = psycopg.connect(database_url, autocommit=True)
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
    import psycopg

    with psycopg.connect(database_url) as conn:
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


# --- reads --------------------------------------------------------------------------------------


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
    import psycopg

    session = uuid.UUID(session_id)
    latencies: list[float] = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        for _ in range(20):
            rows = conn.execute(RAW_READ, (tenant_id, session)).fetchall()
        if len(rows) != 20:
            raise BenchError(f"raw read returned {len(rows)} rows")
        for _ in range(count):
            started = time.perf_counter()
            conn.execute(RAW_READ, (tenant_id, session)).fetchall()
            latencies.append(time.perf_counter() - started)
    return latencies


# --- fact search --------------------------------------------------------------------------------

# Markers for the parts of the captured search SQL's parameters that change per search.
USER, TSQUERY, NOW = "<user>", "<tsquery>", "<now>"
SEARCH_TOP_K = 10


@dataclass
class SearchStatement:
    """The ranking query the API runs, as Django sends it: SQL with %s and its parameters, the
    per-search ones replaced by USER, TSQUERY and NOW."""

    sql: str
    params: list[Any]

    def bind(self, user_id: str, tsquery: str) -> list[Any]:
        now = dt.datetime.now(dt.UTC)
        values = {USER: user_id, TSQUERY: tsquery, NOW: now}
        return [
            values.get(value, value) if isinstance(value, str) else value for value in self.params
        ]


def tsquery_of(question: str) -> str:
    from memoryhub.core.search import search_terms

    return " | ".join(search_terms(question))  # what FullTextRanker.rank builds


def capture_search_statement(*, tenant: Tenant, user_id: str, question: str) -> SearchStatement:
    """Run the selector once in-process and keep the ranking query it sends, so the raw run
    executes exactly the API's SQL (filters, @@ match, ts_rank_cd, ORDER BY, LIMIT)."""
    from django.db import connection

    from facts_app.selectors.facts import FactFilters, fact_search

    captured: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        fact_search(
            tenant=tenant, query=question, filters=FactFilters(user_id=user_id), top_k=SEARCH_TOP_K
        )
    ranking = [(sql, params) for sql, params in captured if "ts_rank_cd" in sql]
    if len(ranking) != 1:
        raise BenchError(f"expected one ranking query from fact_search, got: {captured!r:.500}")
    sql, raw_params = ranking[0]
    tsquery = tsquery_of(question)
    params: list[Any] = []
    for value in raw_params or ():
        if value == user_id:
            params.append(USER)
        elif value == tsquery:
            params.append(TSQUERY)
        elif isinstance(value, dt.datetime):
            params.append(NOW)
        elif value == tenant.pk:
            params.append(value)
        else:
            raise BenchError(f"unexpected parameter {value!r} in the search SQL: {sql}")
    if "%" in sql.replace("%s", "") or f"LIMIT {SEARCH_TOP_K}" not in sql:
        raise BenchError(f"the search SQL is not what the benchmark expects: {sql}")
    return SearchStatement(sql=sql, params=params)


def search_pairs(fact_set: FactSet, count: int, seed: int) -> list[tuple[str, str]]:
    """(user, question) pairs: a random user of the set, a random question."""
    rng = random.Random(seed)
    return [(rng.choice(fact_set.user_ids), rng.choice(FACT_QUESTIONS)) for _ in range(count)]


def search_path(user_id: str, question: str) -> str:
    query = urlencode({"q": question, "user_id": user_id, "top_k": SEARCH_TOP_K})
    return f"/api/v1/facts/search/?{query}"


def api_searches(
    *, port: int, secret: str, pairs: list[tuple[str, str]], warmup: list[tuple[str, str]]
) -> tuple[list[float], list[list[int]]]:
    """One client, sequentially; the latencies and, per search, the ids of the facts found."""
    api = ApiClient(port, secret)
    for user_id, question in warmup:
        api.expect("GET", search_path(user_id, question), None, 200)
    paths = [search_path(user_id, question) for user_id, question in pairs]
    latencies: list[float] = []
    payloads: list[bytes] = []
    for path in paths:
        started = time.perf_counter()
        status, payload = api.request("GET", path)
        latencies.append(time.perf_counter() - started)
        if status != 200:
            raise BenchError(f"search answered {status}: {payload[:300]!r}")
        payloads.append(payload)
    api.close()
    found = [[hit["fact"]["id"] for hit in json.loads(p)["results"]] for p in payloads]
    return latencies, found


def raw_searches(
    *, conn: Any, statement: SearchStatement, pairs: list[tuple[str, str]]
) -> tuple[list[float], list[list[int]]]:
    """The API's ranking query with psycopg, sent as Django sends it: values inlined
    (client-side binding), so PostgreSQL plans each search for its user and words. (Not
    psycopg's default server-side binding: it prepares the statement after 5 runs, PostgreSQL
    then settles on a generic plan, and for this query that plan ANDs the GIN index's matches
    over the whole table with the user's rows, several times slower than the API's plan.)"""
    import psycopg

    bound = [(user_id, tsquery_of(question)) for user_id, question in pairs]
    latencies: list[float] = []
    found: list[list[int]] = []
    cursor = psycopg.ClientCursor(conn)
    for user_id, tsquery in bound:
        started = time.perf_counter()
        rows = cursor.execute(statement.sql, statement.bind(user_id, tsquery)).fetchall()
        latencies.append(time.perf_counter() - started)
        found.append([row[0] for row in rows])
    return latencies, found


def compact_plan_line(line: str) -> str:
    line = re.sub(r"\(cost=[\d.]+\.\.[\d.]+ rows=(\d+) width=\d+\)", r"(est. rows=\1)", line)
    line = re.sub(
        r"\(actual time=[\d.]+\.\.([\d.]+) rows=(\d+) loops=(\d+)\)",
        r"(actual \1 ms, rows=\2, loops=\3)",
        line,
    )
    line = re.sub(r"'[\d-]+ [\d:.]+\+00'::timestamp with time zone", "'<now>'", line)
    return line if len(line) <= 220 else line[:217] + "..."


def explain_search(
    *, database_url: str, statement: SearchStatement, user_id: str, question: str
) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of one search, with the values inlined as Django sends them
    (client-side binding: the planner sees the user and the words). Run twice: the second,
    warm, is shown."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        cursor = psycopg.ClientCursor(conn)
        params = statement.bind(user_id, tsquery_of(question))
        for _ in range(2):
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement.sql, params)
            lines = [str(row[0]) for row in cursor.fetchall()]
    return [compact_plan_line(line) for line in lines]


def search_note(config: Config) -> str:
    if config.facts >= TARGET_SEARCH_FACTS:
        return ""
    return f"  (the target is set at {TARGET_SEARCH_FACTS:,} facts: --big)"


@dataclass
class SearchResult:
    api: Latency
    raw: Latency
    api_cpu: dict[str, float] | None
    raw_cpu: dict[str, float] | None
    hits_mean: float
    no_hits: int
    mismatches: int
    plan: list[str]


def bench_facts(setup: Setup, server: Gunicorn) -> SearchResult:
    import psycopg

    config = setup.config
    fact_set = setup.fact_set
    assert fact_set is not None
    section(
        f"Fact search: {fact_set.rows:,} facts across {fact_set.users:,} users, "
        f"GET /api/v1/facts/search/?q=...&user_id=...&top_k={SEARCH_TOP_K}, one client"
    )
    statement = setup.search_statement
    assert statement is not None
    pairs = search_pairs(fact_set, config.searches, seed=1)
    warmup = search_pairs(fact_set, 40, seed=2)
    # Closed after the CPU sample: an exited backend's CPU time is not counted.
    with psycopg.connect(config.database_url, autocommit=True) as conn:
        # An untimed pass over the same searches (and the warm-up's), so that both timed runs
        # find the same warm caches.
        raw_searches(conn=conn, statement=statement, pairs=warmup + pairs)
        before = cpu_sample(server.pid)
        api_seconds, api_found = api_searches(
            port=server.port, secret=setup.secret, pairs=pairs, warmup=warmup
        )
        after = cpu_sample(server.pid)
        api_cpu = cpu_per_request(before, after, len(pairs))
        before = cpu_sample(server.pid)
        raw_seconds, raw_found = raw_searches(conn=conn, statement=statement, pairs=pairs)
        after = cpu_sample(server.pid)
        raw_cpu = cpu_per_request(before, after, len(pairs))
    api, raw = Latency.of(api_seconds), Latency.of(raw_seconds)
    say(f"API  {api.line()}")
    say(f"     {cpu_line(api_cpu, 'search')}")
    say(f"raw  {raw.line()}")
    say(f"     {cpu_line(raw_cpu, 'search')}")
    mismatches = sum(1 for a, b in zip(api_found, raw_found, strict=True) if a != b)
    hits = [len(ids) for ids in api_found]
    hits_mean = sum(hits) / len(hits)
    no_hits = hits.count(0)
    if mismatches:
        say(f"check: WARNING: API and raw found different facts for {mismatches} of {len(pairs)}")
    else:
        say(
            f"check: API and raw found the same facts for all {len(pairs)} searches "
            f"({hits_mean:.1f} hits per search, {no_hits} without any)"
        )
    say(
        f"ratio API/raw {raw.p50_ms / api.p50_ms:.3f} (as rates: raw p50 / API p50; "
        f"API p95 = {api.p95_ms / raw.p95_ms:.1f} x raw p95)    API p95 {api.p95_ms:.2f} ms "
        f"(target <= {TARGET_SEARCH_P95_MS:.0f} ms)  {mark(api.p95_ms <= TARGET_SEARCH_P95_MS)}"
        + search_note(config)
    )
    say("     for scale: Zep's cloud reports 155 ms p95 for its memory search, mem0's paper 200 ms")
    say(
        "the ranking query, captured from facts_app.selectors.facts.fact_search (the API also "
        "looks up\nthe API key and the end user before it, and fetches the hits by id after it):"
    )
    say(textwrap.indent(textwrap.fill(" ".join(statement.sql.split()), 94), "  "))
    user_id, question = pairs[0]
    plan = explain_search(
        database_url=config.database_url, statement=statement, user_id=user_id, question=question
    )
    say(f"EXPLAIN (ANALYZE, BUFFERS), user {user_id}, q={question!r} -> {tsquery_of(question)!r}:")
    for line in plan:
        say(f"  {line}")
    return SearchResult(
        api=api,
        raw=raw,
        api_cpu=api_cpu,
        raw_cpu=raw_cpu,
        hits_mean=hits_mean,
        no_hits=no_hits,
        mismatches=mismatches,
        plan=plan,
    )


# --- context ------------------------------------------------------------------------------------

# A person-owned session's user turns ask things about the fact set's words; the assistant turns
# answer with a fact-like sentence. The content is a function of the distance from the newest
# message (k = rows - seq), so every context session ends with the same turns: its context
# differs only by how much history lies behind it.
CONTEXT_OPENERS = [
    "", "Quick question: ", "By the way, ", "Remind me, ", "Sorry to ask again, ",
    "Before I forget: ", "One more thing, ", "Hey! ",
]  # fmt: skip
CONTEXT_FOLLOW_UPS = [
    "Anything else you want me to keep in mind?",
    "I can set a reminder for that if you like.",
    "Let me know if that has changed.",
    "Should I add that to your notes?",
    "That came up last week as well.",
    "I'll take that into account next time.",
]
CONTEXT_LONG_TAIL = (
    " For context, here is what I have from our earlier conversations: the plans for the trip, "
    "the list of restaurants we talked about, who is coming to the party on Saturday, and the "
    "questions you wanted to ask the landlord about the heating."
)
CONTEXT_LOAD = """
INSERT INTO sessions_app_message
    (tenant_id, session_id, seq, role, content, name, tool_call_id, tool_calls, metadata,
     token_count, created_at)
SELECT %(tenant)s, %(session)s, g.g, m.role, m.content, '', '', NULL, '{}'::jsonb,
       greatest(1, length(m.content) / 4), now() - make_interval(secs => k.k * 20)
FROM (SELECT %(questions)s::text[] AS q, %(openers)s::text[] AS op, %(follow)s::text[] AS fu,
             %(subjects)s::text[] AS s, %(verbs)s::text[] AS vb, %(objects)s::text[] AS o,
             %(contexts)s::text[] AS c) AS w
CROSS JOIN generate_series(1, %(rows)s) AS g(g)
CROSS JOIN LATERAL (SELECT (%(rows)s - g.g)::bigint AS k) AS k  -- 0: the newest message
CROSS JOIN LATERAL (
    SELECT 1 + (hashint8extended(k.k, 11) & 2147483647) %% cardinality(w.q) AS q,
           1 + (hashint8extended(k.k, 12) & 2147483647) %% cardinality(w.op) AS op,
           1 + (hashint8extended(k.k, 13) & 2147483647) %% cardinality(w.fu) AS fu,
           1 + (hashint8extended(k.k, 14) & 2147483647) %% 50 AS s,
           1 + (hashint8extended(k.k, 15) & 2147483647) %% 50 AS vb,
           1 + (hashint8extended(k.k, 16) & 2147483647) %% 50 AS o,
           1 + (hashint8extended(k.k, 17) & 2147483647) %% 50 AS c,
           (hashint8extended(k.k, 18) & 2147483647) %% 5 = 0 AS long  -- 20%% are longer
) AS p
CROSS JOIN LATERAL (
    SELECT CASE WHEN k.k %% 2 = 0 THEN 'user' ELSE 'assistant' END AS role,
           CASE WHEN k.k %% 2 = 0
                THEN w.op[p.op] || w.q[p.q]
                     || CASE WHEN p.long THEN ' I am asking because of the plans for Saturday.'
                             ELSE '' END
                ELSE 'From what I remember, ' || lower(w.s[p.s]) || ' ' || w.vb[p.vb] || ' '
                     || w.o[p.o] || ' ' || w.c[p.c] || '. ' || w.fu[p.fu]
                     || CASE WHEN p.long THEN %(tail)s ELSE '' END
           END AS content
) AS m
"""
CONTEXT_USER_MEMORIES = [
    # (key, content, pinned)
    ("name", "Her name is Alex Morgan; she prefers to be called Alex.", True),
    ("timezone", "Lives in Berlin (Europe/Berlin); usually writes in the evening.", False),
    ("diet", "Vegetarian; allergic to peanuts and shellfish.", True),
    ("job", "Works as a data engineer at a logistics company, mostly remote.", False),
    ("family", "Has a brother (Tom) and a daughter (Mia, 7); her mother lives in Lyon.", False),
    ("preferences", "Likes short answers with bullet points; dislikes emojis.", False),
]
CONTEXT_TENANT_MEMORIES = [
    ("bench_reply_style", "Answer in the user's language; keep replies under 150 words.", True),
    ("bench_support_hours", "Human support is available Monday to Friday, 9:00-17:00 CET.", False),
]
CONTEXT_LONG_TERM_NOTE = """# About Alex
- Data engineer, remote; on call every fourth week (next: the week of the 14th).
- Training for a half marathon in the autumn; runs on Tuesdays, Thursdays and Sundays.
- Learning Japanese (lesson on Wednesdays); planning a trip to Tokyo next spring.
- Mother in Lyon: calls on Sundays; birthday in early March.
# Open threads
- Wants to compare two mountain bikes before the end of the month.
- Asked for a reminder to renew the passport (expires in August).
- Looking for a vegetarian restaurant for her brother's birthday dinner."""
CONTEXT_DAILY_NOTES = {
    # days before today: content
    0: "Asked about the deployment window on Thursday; on call this week.",
    1: "Booked the dentist for next Tuesday at 8:30.",
    3: "Mia's school trip is on Friday; needs a packed lunch (no peanuts).",
    6: "Started the new running plan: 3 x 5 km this week.",
}
CONTEXT_SUMMARY = (
    "Alex and the assistant have talked over many weeks about her family, her food preferences "
    "and allergies, her running plan and the trip to Tokyo. Earlier in this conversation she "
    "asked what her brother, her colleagues and her friends like, and the assistant answered "
    "from what it remembered; open items are the bike comparison, the passport renewal and the "
    "restaurant for her brother's birthday."
)
# Every one of these sections must include something, or the bench is not measuring it.
CONTEXT_SECTIONS = (
    "memories",
    "facts",
    "long_term_note",
    "today_note",
    "recent_notes",
    "summary",
    "messages",
)


@dataclass
class ContextSession:
    id: str
    rows: int
    loaded_seconds: float | None  # None: reused from an earlier run


@dataclass
class ContextSetup:
    person: str  # external id: the fact set's first user
    facts: int  # the person's facts
    small: ContextSession
    large: ContextSession
    table_rows: int  # sessions_app_message, all sessions
    memories: int
    tenant_memories: int
    daily_notes: int


def ensure_context_person(*, tenant: Tenant, person: str) -> tuple[int, int, int]:
    """Memories (the person's and tenant-wide), a long-term note and daily notes of the last
    week for `person`. Idempotent: saving the same text again writes nothing, and a day's note
    is appended only when that day has none. Returns (memories, tenant memories, daily notes)."""
    from facts_app.selectors.notes import note_recall
    from facts_app.services.memories import memory_save
    from facts_app.services.notes import note_daily_append, note_long_term_save, today_utc
    from memoryhub.accounts.selectors import end_user_get_for_tenant

    end_user = end_user_get_for_tenant(tenant=tenant, external_id=person)
    for key, content, pinned in CONTEXT_USER_MEMORIES:
        memory_save(tenant=tenant, end_user=end_user, key=key, content=content, pinned=pinned)
    for key, content, pinned in CONTEXT_TENANT_MEMORIES:
        memory_save(tenant=tenant, end_user=None, key=key, content=content, pinned=pinned)
    note_long_term_save(tenant=tenant, end_user=end_user, content=CONTEXT_LONG_TERM_NOTE)
    today = today_utc()
    recall = note_recall(tenant=tenant, end_user=end_user, today=today, days=8)
    have = {note.day for note in recall.daily if note.content}
    for days_ago, content in CONTEXT_DAILY_NOTES.items():
        day = today - dt.timedelta(days=days_ago)
        if day not in have:
            note_daily_append(tenant=tenant, end_user=end_user, content=content, day=day)
    return len(CONTEXT_USER_MEMORIES), len(CONTEXT_TENANT_MEMORIES), len(CONTEXT_DAILY_NOTES)


def ensure_context_session(
    *, tenant: Tenant, database_url: str, person: str, rows: int
) -> ContextSession:
    """A session of `person` holding exactly `rows` messages (alternating user and assistant,
    varied text) and a summary of all but the last 40, bulk-loaded once and reused afterwards
    (found by its metadata and owner)."""
    import psycopg

    from sessions_app.models import Session, Summary
    from sessions_app.services import session_create_or_get

    marker = f"context-{rows}"
    session = (
        Session.objects.filter(tenant=tenant, metadata__bench=marker, end_user__external_id=person)
        .order_by("-message_count")
        .first()
    )
    if session is None:
        session, _ = session_create_or_get(
            tenant=tenant, user_id=person, agent_id="bench-context", metadata={"bench": marker}
        )
    loaded: float | None = None
    with psycopg.connect(database_url) as conn:
        count, top = conn.execute(
            "SELECT count(*), coalesce(max(seq), 0) FROM sessions_app_message "
            "WHERE session_id = %s",
            (session.pk,),
        ).fetchone() or (0, 0)
        counters = conn.execute(
            "SELECT last_seq, message_count FROM sessions_app_session WHERE id = %s",
            (session.pk,),
        ).fetchone()
        if (count, top) != (rows, rows) or counters != (rows, rows):
            say(
                f"loading {rows:,} messages into a context session of {person} "
                "(once; later runs reuse it)"
            )
            started = time.perf_counter()
            conn.execute("DELETE FROM sessions_app_message WHERE session_id = %s", (session.pk,))
            conn.execute(
                CONTEXT_LOAD,
                {
                    "tenant": tenant.pk,
                    "session": session.pk,
                    "rows": rows,
                    "questions": FACT_QUESTIONS,
                    "openers": CONTEXT_OPENERS,
                    "follow": CONTEXT_FOLLOW_UPS,
                    "subjects": FACT_SUBJECTS,
                    "verbs": FACT_VERBS,
                    "objects": [name for name, _ in FACT_OBJECTS],
                    "contexts": FACT_CONTEXTS,
                    "tail": CONTEXT_LONG_TAIL,
                },
            )
            conn.execute(
                "UPDATE sessions_app_session SET last_seq = %(rows)s, message_count = %(rows)s, "
                "token_count = (SELECT coalesce(sum(token_count), 0) FROM sessions_app_message "
                "WHERE session_id = %(session)s), last_active_at = now(), updated_at = now() "
                "WHERE id = %(session)s",
                {"rows": rows, "session": session.pk},
            )
            conn.commit()
            # VACUUM too, as for the facts: autovacuum would otherwise start on the table during
            # the timed calls.
            conn.autocommit = True
            conn.execute("VACUUM ANALYZE sessions_app_message")
            conn.execute("ANALYZE sessions_app_session")
            loaded = time.perf_counter() - started
    through = rows - 40
    if not Summary.objects.filter(session=session, through_seq=through).exists():
        Summary.objects.filter(session=session).delete()
        Summary.objects.create(
            tenant=tenant,
            session=session,
            text=CONTEXT_SUMMARY,
            through_seq=through,
            token_count=len(CONTEXT_SUMMARY) // 4,
            model=Summary.MANUAL_MODEL,
        )
    return ContextSession(id=str(session.pk), rows=rows, loaded_seconds=loaded)


def ensure_context(*, tenant: Tenant, config: Config, fact_set: FactSet) -> ContextSetup:
    import psycopg

    person = fact_set.user_ids[0]
    memories, tenant_memories, daily = ensure_context_person(tenant=tenant, person=person)
    small = ensure_context_session(
        tenant=tenant, database_url=config.database_url, person=person, rows=CONTEXT_SMALL_ROWS
    )
    large = ensure_context_session(
        tenant=tenant, database_url=config.database_url, person=person, rows=config.context_rows
    )
    with psycopg.connect(config.database_url) as conn:
        total = conn.execute("SELECT count(*) FROM sessions_app_message").fetchone()
        facts = conn.execute(
            "SELECT count(*) FROM facts_app_fact f JOIN accounts_enduser u "
            "ON u.id = f.end_user_id WHERE u.tenant_id = %s AND u.external_id = %s",
            (tenant.pk, person),
        ).fetchone()
    return ContextSetup(
        person=person,
        facts=int(facts[0]) if facts else 0,
        small=small,
        large=large,
        table_rows=int(total[0]) if total else 0,
        memories=memories,
        tenant_memories=tenant_memories,
        daily_notes=daily,
    )


def context_path(session_id: str) -> str:
    return f"/api/v1/sessions/{session_id}/context/?max_tokens={CONTEXT_MAX_TOKENS}"


def check_context(payload: dict[str, Any], label: str) -> None:
    if payload["tokens"] > CONTEXT_MAX_TOKENS:
        raise BenchError(f"{label}: the context has {payload['tokens']} tokens, over the budget")
    empty = [
        s["name"]
        for s in payload["sections"]
        if s["name"] in CONTEXT_SECTIONS and not s["included"]
    ]
    if empty:
        raise BenchError(
            f"{label}: the context left sections empty ({', '.join(empty)}): "
            + "; ".join(f"{s['name']}: dropped {s['dropped'][:3]}" for s in payload["sections"])
        )


def sections_line(payload: dict[str, Any]) -> str:
    parts = [
        f"{s['name']} {s['tokens']} ({len(s['included'])})"
        for s in payload["sections"]
        if s["included"]
    ]
    return f"{payload['tokens']} of {payload['max_tokens']} tokens: " + ", ".join(parts)


def api_contexts(
    *, port: int, secret: str, paths: list[str], count: int, warmup: int
) -> tuple[list[list[float]], list[dict[str, Any]]]:
    """One client, sequentially, the paths interleaved (a, b, a, b, ...) so that both see the
    same machine; per path its latencies, and its first response."""
    api = ApiClient(port, secret)
    first = [api.expect("GET", path, None, 200) for path in paths]
    for _ in range(warmup):
        for path in paths:
            api.expect("GET", path, None, 200)
    latencies: list[list[float]] = [[] for _ in paths]
    for _ in range(count):
        for index, path in enumerate(paths):
            started = time.perf_counter()
            status, payload = api.request("GET", path)
            latencies[index].append(time.perf_counter() - started)
            if status != 200:
                raise BenchError(f"context answered {status}: {payload[:300]!r}")
    api.close()
    return latencies, first


def context_note(config: Config) -> str:
    if config.context_rows >= TARGET_CONTEXT_ROWS:
        return ""
    return f"  (the targets are set at {TARGET_CONTEXT_ROWS:,} messages: --big)"


@dataclass
class ContextResult:
    small_rows: int
    large_rows: int
    small: Latency
    large: Latency
    ratio: float  # p95(large) / p95(small)
    cpu: dict[str, float] | None  # per context call, both sessions
    tokens: int
    sections: list[dict[str, Any]]


def context_verdict(result: ContextResult, config: Config) -> str:
    worst = max(result.small.p95_ms, result.large.p95_ms)
    return (
        f"p95 {worst:.2f} ms (worst of both; target <= {TARGET_CONTEXT_P95_MS:.0f} ms)  "
        f"{mark(worst <= TARGET_CONTEXT_P95_MS)}    ratio p95({result.large_rows:,})/"
        f"p95({result.small_rows:,}) {result.ratio:.2f} (target <= {TARGET_CONTEXT_RATIO})  "
        f"{mark(result.ratio <= TARGET_CONTEXT_RATIO)}" + context_note(config)
    )


def bench_context(setup: Setup, server: Gunicorn) -> ContextResult:
    config = setup.config
    context = setup.context
    assert context is not None
    small, large = context.small, context.large
    section(
        f"Context: GET /api/v1/sessions/{{id}}/context/?max_tokens={CONTEXT_MAX_TOKENS}, "
        f"sessions of {small.rows:,} and {large.rows:,} messages, one client"
    )
    say(
        f"person     {context.person}: {context.facts} facts, {context.memories} memories "
        f"(+{context.tenant_memories} tenant-wide), a long-term note, "
        f"{context.daily_notes} daily notes, a summary per session; sessions_app_message holds "
        f"{context.table_rows:,} rows"
    )
    paths = [context_path(small.id), context_path(large.id)]
    before = cpu_sample(server.pid)
    (small_seconds, large_seconds), first = api_contexts(
        port=server.port, secret=setup.secret, paths=paths, count=config.context_calls, warmup=20
    )
    after = cpu_sample(server.pid)
    for payload, session in zip(first, (small, large), strict=True):
        check_context(payload, f"{session.rows:,}-message session")
    say(f"response   {small.rows:>9,}: {sections_line(first[0])}")
    say(f"response   {large.rows:>9,}: {sections_line(first[1])}")
    small_latency, large_latency = Latency.of(small_seconds), Latency.of(large_seconds)
    cpu = cpu_per_request(before, after, 2 * (config.context_calls + 21))
    say(f"{small.rows:>9,}  {small_latency.line()}")
    say(f"{large.rows:>9,}  {large_latency.line()}")
    say(f"           {cpu_line(cpu, 'context call')} (warm-up included)")
    result = ContextResult(
        small_rows=small.rows,
        large_rows=large.rows,
        small=small_latency,
        large=large_latency,
        ratio=large_latency.p95_ms / small_latency.p95_ms,
        cpu=cpu,
        tokens=int(first[1]["tokens"]),
        sections=first[1]["sections"],
    )
    say(context_verdict(result, config))
    return result


# --- summarization and extraction on vs off (issue 4) -----------------------------------------


def cpu_over(outcomes: list[ClientsOutcome], requests: int) -> dict[str, float] | None:
    """cpu_per_request over several timed runs: their CPU time summed, per request."""
    if any(o.cpu_before is None or o.cpu_after is None for o in outcomes):
        return None
    names = [f.name for f in dataclasses.fields(CpuSample)]
    summed = CpuSample(
        **{
            name: sum(getattr(o.cpu_after, name) - getattr(o.cpu_before, name) for o in outcomes)
            for name in names
        }
    )
    return cpu_per_request(CpuSample(**dict.fromkeys(names, 0.0)), summed, requests)


def ensure_policy_tenant(slug: str, **policy: Any) -> Tenant:
    """A bench tenant whose tenant-wide MemoryPolicy holds `policy` (created or updated).
    Called before gunicorn starts: its workers cache policies for a few seconds."""
    from memoryhub.accounts.models import MemoryPolicy, Tenant
    from memoryhub.accounts.services import tenant_create

    tenant = Tenant.objects.filter(slug=slug).first() or tenant_create(slug=slug, name=slug)
    MemoryPolicy.objects.update_or_create(tenant=tenant, agent_id="", defaults=policy)
    return tenant


class RequestReset:
    """What a finished summary or extraction task does to its request (pending_finish): clear
    `summary_requested_at` and `extraction_requested_at`, so the next append requests again.
    One psycopg connection per client, opened on first use (in the client's thread)."""

    SQL = (
        "UPDATE sessions_app_session SET summary_requested_at = NULL, "
        "extraction_requested_at = NULL WHERE id = %s"
    )

    def __init__(self, database_url: str, session_id: str, every: int) -> None:
        self.database_url = database_url
        self.session_id = uuid.UUID(session_id)
        self.every = every  # reset after every `every`-th append
        self.appends = 0
        self.conn: Any = None

    def __call__(self) -> None:
        import psycopg

        self.appends += 1
        if self.appends % self.every:
            return
        if self.conn is None:
            self.conn = psycopg.connect(self.database_url, autocommit=True)
        self.conn.execute(self.SQL, (self.session_id,))

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


@dataclass
class LlmMode:
    appends: int
    seconds: float
    rate: float
    latency: Latency
    cpu: dict[str, float] | None
    enqueued: int  # tasks the broker's queue grew by


@dataclass
class LlmResult:
    off: LlmMode
    on: LlmMode
    p99_ratio: float
    p50_ratio: float
    rate_ratio: float
    broker: str
    llm_calls: int  # requests the fake LLM server got (none expected)


def llm_verdict(result: LlmResult) -> str:
    ok = result.p99_ratio <= TARGET_LLM_P99_RATIO
    return (
        f"ratio on/off: p99 {result.p99_ratio:.2f} (target <= {TARGET_LLM_P99_RATIO})  "
        f"{mark(ok)}    p50 {result.p50_ratio:.2f}    rate {result.rate_ratio:.2f}"
    )


def bench_llm(setup: Setup) -> LlmResult:
    """The append workload twice on a gunicorn with an LLM configured: tenant policy off
    (extraction off, summary threshold out of reach) and on (extraction on, threshold 1 token),
    alternated over LLM_ROUNDS; every append's request columns are reset after it, as a
    finished task would, so that with the policy on every append requests a summary and every
    assistant reply an extraction."""
    from tests.fakes.openai_server import FakeOpenAIServer  # stdlib only

    config = setup.config
    assert setup.llm_tenants is not None
    section(
        f"Append with summarization and extraction on vs off: {config.clients} clients, "
        "user and assistant turns"
    )
    fake = FakeOpenAIServer().start()
    server = Gunicorn(
        env={**setup.env, "LLM_BASE_URL": fake.base_url, "LLM_TIMEOUT_SECONDS": "5"},
        workers=config.workers,
        worker_class=config.worker_class,
        threads=config.threads,
    )
    per_mode: dict[str, list[ClientsOutcome]] = {"off": [], "on": []}
    enqueued = {"off": 0, "on": 0}
    per_round = max(1, config.appends // LLM_ROUNDS.count("on"))
    expected = 0
    try:
        server.start()
        say(
            f"gunicorn   up on 127.0.0.1:{server.port}, LLM_BASE_URL={fake.base_url} "
            f"(a fake OpenAI server), broker {broker_description(setup.env)}, no worker"
        )
        # One session per client and mode for all rounds; the warm-up is in each mode's first.
        sessions = {
            mode: [
                setup.new_session(f"llm-{mode}-{i}", tenant=setup.llm_tenants[mode][0])
                for i in range(config.clients)
            ]
            for mode in ("off", "on")
        }
        appended = dict.fromkeys(sessions, 0)  # per session
        for round_number, mode in enumerate(LLM_ROUNDS, 1):
            secret = setup.llm_tenants[mode][1]
            warmup = config.warmup if appended[mode] == 0 else 0
            resets = [
                RequestReset(config.database_url, value, config.llm_reset_every)
                for value in sessions[mode]
            ]
            queued_before = broker_queue_size()
            try:
                outcome = run_clients(
                    [
                        api_append_worker(
                            port=server.port,
                            secret=secret,
                            session_id=session_id,
                            client=i,
                            warmup=warmup,
                            count=per_round,
                            roles=("user", "assistant"),
                            after=reset,
                        )
                        for i, (session_id, reset) in enumerate(
                            zip(sessions[mode], resets, strict=True)
                        )
                    ],
                    server_group=server.pid,
                )
            finally:
                for reset in resets:
                    reset.close()
            grew = broker_queue_size() - queued_before
            enqueued[mode] += grew
            per_mode[mode].append(outcome)
            appended[mode] += warmup + per_round
            if mode == "on" and config.llm_reset_every == 1:
                # a summary per append, an extraction per assistant reply
                indexes = [*range(-warmup, 0), *range(per_round)]
                expected += config.clients * sum(1 + (index % 2 == 1) for index in indexes)
            result = append_result(outcome)
            say(
                f"round {round_number} {mode:>3}  {result.appends} appends in "
                f"{result.seconds:5.2f} s = {result.rate:7.1f}/s   p50 "
                f"{result.latency.p50_ms:6.2f} ms   p99 {result.latency.p99_ms:6.2f} ms   "
                f"queue +{grew}"
            )
        for mode, ids in sessions.items():
            check_gapless(config.database_url, ids, appended[mode])
    except BenchError:
        say(f"\ngunicorn log (tail):\n{server.tail()}")
        raise
    finally:
        server.stop()
        fake.stop()
    modes: dict[str, LlmMode] = {}
    for mode, outcomes in per_mode.items():
        latencies = [value for o in outcomes for client in o.latencies for value in client]
        wall = sum(o.wall for o in outcomes)
        cpu = cpu_over(outcomes, len(latencies))
        modes[mode] = LlmMode(
            appends=len(latencies),
            seconds=wall,
            rate=len(latencies) / wall,
            latency=Latency.of(latencies),
            cpu=cpu,
            enqueued=enqueued[mode],
        )
    off, on = modes["off"], modes["on"]
    for mode, data in (("off", off), ("on", on)):
        say(
            f"{mode:>3}  {data.appends} appends in {data.seconds:5.2f} s = "
            f"{data.rate:7.1f} appends/s"
        )
        say(f"     {data.latency.line()}")
        say(f"     {cpu_line(data.cpu)}")
    what = (
        f"expected {expected}: a summary per append, an extraction per reply, warm-up included"
        if config.llm_reset_every == 1
        else f"requests reset every {config.llm_reset_every} appends"
    )
    say(
        f"check: the queue grew by {off.enqueued} tasks with the policy off and {on.enqueued} "
        f"with it on ({on.enqueued / (appended['on'] * config.clients):.2f} per append; {what}); "
        f"the fake LLM "
        f"got {len(fake.requests)} requests; every session holds seqs 1..N without gaps"
    )
    if off.enqueued != 0 or (config.llm_reset_every == 1 and on.enqueued != expected):
        say("WARNING: the enqueued tasks are not what the policies should give")
    result = LlmResult(
        off=off,
        on=on,
        p99_ratio=on.latency.p99_ms / off.latency.p99_ms,
        p50_ratio=on.latency.p50_ms / off.latency.p50_ms,
        rate_ratio=on.rate / off.rate,
        broker=broker_description(setup.env),
        llm_calls=len(fake.requests),
    )
    say(llm_verdict(result))
    return result


# --- cleanup while appending (issue 5) ---------------------------------------------------------

CLEANUP_LOAD = """
INSERT INTO sessions_app_message
    (tenant_id, session_id, seq, role, content, name, tool_call_id, tool_calls, metadata,
     token_count, created_at)
SELECT %(tenant)s, (%(sessions)s::uuid[])[1 + (g - 1) %% %(holders)s],
       1 + (g - 1) / %(holders)s,
       CASE WHEN ((g - 1) / %(holders)s) %% 2 = 0 THEN 'user' ELSE 'assistant' END,
       'Expired message ' || g || ' of the cleanup benchmark: what did we decide about the '
           || 'deployment window on Thursday, and who is on call?',
       '', '', NULL, '{}'::jsonb, 24,
       now() - make_interval(days => %(age)s) + make_interval(secs => g)
FROM generate_series(1, %(rows)s) AS g
"""
# The raw baseline: what retention deletes for this tenant (its policy's cutoff), one statement.
CLEANUP_RAW_DELETE = (
    "DELETE FROM sessions_app_message WHERE tenant_id = %s "
    "AND created_at < now() - make_interval(days => %s)"
)


@dataclass
class CleanupResult:
    rows: int
    raw_seconds: float
    raw_rate: float
    prune_seconds: float
    prune_rate: float
    prune_counts: dict[str, int]
    batches: int
    batch: Latency  # one message batch (select ids + delete + commit)
    rate_ratio: float  # prune rate / raw rate
    alone: AppendResult
    during: AppendResult
    p99_ratio: float  # appenders' p99 during the cleanup / without it
    load_seconds: float
    vacuum_seconds: list[float]


def cleanup_verdict(result: CleanupResult) -> str:
    ok = result.p99_ratio <= TARGET_CLEANUP_P99_RATIO
    return (
        f"appenders' p99 during/without {result.p99_ratio:.2f} "
        f"(target <= {TARGET_CLEANUP_P99_RATIO:.0f})  {mark(ok)}"
    )


def load_expired(*, database_url: str, tenant_id: int, holders: list[str], rows: int) -> float:
    """`rows` messages CLEANUP_AGE_DAYS old spread over the live holder sessions, then
    ANALYZE (so the planner knows them)."""
    import psycopg

    started = time.perf_counter()
    ids = [uuid.UUID(value) for value in holders]
    with psycopg.connect(database_url) as conn:
        conn.execute(
            CLEANUP_LOAD,
            {
                "tenant": tenant_id,
                "sessions": ids,
                "holders": len(ids),
                "rows": rows,
                "age": CLEANUP_AGE_DAYS,
            },
        )
        for index, session in enumerate(ids):
            count = rows // len(ids) + (1 if index < rows % len(ids) else 0)
            conn.execute(
                "UPDATE sessions_app_session SET last_seq = %(n)s, message_count = %(n)s, "
                "token_count = %(n)s * 24, last_active_at = now(), updated_at = now() "
                "WHERE id = %(id)s",
                {"n": count, "id": session},
            )
        conn.commit()
        conn.execute("ANALYZE sessions_app_message")
        conn.commit()
    return time.perf_counter() - started


def vacuum_messages(database_url: str) -> float:
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) sessions_app_message")
    return time.perf_counter() - started


def count_expired(database_url: str, tenant_id: int) -> int:
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM sessions_app_message WHERE tenant_id = %s "
            "AND created_at < now() - make_interval(days => %s)",
            (tenant_id, CLEANUP_RETENTION_DAYS),
        ).fetchone()
    return int(row[0]) if row else 0


class Appenders:
    """`len(sessions)` threads, each POSTing one user message at a time to its own session
    until stopped: warm-up first, then every request's start (monotonic) and latency."""

    def __init__(self, *, port: int, secret: str, sessions: list[str], warmup: int) -> None:
        self.port, self.secret, self.warmup = port, secret, warmup
        self.sessions = sessions
        self.stop_event = threading.Event()
        self.barrier = threading.Barrier(len(sessions) + 1)
        self.samples: list[list[tuple[float, float]]] = [[] for _ in sessions]
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._run, args=(i,), name=f"appender-{i}", daemon=True)
            for i in range(len(sessions))
        ]

    def _run(self, client: int) -> None:
        path = f"/api/v1/sessions/{self.sessions[client]}/messages/"
        api = ApiClient(self.port, self.secret)
        try:
            for index in range(self.warmup):
                body = {"role": "user", "content": message_content(client, index - self.warmup)}
                api.expect("POST", path, body, 201)
            self.barrier.wait()
            index = 0
            samples = self.samples[client]
            while not self.stop_event.is_set() and not STOP.is_set():
                data = json.dumps(
                    {"role": "user", "content": message_content(client, index)}
                ).encode()
                at = time.monotonic()
                started = time.perf_counter()
                status, payload = api.request("POST", path, data)
                samples.append((at, time.perf_counter() - started))
                if status != 201:
                    raise BenchError(f"append answered {status}: {payload[:300]!r}")
                index += 1
        except BaseException as error:
            self.errors.append(error)
            self.stop_event.set()
            self.barrier.abort()
        finally:
            api.close()

    def start(self) -> None:
        """Start the clients and return once all have warmed up."""
        for thread in self.threads:
            thread.start()
        try:
            self.barrier.wait(timeout=300)
        except threading.BrokenBarrierError:
            self.stop()
            raise BenchError("appenders did not finish their warm-up within 300 s") from None

    def stop(self) -> list[tuple[float, float]]:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=60)
        if self.errors:
            raise self.errors[0]
        return [sample for client in self.samples for sample in client]


def appends_between(
    samples: list[tuple[float, float]],
    start: float,
    end: float,
    before: CpuSample | None,
    after: CpuSample | None,
) -> AppendResult:
    """The appends that started in [start, end] (monotonic seconds)."""
    latencies = [seconds for at, seconds in samples if start <= at <= end]
    if not latencies:
        raise BenchError("no append completed during the measured window")
    return AppendResult(
        appends=len(latencies),
        seconds=end - start,
        rate=len(latencies) / (end - start),
        latency=Latency.of(latencies),
        cpu=cpu_per_request(before, after, len(latencies)),
    )


def start_pruner(env: dict[str, str], slug: str) -> subprocess.Popen[str]:
    """bench/prune_worker.py: Django set up, waiting for "go" on stdin."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "prune_worker.py"), slug],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if line.strip() != "ready":
        process.kill()
        process.wait()
        raise BenchError(f"bench/prune_worker.py did not start: {line!r}")
    return process


def bench_cleanup(setup: Setup, server: Gunicorn) -> CleanupResult:
    import psycopg

    config = setup.config
    assert setup.cleanup_tenant is not None
    tenant, secret = setup.cleanup_tenant
    rows = config.cleanup_rows
    section(
        f"Cleanup while appending: retention deletes {rows:,} expired messages, "
        f"{config.clients} clients append"
    )
    holders = [
        setup.new_session(f"cleanup-holder-{i}", tenant=tenant, user=False)
        for i in range(CLEANUP_HOLDERS)
    ]
    leftover = count_expired(config.database_url, tenant.pk)
    if leftover:  # an interrupted run's
        with psycopg.connect(config.database_url) as conn:
            conn.execute(CLEANUP_RAW_DELETE, (tenant.pk, CLEANUP_RETENTION_DAYS))
    vacuums: list[float] = []
    say(
        f"tenant     {CLEANUP_TENANT}: retention {CLEANUP_RETENTION_DAYS} days; "
        f"{rows:,} messages {CLEANUP_AGE_DAYS} days old in {CLEANUP_HOLDERS} live sessions "
        "(so only the message rule applies); the appenders write to 4 other sessions"
    )
    # (a) raw: the same rows, one DELETE, alone.
    load = load_expired(
        database_url=config.database_url, tenant_id=tenant.pk, holders=holders, rows=rows
    )
    with psycopg.connect(config.database_url) as conn:
        started = time.perf_counter()
        cursor = conn.execute(CLEANUP_RAW_DELETE, (tenant.pk, CLEANUP_RETENTION_DAYS))
        conn.commit()
        raw_seconds = time.perf_counter() - started
        if cursor.rowcount != rows:
            raise BenchError(f"the raw DELETE removed {cursor.rowcount} rows, not {rows}")
    vacuums.append(vacuum_messages(config.database_url))
    say(
        f"raw        DELETE ... WHERE tenant_id = %s AND created_at < cutoff: {rows:,} rows in "
        f"{raw_seconds:.2f} s = {rows / raw_seconds:9,.0f} rows/s (alone, one statement)"
    )
    say(
        f"           loaded in {load:.1f} s (INSERT ... SELECT generate_series, ANALYZE); "
        f"VACUUM ANALYZE sessions_app_message after the DELETE: {vacuums[-1]:.1f} s"
    )
    load += load_expired(
        database_url=config.database_url, tenant_id=tenant.pk, holders=holders, rows=rows
    )
    say(f"           loaded again (and ANALYZEd): {rows:,} expired messages")
    # (b) the appenders alone, for their baseline.
    sessions = [
        setup.new_session(f"cleanup-append-{i}", tenant=tenant) for i in range(config.clients)
    ]
    appenders = Appenders(port=server.port, secret=secret, sessions=sessions, warmup=config.warmup)
    appenders.start()
    try:
        start = time.monotonic()
        before = cpu_sample(server.pid)
        time.sleep(config.cleanup_seconds)
        end = time.monotonic()
        after = cpu_sample(server.pid)
    finally:
        samples = appenders.stop()
    alone = appends_between(samples, start, end, before, after)
    say(
        f"alone      {alone.appends} appends in {alone.seconds:5.2f} s = "
        f"{alone.rate:7.1f} appends/s"
    )
    say(f"           {alone.latency.line()}")
    say(f"           {cpu_line(alone.cpu)}")
    # (c) retention_prune_tenant in its own process while the appenders append.
    pruner = start_pruner(setup.env, CLEANUP_TENANT)
    assert pruner.stdin is not None
    assert pruner.stdout is not None
    appenders = Appenders(port=server.port, secret=secret, sessions=sessions, warmup=config.warmup)
    try:
        appenders.start()
        before = cpu_sample(server.pid)
        pruner.stdin.write("go\n")
        pruner.stdin.flush()
        line = pruner.stdout.readline()
        after = cpu_sample(server.pid)
    finally:
        samples = appenders.stop()
        if pruner.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                pruner.wait(timeout=30)
        if pruner.poll() is None:
            pruner.kill()
            pruner.wait()
    try:
        report = json.loads(line)
    except json.JSONDecodeError:
        raise BenchError(f"bench/prune_worker.py failed (exit {pruner.returncode})") from None
    during = appends_between(samples, report["started"], report["ended"], before, after)
    prune_seconds = report["ended"] - report["started"]
    counts: dict[str, int] = report["counts"]
    batch_times = report["message_batches"]
    left = count_expired(config.database_url, tenant.pk)
    if counts.get("messages") != rows or left:
        raise BenchError(
            f"retention removed {counts.get('messages')} messages of {rows}; {left} expired left"
        )
    vacuums.append(vacuum_messages(config.database_url))
    prune_rate = rows / prune_seconds
    say(
        f"cleanup    retention_prune_tenant: {rows:,} rows in {prune_seconds:.2f} s = "
        f"{prune_rate:9,.0f} rows/s, {len(batch_times)} batches of 1000 ids "
        f"(each: select ids, delete, commit)"
    )
    batch = Latency.of(batch_times)
    say(f"           batch {batch.line()}")
    say(
        f"during     {during.appends} appends in {during.seconds:5.2f} s = "
        f"{during.rate:7.1f} appends/s"
    )
    say(f"           {during.latency.line()}")
    say(f"           {cpu_line(during.cpu)} (the cleanup's process counts as other)")
    say(
        f"check: retention removed all {rows:,} expired messages and nothing else "
        f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}); VACUUM ANALYZE "
        f"sessions_app_message afterwards: {vacuums[-1]:.1f} s"
    )
    result = CleanupResult(
        rows=rows,
        raw_seconds=raw_seconds,
        raw_rate=rows / raw_seconds,
        prune_seconds=prune_seconds,
        prune_rate=prune_rate,
        prune_counts=counts,
        batches=len(batch_times),
        batch=batch,
        rate_ratio=prune_rate / (rows / raw_seconds),
        alone=alone,
        during=during,
        p99_ratio=during.latency.p99_ms / alone.latency.p99_ms,
        load_seconds=load,
        vacuum_seconds=vacuums,
    )
    say(f"ratio cleanup/raw {result.rate_ratio:.3f} (rows/s)    {cleanup_verdict(result)}")
    return result


# --- profile of one request, in-process --------------------------------------------------------


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
LLM_APPEND_PHASES: list[Phase] = [
    *APPEND_PHASES,
    (
        3,
        "summary request (pending_claim's UPDATE)",
        "sessions_app/summaries.py",
        "summary_request",
        "max",
    ),
    (
        3,
        "extraction request (pending_claim's UPDATE)",
        "sessions_app/extraction.py",
        "extraction_request",
        "max",
    ),
    (3, "Celery enqueue after commit (Task.delay)", "celery/app/task.py", "delay", "max"),
    (4, "of which the broker's publish", "kombu/messaging.py", "_publish", "max"),
]
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
SEARCH_PHASES: list[Phase] = [
    *AUTH_PHASES,
    (
        1,
        "query-string validation (FactSearchQuerySerializer)",
        "rest_framework/serializers.py",
        "is_valid",
        "max",
    ),
    (
        1,
        "end-user lookup (end_user_get_for_tenant)",
        "memoryhub/accounts/selectors.py",
        "end_user_get_for_tenant",
        "max",
    ),
    (1, "search (fact_search)", "facts_app/selectors/facts.py", "fact_search", "max"),
    (
        2,
        "candidates queryset (fact_list_for_tenant)",
        "facts_app/selectors/facts.py",
        "fact_list_for_tenant",
        "max",
    ),
    (2, "ranking query (FullTextRanker.rank)", "memoryhub/core/search.py", "rank", "max"),
    (2, "fetch the hits by id (in_bulk)", "django/db/models/query.py", "in_bulk", "max"),
    (
        1,
        "output serialization (FactOutputSerializer, per hit)",
        "rest_framework/serializers.py",
        "data",
        "max",
    ),
]
CONTEXT_PHASES: list[Phase] = [
    *AUTH_PHASES,
    (
        1,
        "query-string validation (ContextQuerySerializer)",
        "rest_framework/serializers.py",
        "is_valid",
        "max",
    ),
    (
        1,
        "session + its summary (session_get_for_context)",
        "sessions_app/selectors.py",
        "session_get_for_context",
        "max",
    ),
    (1, "policy (memory_policy_for)", "memoryhub/accounts/selectors.py", "memory_policy_for",
     "max"),
    (1, "gather (context_inputs_for_session)", "memoryhub/context/gather.py",
     "context_inputs_for_session", "max"),
    (2, "messages (message_tail_for_context)", "sessions_app/selectors.py",
     "message_tail_for_context", "max"),
    (2, "memories, both lists (memory_lists_for_context)", "facts_app/selectors/memories.py",
     "memory_lists_for_context", "max"),
    (2, "facts search (fact_search_for_person)", "facts_app/selectors/facts.py",
     "fact_search_for_person", "max"),
    (2, "notes (note_recall_for_context)", "facts_app/selectors/notes.py",
     "note_recall_for_context", "max"),
    (1, "assemble (assemble_context), with its final renders", "memoryhub/context/assemble.py",
     "assemble_context", "max"),
    (1, "render (render_markdown, all calls: the assembler's check and the response)",
     "memoryhub/context/render.py", "render_markdown", "max"),
    (1, "token counting (count_tokens_cached, all calls)", "memoryhub/core/tokens.py",
     "count_tokens_cached", "max"),
]  # fmt: skip
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


def bench_profiles(setup: Setup) -> dict[str, Any]:
    config = setup.config
    client = InProcessClient(setup.secret)
    results: dict[str, Any] = {}
    if "appends" in config.only:
        session_id = setup.new_session("profile")
        append_url = f"/api/v1/sessions/{session_id}/messages/"

        def append(index: int) -> None:
            body = json.dumps({"role": "user", "content": message_content(0, index)}).encode()
            client("POST", append_url, body, 201)

        section("Profile of one append (in-process)")
        appends = profile_requests(
            what="append",
            request=append,
            count=config.profile_requests,
            phases=APPEND_PHASES,
            dump=config.profile_out,
        )
        print_profile(appends, top=True)
        results["append"] = asdict(appends)
    if setup.llm_tenants is not None:
        results.update(profile_llm_appends(setup))
    if setup.read_session is not None:
        read_url = f"/api/v1/sessions/{setup.read_session.id}/messages/?last=20"

        def read(index: int) -> None:
            client("GET", read_url, None, 200)

        section(f"Profile of one read of the last 20 ({config.read_rows:,}-message session)")
        reads = profile_requests(
            what="read", request=read, count=config.profile_requests, phases=READ_PHASES
        )
        print_profile(reads, top=False)
        results["read"] = asdict(reads)
    if setup.fact_set is not None and "facts" in config.only:
        # Other searches than the timed ones: a random user and question each time.
        paths = [
            search_path(user_id, question)
            for user_id, question in search_pairs(setup.fact_set, 2 * config.profile_requests, 3)
        ]

        def search(index: int) -> None:
            client("GET", paths[index % len(paths)], None, 200)

        section(
            f"Profile of one fact search ({setup.fact_set.rows:,} facts, "
            f"{setup.fact_set.users:,} users)"
        )
        searches = profile_requests(
            what="search",
            request=search,
            count=config.profile_requests,
            phases=SEARCH_PHASES,
            dump=config.profile_out if "appends" not in config.only else None,
        )
        print_profile(searches, top=True)
        results["search"] = asdict(searches)
    if setup.context is not None:
        for key, session in (
            ("context_small", setup.context.small),
            ("context_large", setup.context.large),
        ):
            path = context_path(session.id)

            def context_call(index: int, path: str = path) -> None:
                client("GET", path, None, 200)

            large = key == "context_large"
            section(
                f"Profile of one context call ({session.rows:,}-message session, "
                f"max_tokens={CONTEXT_MAX_TOKENS})"
            )
            profile = profile_requests(
                what="context call",
                request=context_call,
                count=config.profile_requests,
                phases=CONTEXT_PHASES,
                dump=config.profile_out if large and config.only == ("context",) else None,
            )
            print_profile(profile, top=large)
            say(
                f"database floor (the DB statement times above, summed): {profile.db_ms:.2f} ms "
                f"of {profile.wall_ms:.2f} ms per context call"
            )
            results[key] = asdict(profile)
    return results


def profile_llm_appends(setup: Setup) -> dict[str, Any]:
    """One append (user and assistant turns) with the policy off and on, in-process, an LLM
    configured (never called), the requests reset after each append as in the llm part: what a
    summary and an extraction request add to the request, statement by statement."""
    import logging

    from django.test import override_settings

    # kombu's filesystem transport warns once that its URL names no host.
    logging.getLogger("kombu.connection").setLevel(logging.ERROR)
    assert setup.llm_tenants is not None
    config = setup.config
    results: dict[str, Any] = {}
    walls: dict[str, float] = {}
    with override_settings(LLM_BASE_URL="http://127.0.0.1:9/v1"):  # never called
        for mode in ("off", "on"):
            tenant, secret = setup.llm_tenants[mode]
            client = InProcessClient(secret)
            session_id = setup.new_session(f"llm-profile-{mode}", tenant=tenant)
            url = f"/api/v1/sessions/{session_id}/messages/"
            reset = RequestReset(config.database_url, session_id, config.llm_reset_every)

            def append(
                index: int,
                url: str = url,
                reset: RequestReset = reset,
                client: InProcessClient = client,
            ) -> None:
                role = "assistant" if index % 2 else "user"
                body = {"role": role, "content": message_content(0, index)}
                client("POST", url, json.dumps(body).encode(), 201)
                reset()

            section(
                f"Profile of one append, summarization and extraction {mode} (in-process, "
                "user and assistant turns, requests reset after each)"
            )
            try:
                profile = profile_requests(
                    what="append",
                    request=append,
                    count=config.profile_requests,
                    phases=LLM_APPEND_PHASES,
                )
            finally:
                reset.close()
            print_profile(profile, top=False)
            results[f"append_llm_{mode}"] = asdict(profile)
            walls[mode] = profile.wall_ms
    say(
        f"on - off: {walls['on'] - walls['off']:+.2f} ms per append in-process "
        f"({walls['on'] / walls['off']:.2f}x; the wall times include the bench's reset UPDATE "
        "after each append, in both)"
    )
    return results


# --- CPU accounting (Linux /proc) ---------------------------------------------------------------


@dataclass
class CpuSample:
    machine_busy: float  # seconds of CPU, all processes
    machine_total: float  # seconds of CPU capacity elapsed (busy + idle)
    server: float  # gunicorn master and workers
    postgres: float  # PostgreSQL's processes (backends that exit in between are missed)
    client: float  # this process (the benchmark's client threads)


def cpu_sample(server_group: int | None) -> CpuSample | None:
    ticks = os.sysconf("SC_CLK_TCK")
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    values = [int(value) for value in fields]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])  # without guest time, already counted in user
    server = postgres = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            head, rest_text = stat.read_text().rsplit(")", 1)
            rest = rest_text.split()
            used = int(rest[11]) + int(rest[12])  # utime + stime
            if server_group is not None and int(rest[2]) == server_group:  # process group
                server += used
            elif head.split("(", 1)[1] == "postgres":
                postgres += used
    times = os.times()
    return CpuSample(
        machine_busy=(total - idle) / ticks,
        machine_total=total / ticks,
        server=server / ticks,
        postgres=postgres / ticks,
        client=times.user + times.system,
    )


def cpu_per_request(
    before: CpuSample | None, after: CpuSample | None, requests: int
) -> dict[str, float] | None:
    """CPU milliseconds per request between two samples, by owner; None without /proc."""
    if before is None or after is None:
        return None
    busy = after.machine_busy - before.machine_busy
    capacity = after.machine_total - before.machine_total
    if capacity <= 0 or busy <= 0:
        return None
    server = after.server - before.server
    postgres = after.postgres - before.postgres
    client = after.client - before.client
    rest = max(0.0, busy - server - client - postgres)  # ticks are coarse: never below zero
    per = 1000 / requests
    return {
        "total_ms": busy * per,
        "gunicorn_ms": server * per,
        "postgres_ms": postgres * per,
        "bench_ms": client * per,
        "other_ms": rest * per,
        "busy_pct": 100 * busy / capacity,
    }


def cpu_line(cpu: dict[str, float] | None, what: str = "append") -> str:
    if cpu is None:
        return "CPU: not measured (needs Linux /proc)"
    parts = [f"gunicorn {cpu['gunicorn_ms']:.2f}"] if cpu["gunicorn_ms"] > 0 else []
    parts += [
        f"PostgreSQL {cpu['postgres_ms']:.2f}",
        f"bench process {cpu['bench_ms']:.2f}",
        f"other processes + kernel {cpu['other_ms']:.2f}",
    ]
    line = (
        f"CPU per {what} {cpu['total_ms']:.2f} ms ({', '.join(parts)}); "
        f"CPUs {cpu['busy_pct']:.0f}% busy"
    )
    other = cpu["other_ms"] / cpu["total_ms"]
    if other > 0.2:
        line += (
            f"\n     NOTE: {100 * other:.0f}% of the CPU went to other processes: numbers are noisy"
        )
    return line


# --- main ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so `finally` blocks (stopping gunicorn) run."""

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cleanup(database_url: str, session_ids: list[str], api_key_ids: list[str]) -> None:
    import psycopg

    with psycopg.connect(database_url) as conn:
        ids = [uuid.UUID(value) for value in session_ids]
        if ids:
            conn.execute("DELETE FROM sessions_app_message WHERE session_id = ANY(%s)", (ids,))
            conn.execute("DELETE FROM sessions_app_summary WHERE session_id = ANY(%s)", (ids,))
            conn.execute("DELETE FROM sessions_app_stateentry WHERE session_id = ANY(%s)", (ids,))
            conn.execute("DELETE FROM sessions_app_session WHERE id = ANY(%s)", (ids,))
        if api_key_ids:
            conn.execute("DELETE FROM accounts_apikey WHERE id = ANY(%s)", (api_key_ids,))
        conn.commit()


@dataclass
class Setup:
    config: Config
    env: dict[str, str]
    tenant: Tenant
    secret: str
    read_session: ReadSession | None  # None: --only without reads
    fact_set: FactSet | None = None  # None: --only without facts
    search_statement: SearchStatement | None = None
    context: ContextSetup | None = None  # None: --only without context
    # The llm part's tenants ("off", "on") and the cleanup part's, each with an API key's secret.
    llm_tenants: dict[str, tuple[Tenant, str]] | None = None
    cleanup_tenant: tuple[Tenant, str] | None = None
    sessions: list[str] = field(default_factory=list)  # append sessions, deleted at the end

    def new_session(self, label: str, tenant: Tenant | None = None, user: bool = True) -> str:
        from sessions_app.services import session_create_or_get

        session, _ = session_create_or_get(
            tenant=tenant or self.tenant,
            user_id=f"bench:{label}" if user else None,
            agent_id="bench",
            metadata={"bench": "append"},
        )
        self.sessions.append(str(session.pk))
        return str(session.pk)


def bench_appends(setup: Setup, server: Gunicorn) -> tuple[AppendResult, AppendResult]:
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
    say(f"API  {api.appends} appends in {api.seconds:5.2f} s = {api.rate:8.1f} appends/s")
    say(f"     {api.latency.line()}")
    say(f"     {cpu_line(api.cpu)}")
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
    say(f"raw  {raw.appends} appends in {raw.seconds:5.2f} s = {raw.rate:8.1f} appends/s")
    say(f"     {raw.latency.line()}")
    say(f"     {cpu_line(raw.cpu)}")
    check_gapless(config.database_url, api_sessions + raw_sessions, config.warmup + config.appends)
    say("check: every session holds seqs 1..N without gaps, and its counters match")
    ratio = api.rate / raw.rate
    p99_ok = api.latency.p99_ms < TARGET_APPEND_P99_MS
    say(
        f"ratio API/raw {ratio:.3f} (target >= {TARGET_RATIO})  {mark(ratio >= TARGET_RATIO)}"
        f"    API p99 {api.latency.p99_ms:.2f} ms (target < {TARGET_APPEND_P99_MS:.0f} ms)  "
        f"{mark(p99_ok)}"
    )
    return api, raw


def read_note(config: Config) -> str:
    if config.read_rows >= TARGET_READ_ROWS:
        return ""
    return f"  (the target is set at {TARGET_READ_ROWS:,} rows: --big)"


def bench_reads(setup: Setup, server: Gunicorn) -> tuple[Latency, Latency]:
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
        f"(target <= {TARGET_READ_P95_MS:.0f} ms)  {mark(api.p95_ms <= TARGET_READ_P95_MS)}"
        + read_note(config)
    )
    return api, raw


def prepare(config: Config) -> tuple[Setup, list[str]]:
    section("MemoryHub benchmark" + (" (--big)" if config.big else ""))
    pg = check_postgres_and_create_database(config.database_url)
    env = django_environment(config.database_url)
    migrate(env)
    setup_django(env)
    parts = urlsplit(config.database_url)
    say(
        f"database   {parts.hostname}:{parts.port or 5432}/{database_name(config.database_url)}"
        f"  (PostgreSQL {pg['server_version']}, fsync={pg['fsync']}, "
        f"synchronous_commit={pg['synchronous_commit']}, shared_buffers={pg['shared_buffers']})"
    )
    say(
        f"machine    {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"gunicorn {config.workers} x {config.worker_class}"
        + (f" ({config.threads} threads)" if config.threads > 1 else "")
        + f", DEBUG off, no access log; load average {os.getloadavg()[0]:.2f} at start"
    )
    sizes = []
    if "appends" in config.only:
        sizes.append(
            f"{config.clients} clients x {config.appends} appends (+{config.warmup} warm-up each)"
        )
    if "reads" in config.only:
        sizes.append(f"read session of {config.read_rows:,} messages, {config.reads} reads")
    if "facts" in config.only:
        sizes.append(
            f"{config.facts:,} facts across {config.fact_users:,} users, {config.searches} searches"
        )
    if "context" in config.only:
        sizes.append(
            f"context sessions of {CONTEXT_SMALL_ROWS:,} and {config.context_rows:,} messages, "
            f"{config.context_calls} calls each"
            + ("" if "facts" in config.only else f" (facts: {config.facts:,})")
        )
    if "llm" in config.only:
        sizes.append(
            f"summarize/extract off vs on: {config.clients} clients x {config.appends} appends "
            f"each (+{config.warmup} warm-up), in {len(LLM_ROUNDS)} alternating rounds"
        )
    if "cleanup" in config.only:
        sizes.append(
            f"cleanup of {config.cleanup_rows:,} expired messages, {config.clients} appenders "
            f"({config.cleanup_seconds:g} s alone)"
        )
    say(f"sizes      {'; '.join(sizes)}")
    say(f"broker     {broker_description(env)} (no worker: enqueued tasks wait, purged at the end)")
    tenant = bench_tenant()
    api_key, secret = create_api_key(tenant)
    api_key_ids = [str(api_key.pk)]
    llm_tenants: dict[str, tuple[Tenant, str]] | None = None
    cleanup_tenant: tuple[Tenant, str] | None = None
    read_session: ReadSession | None = None
    fact_set: FactSet | None = None
    statement: SearchStatement | None = None
    context: ContextSetup | None = None
    try:
        if "reads" in config.only:
            read_session = ensure_read_session(
                tenant=tenant, database_url=config.database_url, rows=config.read_rows
            )
        if "facts" in config.only or "context" in config.only:
            fact_set = ensure_fact_set(
                tenant=tenant,
                database_url=config.database_url,
                rows=config.facts,
                users=config.fact_users,
            )
        if fact_set is not None and "facts" in config.only:
            statement = capture_search_statement(
                tenant=tenant, user_id=fact_set.user_ids[0], question=FACT_QUESTIONS[0]
            )
        if fact_set is not None and "context" in config.only:
            context = ensure_context(tenant=tenant, config=config, fact_set=fact_set)
        # Policies before gunicorn starts: its workers cache them (per process, a few seconds).
        huge = 2_000_000_000  # summary threshold out of reach
        if "llm" in config.only:
            llm_tenants = {}
            for mode, slug in LLM_TENANTS.items():
                on = mode == "on"
                policy_tenant = ensure_policy_tenant(
                    slug,
                    memory_enabled=True,
                    extraction_enabled=on,
                    summary_threshold_tokens=1 if on else huge,
                    summary_keep_recent=0 if on else 10,
                )
                key, key_secret = create_api_key(policy_tenant)
                api_key_ids.append(str(key.pk))
                llm_tenants[mode] = (policy_tenant, key_secret)
        if "cleanup" in config.only:
            policy_tenant = ensure_policy_tenant(
                CLEANUP_TENANT,
                memory_enabled=True,
                extraction_enabled=False,
                summary_threshold_tokens=huge,
                retention_days=CLEANUP_RETENTION_DAYS,
            )
            key, key_secret = create_api_key(policy_tenant)
            api_key_ids.append(str(key.pk))
            cleanup_tenant = (policy_tenant, key_secret)
    except BaseException:
        cleanup(config.database_url, [], api_key_ids)
        raise
    if read_session is not None:
        if read_session.loaded_seconds is not None:
            say(f"loaded     {read_session.rows:,} messages in {read_session.loaded_seconds:.1f} s")
        say(f"table      sessions_app_message holds {read_session.table_rows:,} rows")
    if fact_set is not None:
        if fact_set.loaded_seconds is not None:
            say(
                f"loaded     {fact_set.rows:,} facts in {fact_set.loaded_seconds:.1f} s "
                "(with the indexes, then VACUUM ANALYZE)"
            )
        say(f"table      facts_app_fact holds {fact_set.table_rows:,} rows")
    if context is not None:
        for session in (context.small, context.large):
            if session.loaded_seconds is not None:
                say(
                    f"loaded     {session.rows:,} context messages "
                    f"in {session.loaded_seconds:.1f} s"
                )
        say(f"table      sessions_app_message holds {context.table_rows:,} rows")
    setup = Setup(
        config=config,
        env=env,
        tenant=tenant,
        secret=secret,
        read_session=read_session,
        fact_set=fact_set,
        search_statement=statement,
        context=context,
        llm_tenants=llm_tenants,
        cleanup_tenant=cleanup_tenant,
    )
    return setup, api_key_ids


def run(config: Config) -> dict[str, Any]:
    started = time.perf_counter()
    setup, api_key_ids = prepare(config)
    from django.db import connections

    results: dict[str, Any] = {"config": asdict(config)}
    appends: tuple[AppendResult, AppendResult] | None = None
    reads: tuple[Latency, Latency] | None = None
    search: SearchResult | None = None
    context: ContextResult | None = None
    llm: LlmResult | None = None
    cleanup_result: CleanupResult | None = None
    part_seconds: dict[str, float] = {}

    def timed(part: str, function: Callable[[], Any]) -> Any:
        part_started = time.perf_counter()
        try:
            return function()
        finally:
            part_seconds[part] = time.perf_counter() - part_started

    try:
        if set(config.only) - {"llm"}:
            server = Gunicorn(
                env=setup.env,
                workers=config.workers,
                worker_class=config.worker_class,
                threads=config.threads,
            )
            try:
                server.start()
                say(f"gunicorn   up on 127.0.0.1:{server.port}")
                if "appends" in config.only:
                    appends = timed("appends", lambda: bench_appends(setup, server))
                if "reads" in config.only:
                    reads = timed("reads", lambda: bench_reads(setup, server))
                if "facts" in config.only:
                    search = timed("facts", lambda: bench_facts(setup, server))
                if "context" in config.only:
                    context = timed("context", lambda: bench_context(setup, server))
                if "cleanup" in config.only:
                    cleanup_result = timed("cleanup", lambda: bench_cleanup(setup, server))
            except BenchError:
                say(f"\ngunicorn log (tail):\n{server.tail()}")
                raise
            finally:
                server.stop()
        if "llm" in config.only:
            llm = timed("llm", lambda: bench_llm(setup))  # its own gunicorn, with an LLM
        if appends is not None:
            api, raw = appends
            results.update(
                {
                    "append_api": asdict(api),
                    "append_raw": asdict(raw),
                    "append_ratio": api.rate / raw.rate,
                }
            )
        if reads is not None and setup.read_session is not None:
            results.update(
                {
                    "read_api": asdict(reads[0]),
                    "read_raw": asdict(reads[1]),
                    "read_rows": config.read_rows,
                    "messages_table_rows": setup.read_session.table_rows,
                }
            )
        if search is not None and setup.fact_set is not None:
            results.update(
                {
                    "search": asdict(search),
                    "search_ratio": search.raw.p50_ms / search.api.p50_ms,
                    "search_facts": setup.fact_set.rows,
                    "search_users": setup.fact_set.users,
                    "facts_table_rows": setup.fact_set.table_rows,
                    "search_sql": setup.search_statement.sql if setup.search_statement else None,
                }
            )
        if context is not None and setup.context is not None:
            results["context"] = asdict(context)
            results["context_person"] = setup.context.person
            results["context_person_facts"] = setup.context.facts
            results["messages_table_rows"] = setup.context.table_rows
        if llm is not None:
            results["llm"] = asdict(llm)
        if cleanup_result is not None:
            results["cleanup"] = asdict(cleanup_result)
        if config.profile:
            results["profile"] = bench_profiles(setup)
    finally:
        connections.close_all()
        cleanup(config.database_url, setup.sessions, api_key_ids)
        with contextlib.suppress(Exception):  # a broker that went away: nothing to purge
            broker_purge(setup.env)

    section("Summary")
    if appends is not None:
        api, raw = appends
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
    if reads is not None:
        api_read = reads[0]
        say(
            f"read    API p50 {api_read.p50_ms:6.2f} ms   p95 {api_read.p95_ms:6.2f} ms"
            f"{'':10}target p95 <= {TARGET_READ_P95_MS:.0f} ms "
            f"{mark(api_read.p95_ms <= TARGET_READ_P95_MS)}{read_note(config)}"
        )
    if search is not None:
        say(
            f"search  API p50 {search.api.p50_ms:6.2f} ms   p95 {search.api.p95_ms:6.2f} ms"
            f"{'':10}target p95 <= {TARGET_SEARCH_P95_MS:.0f} ms "
            f"{mark(search.api.p95_ms <= TARGET_SEARCH_P95_MS)}{search_note(config)}"
        )
        say(
            f"search  raw p50 {search.raw.p50_ms:6.2f} ms   p95 {search.raw.p95_ms:6.2f} ms"
            f"{'':10}ratio API/raw {search.raw.p50_ms / search.api.p50_ms:.3f} "
            "(raw p50 / API p50)"
        )
    if context is not None:
        for rows, latency in (
            (context.small_rows, context.small),
            (context.large_rows, context.large),
        ):
            say(
                f"context API p50 {latency.p50_ms:6.2f} ms   p95 {latency.p95_ms:6.2f} ms"
                f"{'':10}{rows:,}-message session"
            )
        say(f"context {context_verdict(context, config)}")
        floor = results.get("profile", {}).get("context_large", {}).get("db_ms")
        if floor is not None:
            say(f"context database floor {floor:.2f} ms per call (in-process profile)")
    if llm is not None:
        say(
            f"llm     off p99 {llm.off.latency.p99_ms:6.2f} ms   "
            f"on p99 {llm.on.latency.p99_ms:6.2f} ms    "
            f"rate off {llm.off.rate:6.1f}/s  on {llm.on.rate:6.1f}/s"
        )
        say(f"llm     {llm_verdict(llm)}")
    if cleanup_result is not None:
        c = cleanup_result
        say(
            f"cleanup {c.prune_rate:9,.0f} rows/s   raw DELETE {c.raw_rate:9,.0f} rows/s   "
            f"ratio {c.rate_ratio:.3f}    ({c.rows:,} rows)"
        )
        say(
            f"cleanup appenders p99 {c.alone.latency.p99_ms:6.2f} ms alone, "
            f"{c.during.latency.p99_ms:6.2f} ms during    {cleanup_verdict(c)}"
        )
    elapsed = time.perf_counter() - started
    results["elapsed_seconds"] = elapsed
    results["part_seconds"] = part_seconds
    if part_seconds:
        say("time       " + ", ".join(f"{k} {v:.0f} s" for k, v in part_seconds.items()))
    if config.save:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
        target = RESULTS_DIR / f"{stamp}{'-big' if config.big else ''}.json"
        target.write_text(json.dumps(results, indent=2, default=str) + "\n")
        say(f"results    {target.relative_to(ROOT)}")
    say(f"done in {elapsed:.0f} s")
    return results


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    try:
        with terminate_on_sigterm():
            run(config)
    except BenchError as error:
        print(f"\nbench: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nbench: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
