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
from tests.helpers import sessions_with_messages

pytestmark = pytest.mark.django_db


def _last_20_plan(tenant: Tenant, session: Session) -> str:
    return (
        Message.objects.for_tenant(tenant).filter(session=session).order_by("-seq")[:20].explain()
    )


def test_after_the_task_a_new_tenants_reads_go_through_their_sessions_index(tenant, other_tenant):
    if connection.vendor != "postgresql":
        assert keys_analyze() is False  # SQLite: nothing to do
        return
    sessions_with_messages(other_tenant, sessions=200, messages=100)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE sessions_app_message")
    # Then this tenant arrives: 30 sessions of 100 messages the statistics know nothing of.
    session = sessions_with_messages(tenant, sessions=30, messages=100)[0]
    assert "message_unique_session_seq" not in _last_20_plan(tenant, session)

    assert keys_analyze() is True

    assert "message_unique_session_seq" in _last_20_plan(tenant, session)
