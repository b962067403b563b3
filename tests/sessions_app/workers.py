"""Real Celery workers for tests: subprocesses consuming from the Redis broker in REDIS_URL and
writing to the test database, so a test can watch them work, and kill them.

Also runnable: `python -m tests.sessions_app.workers worker ...` is `celery -A memoryhub worker
...`, except that TEST_CELERY_VISIBILITY_TIMEOUT (seconds), when set, replaces the broker's
visibility timeout, so a test can see Redis redeliver a dead worker's message without waiting
the production hour.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar
from urllib.parse import quote

import psutil  # type: ignore[import-untyped]  # no stubs installed
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
VISIBILITY_TIMEOUT_ENV = "TEST_CELERY_VISIBILITY_TIMEOUT"
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


class CeleryWorker:
    """One `celery worker` subprocess, in a process group of its own (with its pool children).

    `env` is added to the test process's environment, after DATABASE_URL (the test database) and
    CELERY_TASK_ALWAYS_EAGER=false.
    """

    def __init__(
        self,
        *,
        name: str,
        log_path: Path,
        env: dict[str, str] | None = None,
        pool: str = "solo",
        concurrency: int = 1,
    ) -> None:
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
        self.pool = pool
        self.concurrency = concurrency
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[str] | None = None

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> CeleryWorker:
        self._log = self.log_path.open("w")
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.sessions_app.workers",
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
            ],
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: kill() reaches the pool too
        )
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> CeleryWorker:
        """Wait until the worker consumes (its pool is up by then), or fail if it died."""
        wait_until(
            lambda: " ready." in self.log() or not self.alive,
            timeout=timeout,
            describe=lambda: f"worker {self.name} not ready:\n{self.log_tail()}",
        )
        assert self.alive, f"worker {self.name} exited:\n{self.log_tail()}"
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

    def task_ids(self, task_name: str, event: str = "received") -> list[str]:
        """Ids of the task's messages, in log order, for which the worker logged `event`
        ("received" when it took the message, "succeeded" when it finished)."""
        pattern = rf"Task {re.escape(task_name)}\[([0-9a-f-]+)\] {event}"
        return re.findall(pattern, self.log())


def main() -> None:
    from memoryhub.celery import app

    if visibility_timeout := os.environ.get(VISIBILITY_TIMEOUT_ENV):
        app.conf.broker_transport_options = {
            **(app.conf.broker_transport_options or {}),
            "visibility_timeout": int(visibility_timeout),
        }
    app.worker_main(sys.argv[1:])


if __name__ == "__main__":
    main()
