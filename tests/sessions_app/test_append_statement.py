"""The append's statements: on PostgreSQL the claim of the seqs and the insert are one statement
(the claim's UPDATE in a data-modifying CTE); on SQLite, and for a message bringing its own time
(whose check reads between them), they are two. Either way the rows stored are the ones the
append returns, field for field, and a session that is not the tenant's gets nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryhub.accounts.models import Tenant
from memoryhub.core.errors import ResourceNotFound
from sessions_app.models import Message, Session
from sessions_app.services import MessageInput, MessageInputInvalid, message_append_batch

pytestmark = pytest.mark.django_db

# Every column of the table, by attribute name.
FIELDS = tuple(field.attname for field in Message._meta.concrete_fields)
TOOL_CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
]


@pytest.fixture(autouse=True)
def _no_embeddings(settings):
    settings.EMBEDDINGS_BACKEND = "off"


def batch() -> list[MessageInput]:
    # Tool calls null in some rows and set in others, JSON metadata, every text column used.
    return [
        MessageInput(role="user", content="What's the weather in Oslo?", metadata={"lang": "en"}),
        MessageInput(role="assistant", content="", tool_calls=TOOL_CALLS),
        MessageInput(
            role="tool", content='{"c": -3}', name="weather", tool_call_id="call_1", metadata={}
        ),
        MessageInput(role="assistant", content="Minus three, with snow: «brr» ✓."),
    ]


def as_stored(messages: list[Message]) -> list[dict[str, object]]:
    return [{name: getattr(message, name) for name in FIELDS} for message in messages]


def message_statements(queries: list[dict[str, str]]) -> list[str]:
    table = Message._meta.db_table
    return [query["sql"] for query in queries if table in query["sql"]]


def test_the_returned_messages_are_the_stored_rows(session: Session) -> None:
    message_append_batch(
        tenant=session.tenant, session_id=session.pk, messages=[MessageInput("user", "first")]
    )

    returned = message_append_batch(tenant=session.tenant, session_id=session.pk, messages=batch())

    stored = list(Message.objects.filter(session=session, seq__gt=1).order_by("seq"))
    assert as_stored(returned) == as_stored(stored)
    assert [message.seq for message in returned] == [2, 3, 4, 5]
    assert [message.tool_calls for message in returned] == [None, TOOL_CALLS, None, None]
    assert all(not message._state.adding for message in returned)
    counters = Session.objects.values_list("last_seq", "message_count").get(pk=session.pk)
    assert counters == (5, 5)


def test_on_postgresql_the_claim_and_the_insert_are_one_statement(session: Session) -> None:
    with CaptureQueriesContext(connection) as captured:
        message_append_batch(tenant=session.tenant, session_id=session.pk, messages=batch())

    statements = message_statements(captured.captured_queries)
    if connection.vendor == "postgresql":
        assert len(statements) == 1
        assert statements[0].startswith("WITH claim AS (UPDATE")
    else:
        assert len(statements) == 1  # the insert; the claim (its own statement) names no message
        assert statements[0].startswith("INSERT INTO")
    assert Message.objects.filter(session=session).count() == 4


def test_a_message_with_its_own_time_takes_the_two_statements(session: Session) -> None:
    earlier = timezone.now() - dt.timedelta(hours=1)
    message_append_batch(
        tenant=session.tenant, session_id=session.pk, messages=[MessageInput("user", "first")]
    )

    with CaptureQueriesContext(connection) as captured:
        returned = message_append_batch(
            tenant=session.tenant,
            session_id=session.pk,
            messages=[MessageInput("assistant", "late", created_at=timezone.now())],
        )
    # A time before the previous message's is still refused, under the claim's lock.
    with pytest.raises(MessageInputInvalid, match="before the session's previous message"):
        message_append_batch(
            tenant=session.tenant,
            session_id=session.pk,
            messages=[MessageInput("user", "too early", created_at=earlier)],
        )

    statements = message_statements(captured.captured_queries)
    assert [sql.split()[0] for sql in statements] == ["SELECT", "INSERT"]
    assert as_stored(returned) == as_stored(list(Message.objects.filter(seq=2, session=session)))
    assert Session.objects.values_list("last_seq", flat=True).get(pk=session.pk) == 2


def test_another_tenants_session_gets_nothing(session: Session, other_tenant: Tenant) -> None:
    before = Session.objects.values().get(pk=session.pk)

    with pytest.raises(ResourceNotFound):
        message_append_batch(tenant=other_tenant, session_id=session.pk, messages=batch())

    assert not Message.objects.filter(session=session).exists()
    assert Session.objects.values().get(pk=session.pk) == before
