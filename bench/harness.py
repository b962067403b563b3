"""What every part stands on: the database, Django, the Celery broker, the bench tenants and
their API keys, gunicorn, the HTTP client, and the Setup the parts receive."""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from bench.config import ROOT, Config
from bench.measure import BenchError, say

if TYPE_CHECKING:
    from bench.parts.context import ContextSetup
    from bench.parts.facts import FactSet, SearchStatement
    from bench.parts.reads import ReadSession
    from bench.parts.recall import RecallSetup
    from memoryhub.accounts.models import Tenant

TENANT_SLUG = "memoryhub-bench"

# The Celery broker the bench's processes enqueue to: REDIS_URL's server with this database, or
# (no REDIS_URL) kombu's filesystem transport in a temporary folder. No worker consumes it; the
# queue is emptied at the end.
BENCH_REDIS_DB = 12
CELERY_QUEUE = "celery"


# --- PostgreSQL and Django ------------------------------------------------------------------------


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


# Row-level security (memoryhub/core/rls.py): every tenant table's policy reads these two
# settings. The app sets them per request (the key's tenant, and '' for the end user of a key
# that is not bound to a person); '*' for the tenant is its system scope (every tenant).
RLS_SYSTEM = "*"


def pg_connect(url: str, *, tenant: int | str = RLS_SYSTEM, **kwargs: Any) -> Any:
    """A psycopg connection scoped as the app scopes its own: `app.tenant_id` = `tenant` and
    `app.end_user_id` = '' for the session (set_config(..., false), committed, so a later
    rollback keeps it). The timed raw baselines pass their tenant, to pay the policies' price
    as the API does; loaders and checks keep the system scope. A superuser ignores both (it
    bypasses row-level security)."""
    import psycopg

    conn = psycopg.connect(url, **kwargs)
    try:
        conn.execute(
            "SELECT set_config('app.tenant_id', %s, false), "
            "set_config('app.end_user_id', '', false)",
            (str(tenant),),
        )
        if not conn.autocommit:
            conn.commit()
    except BaseException:
        conn.close()
        raise
    return conn


