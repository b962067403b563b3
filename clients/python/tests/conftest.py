"""The SDK's tests run against a live MemoryHub: pytest-django's `live_server` (a real HTTP server
in a thread, over the test database) and a tenant with a real API key. No mocks, except the
stub transports of test_sdk_retries.py, which say so."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from memoryhub_client import MemoryHub

from memoryhub.accounts.models import Tenant
from memoryhub.accounts.selectors import memory_policy_cache_clear
from memoryhub.accounts.services import api_key_create
from memoryhub.core.rls import rls_system_scope

ALL_SCOPES = ["read", "write", "purge", "global-memory"]
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A live server per test (a thread, a flushed database): seconds each, as the browser
    # tests, so `make test-fast` leaves them out the same way.
    for item in items:
        if HERE in item.path.parents and "live_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _fresh_memory_policies() -> None:
    # As in tests/conftest.py: SQLite reuses tenant ids, so start with an empty policy cache.
    memory_policy_cache_clear()


@pytest.fixture(autouse=True)
def _rls_system_scope(request: pytest.FixtureRequest) -> Iterator[None]:
    # As in tests/conftest.py: the test's own setup acts for every tenant (core.rls); the
    # server's requests scope themselves.
    if "_django_db_helper" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("_django_db_helper")
    with rls_system_scope():
        yield


@pytest.fixture
def tenant(transactional_db: None) -> Tenant:
    return Tenant.objects.create(slug="sdk", name="SDK tests")


@pytest.fixture
def make_key(transactional_db: None) -> Callable[..., str]:
    def make(tenant: Tenant, scopes: list[str] | None = None) -> str:
        return api_key_create(tenant=tenant, name="sdk test", scopes=scopes or ALL_SCOPES)[1]

    return make


@pytest.fixture
def api_key(tenant: Tenant, make_key: Callable[..., str]) -> str:
    return make_key(tenant)


@pytest.fixture
def base_url(live_server: Any) -> str:
    return str(live_server.url)


@pytest.fixture
def hub(base_url: str, api_key: str) -> Iterator[MemoryHub]:
    with MemoryHub(base_url, api_key) as client:
        yield client
