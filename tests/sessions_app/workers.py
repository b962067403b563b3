"""Real Celery workers for tests: subprocesses consuming from the Redis broker in REDIS_URL and
writing to the test database, so a test can watch them work, and kill them. Also a real `celery
beat`, a private `redis-server` a test may restart, and `manage.py` commands started together.

Also runnable: `python -m tests.sessions_app.workers worker ...` is `celery -A memoryhub worker
...` (and `... beat ...` is `celery -A memoryhub beat ...`), except that:

- TEST_CELERY_VISIBILITY_TIMEOUT (seconds), when set, replaces the broker's visibility timeout,
  so a test can see Redis redeliver a dead worker's message without waiting the production hour;
- TEST_CELERY_TRANSPORT_OPTIONS (a JSON object), when set, is merged into the broker's transport
  options (e.g. kombu's `unacked_restore_interval`);
- TEST_FROZEN_NOW (ISO 8601 with an offset), when set, stops the process's wall clock at that
  instant (time-machine, tick=False) before Celery starts: time.time(), datetime.now() and so
  Django's timezone.now() return it for the life of the process. time.monotonic() is not
  touched, so kombu's and Celery's timers (which use it) still run.

`python -m tests.sessions_app.workers manage ARGS...` is `manage.py ARGS...`, started in step
with others: with TEST_START_BARRIER (a folder), the process sets Django up, connects to the
database, writes `<pid>.ready` there and waits for a file `go` before running the command.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar
from urllib.parse import quote

import psutil  # type: ignore[import-untyped]  # no stubs installed
import redis
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
VISIBILITY_TIMEOUT_ENV = "TEST_CELERY_VISIBILITY_TIMEOUT"
TRANSPORT_OPTIONS_ENV = "TEST_CELERY_TRANSPORT_OPTIONS"
FROZEN_NOW_ENV = "TEST_FROZEN_NOW"
START_BARRIER_ENV = "TEST_START_BARRIER"
READY_TIMEOUT_SECONDS = 60
STOP_TIMEOUT_SECONDS = 20

T = TypeVar("T")


def database_url() -> str:
    """The test database (not the one settings name at import) as a DATABASE_URL."""
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{database['NAME']}"
    password = database.get("PASSWORD") or ""
    credentials = quote(database["USER"]) + (f":{quote(password)}" if password else "")
    return (
        f"postgres://{credentials}@{database['HOST'] or '127.0.0.1'}:"
        f"{database['PORT'] or 5432}/{database['NAME']}"
    )


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float,
    describe: Callable[[], str],
    interval: float = 0.2,
) -> T:
    """Poll until `predicate()` is truthy and return it; fail with `describe()` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(describe())
        time.sleep(interval)


