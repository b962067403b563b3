"""An append's transaction on PostgreSQL: the common append (the policy every agent's, no message
bringing its own time) is one statement, which outside a caller's transaction runs as its own
(no COMMIT round trip); every other append, and any append inside a caller's transaction, runs
in one as before. Either way all of it or none of it is stored."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from memoryhub.accounts.models import MemoryPolicy, Tenant
from memoryhub.core.errors import ResourceNotFound
from sessions_app import services
from sessions_app.models import Message, Session
from sessions_app.services import MessageInput
from tests.factories import SessionFactory, TenantFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="SQLite appends in a transaction of two statements (no data-modifying CTE)",
    ),
]


@contextmanager
def inserts_seen() -> Iterator[list[dict[str, Any]]]:
    """For each statement that inserts messages: whether it ran in autocommit (its own
    transaction) and whether a Django transaction was open."""
    seen: list[dict[str, Any]] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if 'INSERT INTO "sessions_app_message"' in sql:
            db = context["connection"]
            seen.append({"autocommit": db.get_autocommit(), "atomic": db.in_atomic_block})
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield seen


def turns(*contents: str, created_at: dt.datetime | None = None) -> list[MessageInput]:
    return [
        MessageInput(role="user", content=content, created_at=created_at) for content in contents
    ]


@pytest.fixture
def tenant() -> Tenant:
    return TenantFactory(slug="one-statement")


def test_the_common_append_is_its_own_transaction_and_stores_everything(tenant: Tenant) -> None:
    session = SessionFactory(tenant=tenant)

    with inserts_seen() as seen:
        stored = services.message_append_batch(
            tenant=tenant, session_id=session.pk, messages=turns("one", "two", "three")
        )

    assert seen == [{"autocommit": True, "atomic": False}]
    assert [m.seq for m in stored] == [1, 2, 3]
    assert list(
        Message.objects.filter(session=session).order_by("seq").values_list("content", flat=True)
    ) == [
        "one",
        "two",
        "three",
    ]
    session.refresh_from_db()
    assert (session.last_seq, session.message_count) == (3, 3)


def test_another_tenants_session_stores_nothing_without_a_transaction(tenant: Tenant) -> None:
    other = SessionFactory(tenant=TenantFactory(slug="other"))

    with inserts_seen() as seen, pytest.raises(ResourceNotFound):
        services.message_append_batch(tenant=tenant, session_id=other.pk, messages=turns("x"))

    assert seen == [{"autocommit": True, "atomic": False}]
    assert not Message.objects.filter(session=other).exists()
    other.refresh_from_db()
    assert (other.last_seq, other.message_count) == (0, 0)


def test_inside_a_callers_transaction_the_append_rolls_back_with_it(tenant: Tenant) -> None:
    session = SessionFactory(tenant=tenant)

    def append_then_fail() -> None:
        with transaction.atomic():
            services.message_append_batch(
                tenant=tenant, session_id=session.pk, messages=turns("kept?")
            )
            raise RuntimeError("the caller fails after the append")

    with inserts_seen() as seen, pytest.raises(RuntimeError):
        append_then_fail()

    assert seen == [{"autocommit": False, "atomic": True}]
    assert not Message.objects.filter(session=session).exists()
    session.refresh_from_db()
    assert (session.last_seq, session.message_count) == (0, 0)


@pytest.mark.parametrize("case", ["own time", "agent policy"])
def test_other_appends_still_run_in_a_transaction(tenant: Tenant, case: str) -> None:
    session = SessionFactory(tenant=tenant, agent_id="chat")
    created_at = None
    if case == "own time":
        created_at = timezone.now() - dt.timedelta(minutes=5)
    else:
        # An agent's own policy: its requests are decided after the claim, by more statements.
        MemoryPolicy.objects.create(tenant=tenant, agent_id="chat")

    with inserts_seen() as seen:
        services.message_append_batch(
            tenant=tenant, session_id=session.pk, messages=turns("a", "b", created_at=created_at)
        )

    assert seen == [{"autocommit": False, "atomic": True}]
    assert Session.objects.get(pk=session.pk).message_count == 2
