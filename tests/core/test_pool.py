"""DATABASE_POOL (psycopg's pool, settings): a pooled connection never carries one tenant's
row-level-security setting into another's use. PostgreSQL only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import api_key_create
from memoryhub.core.rls import rls_system_scope
from sessions_app.models import Session
from sessions_app.services import session_create_or_get
from tests.helpers import client_for

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the pool and row-level security are PostgreSQL's"
)

SESSIONS = "/api/v1/sessions/"


def tenant_setting() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(current_setting('app.tenant_id', true), '')")
        row = cursor.fetchone()
    assert row is not None
    return str(row[0])


@pytest.fixture
def pooled(transactional_db: Any) -> Iterator[Any]:
    """The default connection behind a pool of one: every use after a close is the same
    server connection, as two requests on one pooled connection are."""
    settings_dict = connection.settings_dict
    saved = settings_dict["CONN_MAX_AGE"], dict(settings_dict["OPTIONS"])
    connection.close()
    settings_dict["CONN_MAX_AGE"] = 0
    settings_dict["OPTIONS"]["pool"] = {"min_size": 1, "max_size": 1, "timeout": 10}
    try:
        yield connection.pool
    finally:
        connection.close()
        connection.close_pool()
        settings_dict["CONN_MAX_AGE"], settings_dict["OPTIONS"] = saved


def a_tenant_with_a_session(slug: str) -> tuple[str, str]:
    with rls_system_scope():
        tenant = Tenant.objects.create(slug=slug, name=slug)
        _, secret = api_key_create(tenant=tenant, name="k")
        session, _ = session_create_or_get(tenant=tenant, user_id="u", agent_id="a")
    return secret, str(session.pk)


def test_consecutive_requests_of_two_tenants_on_one_pooled_connection(pooled):
    secret_a, session_a = a_tenant_with_a_session("pool-a")
    secret_b, session_b = a_tenant_with_a_session("pool-b")
    connection.close()  # back to the pool

    seen_a = client_for(secret_a).get(SESSIONS).json()["results"]
    pid = connection.connection.info.backend_pid
    assert tenant_setting() == ""  # the request left the connection as it found it
    connection.close()
    seen_b = client_for(secret_b).get(SESSIONS).json()["results"]

    assert connection.connection.info.backend_pid == pid
    assert [row["id"] for row in seen_a] == [session_a]
    assert [row["id"] for row in seen_b] == [session_b]


def test_a_connection_returned_with_a_tenant_set_starts_fail_closed(pooled):
    _, session_a = a_tenant_with_a_session("pool-a")
    with rls_system_scope():
        tenant_id = Tenant.objects.get(slug="pool-a").pk
    connection.close()
    # Whatever left it so (a crash between the scope and its reset), the next use starts at ''.
    raw = pooled.getconn()
    raw.execute("SELECT set_config('app.tenant_id', %s, false)", [str(tenant_id)])
    pid = raw.info.backend_pid
    pooled.putconn(raw)

    connection.ensure_connection()

    assert connection.connection.info.backend_pid == pid
    assert tenant_setting() == ""
    assert not Session.objects.filter(pk=session_a).exists()
