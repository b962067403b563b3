"""The hourly ANALYZE of the conversation tables' keys (sessions_app.tasks.keys_analyze,
memoryhub.core.statistics): a tenant the statistics do not know yet looks like a few rows to
PostgreSQL, which then read its sessions through the tenant's whole (tenant_id, created_at)
index. After the task, the same read goes through (session_id, seq)."""

from __future__ import annotations

import pytest
from django.db import connection

from memoryhub.accounts.models import Tenant
from sessions_app.models import Message, Session
from sessions_app.tasks import keys_analyze

pytestmark = pytest.mark.django_db


def _sessions_with_messages(tenant: Tenant, *, sessions: int, messages: int) -> list[Session]:
    made = Session.objects.bulk_create(
        Session(tenant=tenant, last_active_at="2026-01-01T00:00:00Z") for _ in range(sessions)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO sessions_app_message (tenant_id, session_id, seq, role, content, name, "
            "tool_call_id, metadata, token_count, created_at) SELECT %s, s, n, 'user', 'x', '', "
            "'', '{}', 1, now() FROM unnest(%s::uuid[]) AS s, generate_series(1, %s) AS n",
            [tenant.pk, [session.pk for session in made], messages],
        )
    return made


def _last_20_plan(tenant: Tenant, session: Session) -> str:
    return (
        Message.objects.for_tenant(tenant).filter(session=session).order_by("-seq")[:20].explain()
    )


def test_after_the_task_a_new_tenants_reads_go_through_their_sessions_index(tenant, other_tenant):
    if connection.vendor != "postgresql":
        assert keys_analyze() is False  # SQLite: nothing to do
        return
    _sessions_with_messages(other_tenant, sessions=200, messages=100)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE sessions_app_message")
    # Then this tenant arrives: 30 sessions of 100 messages the statistics know nothing of.
    session = _sessions_with_messages(tenant, sessions=30, messages=100)[0]
    assert "message_unique_session_seq" not in _last_20_plan(tenant, session)

    assert keys_analyze() is True

    assert "message_unique_session_seq" in _last_20_plan(tenant, session)
