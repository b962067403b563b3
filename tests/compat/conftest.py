"""Seed 002's client runs against a live MemoryHub (pytest-django's `live_server`: a real HTTP
server in a thread over the test database), as clients/python's tests do."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import api_key_create
from tests.compat.seed002_client import SeedMemoryClient

T = TypeVar("T")
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A live server per test (a thread, a flushed database): `make test-fast` leaves them out.
    for item in items:
        if HERE in item.path.parents and "live_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def live_tenant(transactional_db: None) -> Tenant:
    return Tenant.objects.create(slug="seed002", name="Seed 002 platform")


@pytest.fixture
def seed_token(live_tenant: Tenant) -> str:
    return api_key_create(tenant=live_tenant, name="seed002 sdk", scopes=["read", "write"])[1]


@pytest.fixture
def memory(live_server: Any, seed_token: str) -> Callable[..., Any]:
    """memory(scenario) runs `scenario(client)` with a seed client, as the seed's async tests
    run with a `memory` client; memory(scenario, user_id=...) acts as another of its users."""

    def run(
        scenario: Callable[[SeedMemoryClient], Awaitable[T]], *, user_id: str | None = None
    ) -> T:
        async def main() -> T:
            async with SeedMemoryClient(
                str(live_server.url), seed_token, user_id=user_id
            ) as client:
                return await scenario(client)

        return asyncio.run(main())

    return run
