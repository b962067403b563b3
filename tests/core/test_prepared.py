"""The append's statement (the claim and the insert in one) as a prepared statement
(memoryhub.core.prepared): prepared once per connection, nothing else prepared, the query log
still shows it, row-level security still applies to it, and the setting turns it off.
PostgreSQL's: skipped on SQLite."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryhub.accounts.models import Tenant
from memoryhub.core import rls
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.prepared import statements_prepared
from sessions_app.models import Message, Session
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get

pytestmark = [
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's"
    ),
    pytest.mark.django_db(transaction=True),
]


def _prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements ORDER BY prepare_time")
        return [row[0] for row in cursor.fetchall()]


def _append(tenant: Tenant, session: Session, text: str) -> list[Message]:
    with rls.rls_scope(tenant_id=tenant.pk):
        return message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[MessageInput(role="user", content=text)],
        )


@pytest.fixture(autouse=True)
def _no_embedding_task(settings):
    # The eager embedding task an append enqueues runs at commit and ends by closing the
    # connection, and with it what was prepared on it.
    settings.EMBEDDINGS_BACKEND = "off"


@pytest.fixture
def session(tenant: Tenant) -> Session:
    with rls.rls_scope(tenant_id=tenant.pk):
        made, _ = session_create_or_get(tenant=tenant, user_id="ada", agent_id="chat")
    return made


def test_the_append_is_prepared_once_and_nothing_else(tenant, session):
    connection.close()  # a connection of its own: nothing prepared on it yet
    for index in range(3):
        _append(tenant, session, f"turn {index}")

    statements = _prepared()
    assert len(statements) == 1
    assert statements[0].startswith(
        'WITH claim AS (UPDATE "sessions_app_session" SET last_seq = last_seq + $1'
    )
    assert 'INSERT INTO "sessions_app_message"' in statements[0]
    with rls.rls_system_scope():
        stored = list(
            Message.objects.filter(session=session).order_by("seq").values_list("seq", "content")
        )
    assert stored == [(1, "turn 0"), (2, "turn 1"), (3, "turn 2")]


def test_a_backfill_prepares_the_claim_and_the_insert_apart(tenant, session):
    connection.close()
    _append(tenant, session, "one")
    with rls.rls_scope(tenant_id=tenant.pk):
        message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[MessageInput(role="user", content="two", created_at=timezone.now())],
        )

    statements = _prepared()
    assert [statement.split()[0] for statement in statements] == ["WITH", "UPDATE", "INSERT"]
    with rls.rls_system_scope():
        assert Session.objects.get(pk=session.pk).last_seq == 2


def test_a_batch_of_another_length_is_a_statement_of_its_own(tenant, session):
    connection.close()
    _append(tenant, session, "one")
    with rls.rls_scope(tenant_id=tenant.pk):
        message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content="a"),
                MessageInput(role="user", content="b"),
            ],
        )

    statements = _prepared()
    assert sum(statement.startswith("WITH") for statement in statements) == 2
    with rls.rls_system_scope():
        assert Session.objects.get(pk=session.pk).last_seq == 3


def test_the_query_log_shows_them_with_their_values(tenant, session):
    with CaptureQueriesContext(connection) as captured:
        _append(tenant, session, "logged")

    logged = [query["sql"] for query in captured.captured_queries]
    assert any(
        sql.startswith("WITH claim AS (UPDATE") and "'logged'" in sql and session.pk.hex in sql
        for sql in logged
    ), logged


def test_the_connection_is_as_it_was_after_the_block_even_after_an_error(tenant):
    connection.ensure_connection()
    before = connection.connection.cursor_factory, connection.connection.prepare_threshold
    with pytest.raises(ZeroDivisionError), statements_prepared():
        1 / 0  # noqa: B018
    assert (connection.connection.cursor_factory, connection.connection.prepare_threshold) == (
        before
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::int", [1])
    assert _prepared() == []


def test_row_level_security_still_holds_for_a_prepared_statement(tenant, other_tenant, session):
    connection.close()
    for index in range(6):  # generic plans from the first (the connection's plan_cache_mode)
        _append(tenant, session, f"mine {index}")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH%%'"
        )
        assert cursor.fetchone()[0] >= 1

    # The same prepared claim, run in another tenant's scope for the first tenant's session:
    # the policy hides the row whatever the statement's own tenant filter says.
    with pytest.raises(ResourceNotFound), rls.rls_scope(tenant_id=other_tenant.pk):
        message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[MessageInput(role="user", content="not yours")],
        )
    # psycopg deallocates its prepared statements after a rollback; the next append prepares
    # them again.
    _append(tenant, session, "mine again")
    assert len(_prepared()) == 1
    with rls.rls_system_scope():
        contents = list(
            Message.objects.filter(session=session)
            .order_by("seq")
            .values_list("content", flat=True)
        )
    assert contents == [*(f"mine {index}" for index in range(6)), "mine again"]


def test_the_setting_turns_them_off(tenant, session, settings):
    settings.DATABASE_PREPARED_STATEMENTS = False
    connection.close()
    _append(tenant, session, "plain")

    assert _prepared() == []
    with rls.rls_system_scope():
        assert Message.objects.filter(session=session).count() == 1


# --- the reads prepared before every context call and search -------------------------------


def test_the_context_session_read_is_prepared_and_still_scoped(tenant, other_tenant, session):
    from sessions_app.selectors import session_get_for_context

    connection.close()
    for _ in range(6):
        with rls.rls_scope(tenant_id=tenant.pk):
            found = session_get_for_context(tenant=tenant, session_id=session.pk)
        assert (found.id, found.agent_id, found.summary_text) == (session.pk, "chat", None)
        assert found.person_versions is not None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans FROM pg_prepared_statements "
            'WHERE statement LIKE \'%%FROM "sessions_app_session" AS "session"%%\''
        )
        assert cursor.fetchone()[0] >= 1

    # Another tenant's scope, or another tenant's id in the statement: no session either way.
    with pytest.raises(ResourceNotFound), rls.rls_scope(tenant_id=other_tenant.pk):
        session_get_for_context(tenant=tenant, session_id=session.pk)
    with pytest.raises(ResourceNotFound), rls.rls_scope(tenant_id=other_tenant.pk):
        session_get_for_context(tenant=other_tenant, session_id=session.pk)


def test_the_hit_rows_are_prepared_and_only_the_tenants(tenant, other_tenant, session):
    from sessions_app.recall import _hit_rows

    mine = _append(tenant, session, "a hit")
    with rls.rls_scope(tenant_id=other_tenant.pk):
        theirs, _ = session_create_or_get(tenant=other_tenant, user_id="bob", agent_id="chat")
    foreign = _append(other_tenant, theirs, "not a hit of yours")
    ids = [mine[0].pk, foreign[0].pk]
    connection.close()
    for _ in range(6):
        with rls.rls_scope(tenant_id=tenant.pk):
            rows = _hit_rows(tenant_id=tenant.pk, ids=ids, fields=None)
        assert list(rows) == [mine[0].pk]
        assert rows[mine[0].pk].content == "a hit"
        # psycopg's compiled loader for the times: the same aware UTC values as the ORM's.
        assert rows[mine[0].pk].created_at == mine[0].created_at
        assert rows[mine[0].pk].created_at.tzinfo is dt.UTC
    assert [s.split()[0] for s in _prepared()] == ["SELECT"]
    # The other tenant's id in the statement, in the first tenant's scope: the policy hides it.
    with rls.rls_scope(tenant_id=tenant.pk):
        assert _hit_rows(tenant_id=other_tenant.pk, ids=ids, fields=None) == {}


def test_the_context_reads_are_prepared_with_their_limits_written_in(tenant, other_tenant, session):
    from memoryhub.context.selectors import context_reads_for_session

    _append(tenant, session, "hello")

    def reads(scope: Tenant, last: int):
        with rls.rls_scope(tenant_id=scope.pk):
            return context_reads_for_session(
                tenant=tenant,
                session_id=session.pk,
                end_user_id=session.end_user_id,
                last=last,
                max_memories=5,
                today=timezone.now().date(),
                note_days=7,
                with_facts=True,
            )

    connection.close()
    for _ in range(3):
        found = reads(tenant, 20)
        assert [row.content for row in found.tail.messages] == ["hello"]
        assert found.facts_read
        assert found.fact_candidates == []
    reads(tenant, 5)  # another limit: a statement of its own
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%SELECT 0 AS \"part\"%%' ORDER BY prepare_time"
        )
        statements = cursor.fetchall()
    assert [(generic, custom) for _, generic, custom in statements] == [(3, 0), (1, 0)]
    assert "LIMIT 21" in statements[0][0]
    assert "LIMIT 6" in statements[1][0]
    assert "LIMIT $" not in statements[0][0]
    # The prepared read in another tenant's scope: the policy hides the session's messages.
    assert reads(other_tenant, 20).tail.messages == []


def test_connections_run_prepared_statements_with_their_generic_plan(settings):
    def plan_cache_mode() -> str:
        connection.close()
        with connection.cursor() as cursor:
            cursor.execute("SHOW plan_cache_mode")
            return cursor.fetchone()[0]

    assert plan_cache_mode() == "force_generic_plan"
    settings.DATABASE_PREPARED_STATEMENTS = False
    assert plan_cache_mode() == "auto"


def test_the_persons_token_is_prepared_and_only_the_tenants(tenant, other_tenant, session):
    # Read before every search and context call with history (is the person's index current?).
    from sessions_app.recall import _person_and_token, recall_token

    _append(tenant, session, "hello")
    connection.close()
    for _ in range(3):
        with rls.rls_scope(tenant_id=tenant.pk):
            person, token = _person_and_token(tenant=tenant, external_id="ada")
            assert recall_token(tenant_id=tenant.pk, end_user_id=person.pk) == token
        assert person.pk == session.end_user_id
        assert (token.sessions, token.appended) == (1, 1)
    statements = _prepared()
    assert len(statements) == 2
    assert all(statement.startswith("SELECT e.id, e.recall_version") for statement in statements)
    # Another tenant's scope, or another tenant's id in the statement: no person either way.
    with rls.rls_scope(tenant_id=other_tenant.pk):
        with pytest.raises(ResourceNotFound):
            _person_and_token(tenant=tenant, external_id="ada")
        assert recall_token(tenant_id=tenant.pk, end_user_id=session.end_user_id) is None
    with rls.rls_scope(tenant_id=tenant.pk):
        assert recall_token(tenant_id=other_tenant.pk, end_user_id=session.end_user_id) is None