def check_postgres_and_create_database(url: str, admin_url: str) -> dict[str, str]:
    """Fail clearly if PostgreSQL is unreachable. Through `admin_url` (a superuser), when it
    connects: create the bench's role if it is missing (LOGIN, not a superuser, no BYPASSRLS:
    row-level security applies to it as to production's role), its database if missing (owned
    by it, so it migrates and owns the tables), and pgvector in it where the server has it (not
    a trusted extension: only a superuser creates it). Returns the server's settings, and
    `superuser`/`bypassrls` of the role the bench and gunicorn connect as."""
    import psycopg
    from psycopg import sql

    name = database_name(url)
    parts = urlsplit(url)
    role = parts.username or ""
    admin_error = ""
    try:
        admin = psycopg.connect(admin_url, connect_timeout=5, autocommit=True)
    except psycopg.OperationalError as error:
        admin, admin_error = None, str(error).strip()
    if admin is not None:
        with admin:
            if (
                role
                and not admin.execute(
                    "SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)
                ).fetchone()
            ):
                say(f"creating role {role!r} (LOGIN NOSUPERUSER NOBYPASSRLS)")
                statement = sql.SQL(
                    "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS"
                ).format(sql.Identifier(role))
                if parts.password:
                    statement += sql.SQL(" PASSWORD {}").format(sql.Literal(parts.password))
                admin.execute(statement)
            if not admin.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone():
                say(f"creating database {name!r}" + (f" owned by {role!r}" if role else ""))
                statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
                if role:
                    statement += sql.SQL(" OWNER {}").format(sql.Identifier(role))
                admin.execute(statement)
        with psycopg.connect(with_database(admin_url, name), autocommit=True) as conn:
            available = conn.execute(
                "SELECT installed_version IS NULL FROM pg_available_extensions "
                "WHERE name = 'vector'"
            ).fetchone()
            if available and available[0]:
                try:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    say(f"created extension vector in {name!r}")
                except psycopg.Error as error:
                    say(
                        f"NOTE: could not create pgvector ({str(error).strip()}); vectors stay "
                        "in the application"
                    )
    try:
        conn = psycopg.connect(url, connect_timeout=5, autocommit=True)
    except psycopg.OperationalError as error:
        raise BenchError(
            f"cannot connect to PostgreSQL at {parts.hostname}:{parts.port or 5432}/{name} "
            f"as {role or '(default user)'}:\n  {str(error).strip()}\n"
            + (
                f"and the admin URL did not connect either:\n  {admin_error}\n"
                if admin_error
                else ""
            )
            + "Start PostgreSQL, or point --admin-url / BENCH_ADMIN_URL at a superuser that may "
            "create the role and the database, or --database-url at one that exists."
        ) from None
    with conn:
        info: dict[str, str] = {}
        for setting in (
            "server_version",
            "fsync",
            "synchronous_commit",
            "shared_buffers",
            "autovacuum",
        ):
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(setting))).fetchone()
            info[setting] = str(row[0]) if row else "?"
        row = conn.execute(
            "SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert row is not None
        info["role"], info["superuser"], info["bypassrls"] = str(row[0]), str(row[1]), str(row[2])
    return info


def writes_flushed(admin_url: str) -> str:
    """A CHECKPOINT, then sync(): what a load (or a vacuum) left dirty is written out before a
    measured window starts, not by the checkpoints its WAL would set off inside it nor by the
    kernel's writeback, which stalls the commits that wait for their WAL's fsync. Called
    before the first part and before the cleanup part's appenders (in the sixteenth round,
    stalls of 4.7-4.9 s in their baseline window at 1,000,000 rows). What a part writes itself
    still lands in its own window. The CHECKPOINT needs a superuser (or pg_checkpoint),
    through `--admin-url`: without one the line says so and only sync() runs."""
    import psycopg

    started = time.perf_counter()
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute("CHECKPOINT")
    except psycopg.Error as error:
        os.sync()
        return f"no CHECKPOINT ({type(error).__name__}: {error}); sync() only".strip()
    written = time.perf_counter()
    # The checkpoint's writes (and the load's) may still sit in the kernel's page cache (the
    # eighteenth round's first big run: max 254 ms and p99 40 ms in a baseline window that
    # began right after a 0.04 s CHECKPOINT). Any user may call sync().
    os.sync()
    return (
        f"CHECKPOINT {written - started:.1f} s, then the kernel's dirty pages written out "
        f"(sync) {time.perf_counter() - written:.1f} s"
    )


def vacuum_database(url: str) -> float:
    """VACUUM (ANALYZE) the bench's database as its role (it owns the tables); the seconds it
    took. Every append leaves a dead version of its session's row (and the cleanup part dead
    messages): where autovacuum is off (this machine's CI server has it so), they pile up
    from run to run, and each run measured a more bloated database than the last."""
    started = time.perf_counter()
    with pg_connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    return time.perf_counter() - started


def rls_description(info: dict[str, str]) -> str:
    """The header's line on the role: whether the numbers include row-level security."""
    if info.get("superuser") == "True" or info.get("bypassrls") == "True":
        return (
            f"{info['role']} bypasses row-level security (superuser or BYPASSRLS): these numbers "
            "are WITHOUT it; production runs as a plain role"
        )
    return (
        f"{info['role']} (plain role: row-level security forced, as in production; the raw "
        "baselines set app.tenant_id as the API does)"
    )


# The instruction sets that split this kind's machines into fast and slow ones for the recall
# part: int8 products (ONNX's MatMul, simsimd's dot) with VNNI, numpy's selection of 16-bit
# integers and vector popcounts only with AVX-512 (bench/README.md, twenty-eighth round).
CPU_FLAGS = (
    ("AVX2", ("avx2",)),
    ("AVX-512", ("avx512f",)),
    ("VNNI", ("avx512_vnni", "avx_vnni")),
    ("AVX-512 VPOPCNTDQ", ("avx512_vpopcntdq",)),
)


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's model and which of CPU_FLAGS it has, from /proc/cpuinfo ("unknown"
    where that cannot be read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    model = flags = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = value
    present = set(flags.split())
    have = [name for name, names in CPU_FLAGS if present.intersection(names)]
    lacks = [f"no {name}" for name, names in CPU_FLAGS if not present.intersection(names)]
    found = [", ".join(part) for part in (have, lacks) if part]
    return f"{model or 'unknown model'}: {'; '.join(found)}"


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
            # The bench's clients send thousands of requests a minute with one key: it measures
            # the service, not its per-key rate limit.
            "MEMORYHUB_RATE_LIMIT_PER_KEY": "off",
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
        # kombu's stubs type the channel as StdChannel, which lacks the AMQP methods it has.
        channel: Any = conn.default_channel
        declared = channel.queue_declare(queue=CELERY_QUEUE, passive=False)
        return int(declared.message_count)


def broker_purge(env: dict[str, str]) -> int:
    """Empty the bench broker's queue (Redis) or remove its folder (filesystem)."""
    import shutil

    if not env.get("REDIS_URL"):
        shutil.rmtree(env["CELERY_DATA_DIR"], ignore_errors=True)
        return 0
    from memoryhub.celery import app

    with app.connection_for_write() as conn:
        channel: Any = conn.default_channel
        return int(channel.queue_purge(queue=CELERY_QUEUE) or 0)


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
    from django.db.backends.signals import connection_created

    # After the app's own receiver (connected in django.setup()), which starts every connection
    # fail-closed.
    connection_created.connect(_system_scope_on_connect, dispatch_uid="bench_system_scope")


# The bench process's own ORM work (tenants, keys, policies, the loaders' lookups, the recall
# part's in-process builds) spans tenants, as an operator's command does: the system scope on
# every connection it opens (a plain role sees no row otherwise). The in-process profiles switch
# it off, so each profiled request starts fail-closed and is scoped by its key, as in gunicorn.
_SYSTEM_SCOPE = {"on": True}


def _system_scope_on_connect(sender: Any, connection: Any, **_: Any) -> None:
    from django.db import DEFAULT_DB_ALIAS

    from memoryhub.core.rls import rls_set_system

    if _SYSTEM_SCOPE["on"] and connection.alias == DEFAULT_DB_ALIAS:
        rls_set_system()


def bench_system_scope(on: bool) -> None:
    """Switch the bench process's system scope on (every connection, this one included) or off
    (this connection closed: the next one starts fail-closed, as a gunicorn worker's does)."""
    from django.db import connection

    from memoryhub.core.rls import rls_set_system

    _SYSTEM_SCOPE["on"] = on
    if on:
        rls_set_system()
    else:
        connection.close()


# --- tenants and API keys -------------------------------------------------------------------------


def bench_tenant() -> Tenant:
    from memoryhub.accounts.models import Tenant
    from memoryhub.accounts.services import tenant_create

    tenant = Tenant.objects.filter(slug=TENANT_SLUG).first()
    return tenant or tenant_create(slug=TENANT_SLUG, name="Benchmark")


def create_api_key(tenant: Tenant) -> tuple[Any, str]:
    from memoryhub.accounts.services import api_key_create

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    return api_key_create(tenant=tenant, name=f"bench {stamp}", scopes=["read", "write"])


# A summary threshold no session reaches: a policy with it never requests a summary.
SUMMARY_OUT_OF_REACH = 2_000_000_000


def policy_tenant_key(slug: str, *, api_key_ids: list[str], **policy: Any) -> tuple[Tenant, str]:
    """A bench tenant whose tenant-wide MemoryPolicy holds `policy` (created or updated), and a
    new API key of it (its id added to `api_key_ids`, deleted at the end): the tenant and the
    key's secret. Called before gunicorn starts: its workers cache policies for a few seconds."""
    from memoryhub.accounts.models import MemoryPolicy, Tenant
    from memoryhub.accounts.services import tenant_create

    tenant = Tenant.objects.filter(slug=slug).first() or tenant_create(slug=slug, name=slug)
    MemoryPolicy.objects.update_or_create(tenant=tenant, agent_id="", defaults=policy)
    key, secret = create_api_key(tenant)
    api_key_ids.append(str(key.pk))
    return tenant, secret


# --- gunicorn and the HTTP client -----------------------------------------------------------------


class Gunicorn:
    """gunicorn in its own process group; stopped (group-wide) on exit, Ctrl-C included."""

    def __init__(
        self,
        *,
        env: dict[str, str],
        workers: int,
        worker_class: str,
        threads: int,
        root: Path = ROOT,
    ):
        # `root`: the checkout it serves (bench/ab.py serves another revision from a worktree,
        # with the worktree first on PYTHONPATH in `env`).
        self.root = root
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
            cwd=self.root,
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


# --- the run --------------------------------------------------------------------------------------


@dataclass
class Setup:
    """What runner.prepare made ready for the parts: the configuration, the processes'
    environment, the bench tenant and its key, and each chosen part's data."""

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
    recall: RecallSetup | None = None  # None: --only without recall
    sessions: list[str] = field(default_factory=list)  # append sessions, deleted at the end

    def new_session(self, label: str, tenant: Tenant | None = None, user: bool = True) -> str:
        from memoryhub.core.rls import rls_system_scope
        from sessions_app.services import session_create_or_get

        with rls_system_scope():  # also during the profiles (bench_system_scope(False))
            session, _ = session_create_or_get(
                tenant=tenant or self.tenant,
                user_id=f"bench:{label}" if user else None,
                agent_id="bench",
                metadata={"bench": "append"},
            )
        self.sessions.append(str(session.pk))
        return str(session.pk)


def delete_sessions_and_keys(
    database_url: str, session_ids: list[str], api_key_ids: list[str]
) -> None:
    """What a run leaves behind: the sessions it appended to (their rows too) and its keys."""
    with pg_connect(database_url) as conn:
        ids = [uuid.UUID(value) for value in session_ids]
        if ids:
            # A message's vector first (the recall part embeds a session's messages): Django's
            # cascade is not the database's.
            conn.execute(
                "DELETE FROM sessions_app_messagevector WHERE message_id IN "
                "(SELECT id FROM sessions_app_message WHERE session_id = ANY(%s))",
                (ids,),
            )
            conn.execute("DELETE FROM sessions_app_message WHERE session_id = ANY(%s)", (ids,))
            conn.execute("DELETE FROM sessions_app_summary WHERE session_id = ANY(%s)", (ids,))
            conn.execute("DELETE FROM sessions_app_stateentry WHERE session_id = ANY(%s)", (ids,))
            conn.execute("DELETE FROM sessions_app_session WHERE id = ANY(%s)", (ids,))
        if api_key_ids:
            conn.execute("DELETE FROM accounts_apikey WHERE id = ANY(%s)", (api_key_ids,))
        conn.commit()


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