class CeleryProcess:
    """One Celery subprocess (`python -m tests.sessions_app.workers <command> ...`), in a process
    group of its own (with its pool children), logging to `log_path`.

    `env` is added to the test process's environment, after DATABASE_URL (the test database) and
    CELERY_TASK_ALWAYS_EAGER=false.
    """

    #: What the process logs once it is up.
    ready_marker = ""

    def __init__(self, *, name: str, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[str] | None = None

    def arguments(self) -> list[str]:
        raise NotImplementedError

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> CeleryProcess:
        self._log = self.log_path.open("w")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.sessions_app.workers", *self.arguments()],
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: kill() reaches the pool too
        )
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> CeleryProcess:
        """Wait until the process logs that it is up, or fail if it died."""
        wait_until(
            lambda: self.ready_marker in self.log() or not self.alive,
            timeout=timeout,
            describe=lambda: f"{self.name} not ready:\n{self.log_tail()}",
        )
        assert self.alive, f"{self.name} exited:\n{self.log_tail()}"
        return self

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self._process is not None, "start() the worker first"
        return self._process

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def pool_processes(self) -> list[int]:
        """Pids of the prefork pool's children (none with the solo pool)."""
        try:
            return [child.pid for child in psutil.Process(self.process.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def kill(self) -> None:
        """SIGKILL the whole worker, pool included: no warm shutdown, no ack, no reject."""
        self._signal_group(signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        self._wait_group_gone()

    def stop(self) -> None:
        """Shut down (SIGTERM: warm shutdown), killing what is left after a while."""
        if self._process is not None:
            self._signal_group(signal.SIGTERM)
            try:
                self._process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self._process.wait(timeout=STOP_TIMEOUT_SECONDS)
            self._signal_group(signal.SIGKILL)  # pool children orphaned by a killed parent
        if self._log is not None:
            self._log.close()
            self._log = None

    def _signal_group(self, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):  # the group is gone already
            os.killpg(self.process.pid, signum)

    def _wait_group_gone(self) -> None:
        def gone() -> bool:
            try:
                os.killpg(self.process.pid, 0)
            except ProcessLookupError:
                return True
            return False

        wait_until(
            gone, timeout=STOP_TIMEOUT_SECONDS, describe=lambda: f"{self.name} survived SIGKILL"
        )

    # --- what it logged --------------------------------------------------------------------
    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def log_tail(self, chars: int = 4000) -> str:
        return self.log()[-chars:]


class CeleryWorker(CeleryProcess):
    """One `celery worker` subprocess (consuming the `celery` queue), in a process group of its
    own (with its pool children)."""

    ready_marker = " ready."

    def __init__(
        self,
        *,
        name: str,
        log_path: Path,
        env: dict[str, str] | None = None,
        pool: str = "solo",
        concurrency: int = 1,
    ) -> None:
        super().__init__(name=name, log_path=log_path, env=env)
        self.pool = pool
        self.concurrency = concurrency

    def arguments(self) -> list[str]:
        return [
            "worker",
            f"--hostname={self.name}@%h",
            f"--pool={self.pool}",
            f"--concurrency={self.concurrency}",
            "-Q",
            "celery",
            "--loglevel=INFO",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
        ]

    def start(self) -> CeleryWorker:
        super().start()
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> CeleryWorker:
        """Wait until the worker consumes (its pool is up by then), or fail if it died."""
        super().wait_ready(timeout)
        return self

    def task_ids(self, task_name: str, event: str = "received") -> list[str]:
        """Ids of the task's messages, in log order, for which the worker logged `event`
        ("received" when it took the message, "succeeded" when it finished)."""
        pattern = rf"Task {re.escape(task_name)}\[([0-9a-f-]+)\] {event}"
        return re.findall(pattern, self.log())

    def task_results(self, task_name: str) -> dict[str, str]:
        """The logged return value (its repr) of each task id that succeeded."""
        pattern = rf"Task {re.escape(task_name)}\[([0-9a-f-]+)\] succeeded in [0-9.e-]+s: (.*)"
        return dict(re.findall(pattern, self.log()))


class CeleryBeat(CeleryProcess):
    """One `celery beat` subprocess, with the scheduler in settings (django-celery-beat's
    DatabaseScheduler, which copies CELERY_BEAT_SCHEDULE into the test database at start)."""

    ready_marker = "beat: Starting..."

    def __init__(self, *, name: str, log_path: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(name=name, log_path=log_path, env=env)
        self.schedule_path = log_path.with_suffix(".schedule")

    def arguments(self) -> list[str]:
        # --schedule only matters to the default file scheduler; keep it out of the repository.
        return ["beat", "--loglevel=INFO", f"--schedule={self.schedule_path}"]

    def start(self) -> CeleryBeat:
        super().start()
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> CeleryBeat:
        super().wait_ready(timeout)
        return self

    def sent(self, entry: str) -> int:
        """How many times beat has sent the schedule entry `entry`."""
        return self.log().count(f"Sending due task {entry} (")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """A private `redis-server` in `directory`, with an append-only file fsynced on every write
    and no snapshots: restarted in the same folder, it comes back with every write it
    acknowledged. On a port of its own, so a test can stop it without touching anyone's Redis."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self._process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--logfile",
                str(self.directory / f"redis-{self.starts}.log"),
            ],
            cwd=self.directory,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self.ping, timeout=READY_TIMEOUT_SECONDS, describe=lambda: f"{self.url} not up")
        return self

    def ping(self) -> bool:
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False
        finally:
            client.close()

    def stop(self, signum: signal.Signals = signal.SIGTERM) -> None:
        """SIGTERM: Redis's own shutdown (as SHUTDOWN); SIGKILL: a crash."""
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self._process.send_signal(signum)
        try:
            self._process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=STOP_TIMEOUT_SECONDS)
        self._process = None


def _freeze_clock() -> None:
    if frozen := os.environ.get(FROZEN_NOW_ENV):
        import time_machine

        instant = dt.datetime.fromisoformat(frozen)
        assert instant.tzinfo is not None, f"{FROZEN_NOW_ENV} needs an offset: {frozen}"
        # Never stopped: the clock stays at `instant` until the process exits.
        time_machine.travel(instant, tick=False).start()


def _manage(arguments: list[str]) -> None:
    import django
    from django.core.management import execute_from_command_line
    from django.db import connection

    django.setup()
    if barrier := os.environ.get(START_BARRIER_ENV):
        connection.ensure_connection()
        folder = Path(barrier)
        (folder / f"{os.getpid()}.ready").touch()
        wait_until(
            (folder / "go").exists,
            timeout=READY_TIMEOUT_SECONDS,
            describe=lambda: "no go",
            interval=0.005,
        )
    execute_from_command_line(["manage.py", *arguments])


def main() -> None:
    _freeze_clock()
    arguments = sys.argv[1:]
    if arguments[:1] == ["manage"]:
        _manage(arguments[1:])
        return
    from memoryhub.celery import app

    options = dict(app.conf.broker_transport_options or {})
    if visibility_timeout := os.environ.get(VISIBILITY_TIMEOUT_ENV):
        options["visibility_timeout"] = int(visibility_timeout)
    if extra := os.environ.get(TRANSPORT_OPTIONS_ENV):
        options.update(json.loads(extra))
    app.conf.broker_transport_options = options
    if arguments[:1] == ["worker"]:
        app.worker_main(arguments)
    else:
        app.start(arguments)


if __name__ == "__main__":
    main()
