"""Three actors, as in healthchecks' tests: the owner's key, a read-only key of the same tenant,
and an outsider (another tenant) whose every request for the owner's data must be a 404."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from memoryhub.accounts.models import ApiKey, Membership, MembershipRole, Tenant, User
from memoryhub.accounts.selectors import memory_policy_cache_clear
from memoryhub.accounts.services import api_key_create
from memoryhub.celery import app
from memoryhub.core.rls import rls_system_scope
from sessions_app import services
from sessions_app.models import Session
from sessions_app.recall import index_cache
from tests.factories import TenantFactory
from tests.helpers import client_for
from tests.sessions_app.workers import CeleryBeat, CeleryWorker

pytest_plugins = ["tests.fakes.fixtures"]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    if any("tests/e2e/" in str(getattr(report, "nodeid", "")) for report in skipped):
        from tests.e2e.helpers import SKIP_REASON

        terminalreporter.write_line(f"NOTE: {SKIP_REASON}", yellow=True, bold=True)


def pytest_report_header() -> list[str]:
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    broker = "redis" if settings.REDIS_URL else "filesystem"
    return [f"memoryhub: database={engine} broker={broker}"]


STRAGGLERS_WAIT_SECONDS = 15.0
# The test database's other backends: listed while waiting, then ended.
_OTHER_BACKENDS = (
    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
_OTHER_BACKENDS_SQL = "SELECT pid " + _OTHER_BACKENDS
_OTHER_BACKENDS_END_SQL = "SELECT pg_terminate_backend(pid) " + _OTHER_BACKENDS


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's, and before it drops the test database: wait for the server processes
    of the real workers, beat and gunicorn the tests started and stopped (a killed client's
    backend outlives it by a moment), then end any still there. Otherwise the DROP fails with
    "being accessed by other users": a PytestWarning, and the test database is left behind."""
    yield
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        deadline = time.monotonic() + STRAGGLERS_WAIT_SECONDS
        cursor.execute(_OTHER_BACKENDS_SQL)
        while cursor.fetchall() and time.monotonic() < deadline:
            time.sleep(0.1)
            cursor.execute(_OTHER_BACKENDS_SQL)
        cursor.execute(_OTHER_BACKENDS_END_SQL)  # none left: ends nothing


@pytest.fixture(autouse=True)
def _fresh_memory_policies() -> None:
    # Rolled-back tests fire no delete signal, and SQLite reuses tenant ids: start each test
    # with an empty per-process policy cache.
    memory_policy_cache_clear()


@pytest.fixture(autouse=True)
def _fresh_recall_indexes() -> None:
    # The same for the per-process search indexes: a rolled-back test leaves them behind, and
    # a later test's person may get the same id.
    index_cache().clear()


