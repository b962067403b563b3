"""The production server for tests: `gunicorn -c gunicorn.conf.py memoryhub.wsgi` in a process
group of its own, on a free loopback port, on the test database (tests.sessions_app.workers'
`database_url`) unless the test gives another DATABASE_URL."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.sessions_app.workers import (
    READY_TIMEOUT_SECONDS,
    ROOT,
    STOP_TIMEOUT_SECONDS,
    database_url,
    free_port,
    wait_until,
)


class Gunicorn:
    def __init__(self, *, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self.port = free_port()
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> Gunicorn:
        with self.log_path.open("w") as log:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gunicorn",
                    "-c",
                    "gunicorn.conf.py",
                    # The loopback only, rather than the 0.0.0.0 a PORT would give.
                    "--bind",
                    f"127.0.0.1:{self.port}",
                    "memoryhub.wsgi",
                ],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() reaches the workers
            )
        wait_until(
            self._answers,
            timeout=READY_TIMEOUT_SECONDS,
            describe=lambda: f"gunicorn did not answer /healthz:\n{self.log_tail()}",
        )
        return self

    def _answers(self) -> bool:
        assert self._process is not None
        if self._process.poll() is not None:
            raise AssertionError(f"gunicorn exited:\n{self.log_tail()}")
        with contextlib.suppress(OSError, http.client.HTTPException):
            return self.request("GET", "/healthz", timeout=2).status == 200
        return False

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = 30,
    ) -> http.client.HTTPResponse:
        """One request on a connection of its own; the response's body is read (`.data`)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            response.data = response.read()  # type: ignore[attr-defined]
            return response
        finally:
            connection.close()

    def stop(self) -> None:
        process = self._process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        self._process = None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""
