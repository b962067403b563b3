"""A live MemoryHub (pytest-django's `live_server`: a real HTTP server in a thread, over the test
database) whose `/mcp/` the tests reach with the official MCP client, and tenants with keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import api_key_create

ALL_SCOPES = ["read", "write", "purge", "global-memory"]


@pytest.fixture
def tenant(transactional_db: None) -> Tenant:
    return Tenant.objects.create(slug="acme", name="Acme")


@pytest.fixture
def other_tenant(transactional_db: None) -> Tenant:
    return Tenant.objects.create(slug="outsider", name="Outsider")


@pytest.fixture
def make_key(transactional_db: None) -> Callable[..., str]:
    def make(tenant: Tenant, scopes: list[str] | None = None) -> str:
        return api_key_create(tenant=tenant, name="mcp test", scopes=scopes or ALL_SCOPES)[1]

    return make


@pytest.fixture
def mcp_url(live_server: Any) -> str:
    return f"{live_server.url}/mcp/"


@pytest.fixture
def destructive_tools(settings: Any) -> None:
    # The live server runs in a thread of this process: it reads the same settings object.
    settings.MCP_DESTRUCTIVE_TOOLS = True