@pytest.fixture(autouse=True)
def _fresh_cache(settings: Any) -> None:
    # The API's rate-limit and failed-key counters live in the cache, which outlives a test
    # (and with Redis, a test run): give each test keys of its own.
    settings.CACHES = {
        "default": {**settings.CACHES["default"], "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}
    }


@pytest.fixture(autouse=True)
def _rls_system_scope(request: pytest.FixtureRequest) -> Iterator[None]:
    # PostgreSQL's row-level security (memoryhub.core.rls): a test's own setup and assertions act
    # for every tenant; each request, task and command it makes sets (and resets) its own scope.
    if "_django_db_helper" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("_django_db_helper")
    with rls_system_scope():
        yield


@pytest.fixture
def tenant(db: None) -> Tenant:
    return TenantFactory(slug="acme")


@pytest.fixture
def other_tenant(db: None) -> Tenant:
    return TenantFactory(slug="outsider")


@pytest.fixture
def make_key() -> Callable[..., tuple[ApiKey, str]]:
    def make(tenant: Tenant, scopes: list[str] | None = None, **kwargs: Any) -> tuple[ApiKey, str]:
        return api_key_create(
            tenant=tenant, name="test key", scopes=scopes or ["read", "write"], **kwargs
        )

    return make


@pytest.fixture
def api(tenant: Tenant, make_key: Callable[..., tuple[ApiKey, str]]) -> APIClient:
    return client_for(make_key(tenant)[1])


@pytest.fixture
def read_only_api(tenant: Tenant, make_key: Callable[..., tuple[ApiKey, str]]) -> APIClient:
    return client_for(make_key(tenant, scopes=["read"])[1])


@pytest.fixture
def outsider_api(other_tenant: Tenant, make_key: Callable[..., tuple[ApiKey, str]]) -> APIClient:
    return client_for(make_key(other_tenant, scopes=["read", "write", "purge", "mint"])[1])


@pytest.fixture
def session(tenant: Tenant) -> Session:
    created, _ = services.session_create_or_get(
        tenant=tenant, user_id="whatsapp:+4912345", agent_id="chat"
    )
    return created


@pytest.fixture
def limits(settings: Any) -> dict[str, int]:
    """Shrink limits for one test: `limits["STATE_CAP"] = 3` (pytest-django restores them)."""
    settings.MEMORYHUB_LIMITS = dict(settings.MEMORYHUB_LIMITS)
    return settings.MEMORYHUB_LIMITS  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def _static_files_without_collectstatic(settings: Any) -> None:
    # Production serves hashed files from `collectstatic`; tests read them from static/ as they are.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


# --- pages: people with a role in a tenant, logged in through Django's test client ---------------


@pytest.fixture
def member_client(db: None) -> Callable[..., Client]:
    """member_client(tenant, role="member") -> a Client logged in as a member of `tenant`."""
    made = 0

    def make(tenant: Tenant, role: str = MembershipRole.MEMBER, **more: Any) -> Client:
        nonlocal made
        made += 1
        user = User.objects.create_user(username=f"{role}-{made}", password="pw-for-tests-only")
        Membership.objects.create(user=user, tenant=tenant, role=role)
        for other in more.get("also", []):
            Membership.objects.create(user=user, tenant=other, role=role)
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def editor(tenant: Tenant, member_client: Callable[..., Client]) -> Client:
    return member_client(tenant, MembershipRole.MEMBER)


@pytest.fixture
def viewer(tenant: Tenant, member_client: Callable[..., Client]) -> Client:
    return member_client(tenant, MembershipRole.VIEWER)


# --- real Celery workers and beats (tests/sessions_app/workers.py) ---------------------------


@pytest.fixture
def celery_workers(tmp_path: Path) -> Iterator[Callable[..., CeleryWorker]]:
    """Start real workers: `celery_workers(env={...}, pool="prefork")` returns one that is ready.
    Each logs to its own file under tmp_path; all are stopped (or killed) at teardown."""
    started: list[CeleryWorker] = []

    def start(**options: Any) -> CeleryWorker:
        name = f"worker{len(started) + 1}"
        worker = CeleryWorker(name=name, log_path=tmp_path / f"{name}.log", **options)
        started.append(worker)
        return worker.start().wait_ready()

    try:
        yield start
    finally:
        for worker in reversed(started):
            worker.stop()


@pytest.fixture
def enqueue_for_real() -> Iterator[None]:
    # Tests run tasks eagerly by default; this sends them to the broker instead.
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = False
    yield
    app.conf.task_always_eager = previous


@pytest.fixture
def celery_beat(tmp_path: Path) -> Iterator[Callable[..., CeleryBeat]]:
    """Start a real `celery beat`: `celery_beat(env={...})` returns it once it is up. It logs to
    tmp_path/beat.log and is stopped at teardown."""
    started: list[CeleryBeat] = []

    def start(**options: Any) -> CeleryBeat:
        name = f"beat{len(started) + 1}"
        beat = CeleryBeat(name=name, log_path=tmp_path / f"{name}.log", **options)
        started.append(beat)
        return beat.start().wait_ready()

    try:
        yield start
    finally:
        for beat in reversed(started):
            beat.stop()
