"""Instructions per request, counted by valgrind's callgrind: the same number run after run.

`make bench` times requests; on a small shared machine its CPU per request moves by 20-40 %
from one run to the next with the same code (bench/README.md, "Seventh round"), so a lever worth
5 % cannot be seen there. This counts the instructions the app's own process executes for one
request (Django's WSGI handler called in-process, as bench.profiling does: no HTTP, one client),
averaged over `--requests` requests after a warm-up, with callgrind's instrumentation switched on
only around them. The database server's work is not in the count (another process); the
client side of it (psycopg, the ORM) is.

    .venv/bin/python -m bench.instructions                 # append, read, healthz
    .venv/bin/python -m bench.instructions --only append --requests 200

It needs valgrind (Debian's package) and the bench's database (`make bench` creates it; this
creates it too when missing). Compare two commits by running it in each: the counts are
repeatable to a few tenths of a percent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.config import DEFAULT_ADMIN_URL, DEFAULT_DATABASE_URL, ROOT

KINDS = ("append", "read", "healthz")
WARMUP = 30
_INNER = "MEMORYHUB_BENCH_INSTRUCTIONS_INNER"
CONTENT = (
    "Benchmark message from client 0: could you remind me what we decided about the deployment "
    "window on Thursday, and who is on call for the database?"
)


def _callgrind(on: bool) -> None:
    """Instrumentation on or off in this process (it runs under callgrind)."""
    subprocess.run(
        ["callgrind_control", "--instr=" + ("on" if on else "off"), str(os.getpid())],
        check=True,
        capture_output=True,
    )


def _inner(kind: str, requests: int, database_url: str) -> None:
    """Runs under valgrind: set up, warm up, then `requests` requests with instrumentation on."""
    from bench.harness import (
        bench_system_scope,
        bench_tenant,
        create_api_key,
        django_environment,
        setup_django,
    )

    env = django_environment(database_url)
    # Caches that expire by the clock, held for the run: under valgrind a request takes ~50 times
    # longer, and their refreshes (a key verified again costs a password hash) would be counted
    # at a rate no real server pays.
    env["MEMORYHUB_AUTH_CACHE_SECONDS"] = "3600"
    env["MEMORYHUB_API_KEY_LAST_USED_RESOLUTION_SECONDS"] = "3600"
    setup_django(env)
    from memoryhub.accounts import selectors

    selectors.POLICY_CACHE_SECONDS = 3600.0
    from django.db import connection

    from bench.profiling import InProcessClient
    from memoryhub.core.rls import rls_system_scope
    from sessions_app.services import session_create_or_get

    tenant = bench_tenant()
    key, secret = create_api_key(tenant)
    with rls_system_scope():
        session, _ = session_create_or_get(
            tenant=tenant, user_id="bench:instructions", agent_id="bench", metadata={}
        )
    session_id = session.pk
    bench_system_scope(False)  # each request fail-closed until its key scopes it
    client = InProcessClient(secret)
    append_url = f"/api/v1/sessions/{session_id}/messages/"
    body = json.dumps({"role": "user", "content": CONTENT}).encode()
    request: Callable[[], None] = {
        "append": lambda: client("POST", append_url, body, 201),
        "read": lambda: client("GET", append_url + "?last=20", None, 200),
        "healthz": lambda: client("GET", "/healthz", None, 200),
    }[kind]
    try:
        for _ in range(WARMUP if kind != "read" else 0):
            request()
        if kind == "read":
            for _ in range(40):  # something to read: 40 messages
                client("POST", append_url, body, 201)
            for _ in range(WARMUP):
                request()
        _callgrind(True)
        for _ in range(requests):
            request()
        _callgrind(False)
    finally:
        bench_system_scope(True)
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM sessions_app_message WHERE session_id = %s", [session_id])
            cursor.execute("DELETE FROM sessions_app_session WHERE id = %s", [session_id])
            cursor.execute("DELETE FROM accounts_apikey WHERE id = %s", [key.pk])


def count(kind: str, requests: int, database_url: str) -> int:
    """Instructions per request of `kind`, from a callgrind run of this module."""
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as folder:
        out = Path(folder) / "callgrind.out"
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "bench.instructions",
                "--kind-inner",
                kind,
                "--requests",
                str(requests),
                "--database-url",
                database_url,
            ],
            cwd=ROOT,
            env={**os.environ, _INNER: "1"},
            capture_output=True,
            text=True,
            check=False,
        )
        collected = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode != 0 or collected is None:
            raise SystemExit(f"callgrind run of {kind} failed:\n{done.stdout}\n{done.stderr}")
        return int(collected.group(1)) // requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS)
    )
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    )
    parser.add_argument("--kind-inner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.kind_inner:
        if not os.environ.get(_INNER):
            parser.error("--kind-inner is for the run under valgrind")
        _inner(args.kind_inner, args.requests, args.database_url)
        return 0
    kinds = [kind.strip() for kind in args.only.split(",") if kind.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kinds: {', '.join(unknown)}")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        parser.error("valgrind is not installed (Debian: apt-get install valgrind)")
    from bench.harness import check_postgres_and_create_database, django_environment, migrate

    check_postgres_and_create_database(
        args.database_url, os.environ.get("BENCH_ADMIN_URL", DEFAULT_ADMIN_URL)
    )
    migrate(django_environment(args.database_url))
    for kind in kinds:
        per_request = count(kind, args.requests, args.database_url)
        print(f"{kind:8} {per_request:>12,} instructions per request ({args.requests} requests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
