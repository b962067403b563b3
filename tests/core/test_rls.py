"""Row-level security, PostgreSQL's second wall (memoryhub.core.rls): queries that forget the
tenant still see only the scoped tenant's rows (and nothing when unscoped); requests, tasks,
commands and migrations set their scope. SQLite has no RLS: skipped there."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connection, connections
from rest_framework.test import APIClient

from memoryhub.accounts.binding import PersonBinding, tenant_bound
from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import api_key_create, end_user_get_or_create
from memoryhub.core import rls
from sessions_app.models import Message, MessageVector, Session, Summary
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get
from tests.helpers import client_for
from tests.sessions_app.workers import CeleryWorker, wait_until

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="row-level security is PostgreSQL's"
)


def _settings() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(current_setting('app.tenant_id', true), ''), "
            "coalesce(current_setting('app.end_user_id', true), '')"
        )
        row = cursor.fetchone()
    assert row is not None
    return row[0], row[1]


def _raw_connection() -> psycopg.Connection[Any]:
    """A connection of the app's role to the test database that no code of ours has touched."""
    database = settings.DATABASES["default"]
    return psycopg.connect(
        dbname=database["NAME"],
        user=database["USER"],
        password=database.get("PASSWORD") or None,
        host=database.get("HOST") or None,
        port=database.get("PORT") or None,
        autocommit=True,
    )


def _chat(tenant: Tenant, user_id: str, text: str) -> Session:
    session, _ = session_create_or_get(tenant=tenant, user_id=user_id, agent_id="chat")
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[MessageInput(role="user", content=text)],
    )
    return session


@pytest.fixture
def two_tenants(transactional_db: None) -> tuple[Tenant, Tenant]:
    # Committed (transactional_db), so a connection of its own sees the rows, or would.
    a = Tenant.objects.create(slug="rls-a", name="A")
    b = Tenant.objects.create(slug="rls-b", name="B")
    _chat(a, "tg:alice", "A's secret")
    _chat(b, "tg:bob", "B's secret")
    return a, b


def test_the_app_role_is_subject_to_rls() -> None:
    # A superuser or BYPASSRLS role would pass every test below without any wall at all.
    with _raw_connection() as raw:
        row = raw.execute(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    assert row == (False, False)


@pytest.mark.django_db
def test_every_tenant_table_has_forced_rls_and_the_policy() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
            "  EXISTS (SELECT 1 FROM pg_policies p WHERE p.tablename = c.relname "
            "          AND p.policyname = %s) "
            "FROM information_schema.columns col "
            "JOIN pg_class c ON c.relname = col.table_name "
            "JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = col.table_schema "
            "WHERE col.column_name = 'tenant_id' AND col.table_schema = current_schema() "
            "AND c.relkind = 'r'",
            [rls.POLICY_NAME],
        )
        rows = {name: (enabled, forced, policy) for name, enabled, forced, policy in cursor}
    # The one exception: who may see which tenant, read before there is a tenant to scope to.
    assert rows.pop("accounts_membership") == (False, False, False)
    assert len(rows) > 20
    unguarded = sorted(name for name, flags in rows.items() if flags != (True, True, True))
    assert unguarded == []
    # Everything the app registry calls a tenant table is among them (and nothing else).
    assert {table for table, _ in rls.tenant_tables()} == set(rows)


def test_an_unscoped_raw_query_sees_nothing_and_a_scoped_one_only_its_tenant(
    two_tenants: tuple[Tenant, Tenant],
) -> None:
    a, b = two_tenants
    with _raw_connection() as raw:
        # Deliberately unscoped: no setting at all.
        assert raw.execute("SELECT * FROM sessions_app_message").fetchall() == []
        assert raw.execute("SELECT * FROM sessions_app_session").fetchall() == []
        raw.execute("SELECT set_config('app.tenant_id', %s, false)", [str(a.pk)])
        seen = raw.execute("SELECT tenant_id, content FROM sessions_app_message").fetchall()
        assert seen == [(a.pk, "A's secret")]
        # Even asked for B's rows by name.
        assert (
            raw.execute(
                "SELECT * FROM sessions_app_message WHERE tenant_id = %s", [b.pk]
            ).fetchall()
            == []
        )
        # Nor can it change or delete them.
        assert (
            raw.execute("DELETE FROM sessions_app_message WHERE tenant_id = %s", [b.pk]).rowcount
            == 0
        )
        raw.execute("SELECT set_config('app.tenant_id', '', false)")
    assert Message.objects.filter(tenant=b).count() == 1


def test_a_new_django_connection_starts_fail_closed(two_tenants: tuple[Tenant, Tenant]) -> None:
    fresh = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        with fresh.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM sessions_app_message")
            assert cursor.fetchone() == (0,)
            cursor.execute("SELECT count(*) FROM accounts_enduser")
            assert cursor.fetchone() == (0,)
    finally:
        fresh.close()


def test_writing_another_tenants_row_while_scoped_fails(
    two_tenants: tuple[Tenant, Tenant],
) -> None:
    a, b = two_tenants
    session_b = Session.objects.get(tenant=b)
    with _raw_connection() as raw:
        raw.execute("SELECT set_config('app.tenant_id', %s, false)", [str(a.pk)])
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            raw.execute(
                "INSERT INTO sessions_app_summary (tenant_id, session_id, through_seq, "
                "text, token_count, model, created_at) VALUES (%s, %s, 1, 'x', 1, 'm', now())",
                [b.pk, session_b.pk],
            )
        # Moving one of A's rows to B is a write of B's row too.
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            raw.execute("UPDATE sessions_app_message SET tenant_id = %s", [b.pk])
    assert not Summary.objects.exists()


def test_the_end_user_dimension(two_tenants: tuple[Tenant, Tenant]) -> None:
    a, _ = two_tenants
    _chat(a, "tg:carol", "Carol's")
    alice = end_user_get_or_create(tenant=a, external_id="tg:alice")
    with _raw_connection() as raw:
        raw.execute(
            "SELECT set_config('app.tenant_id', %s, false), "
            "set_config('app.end_user_id', %s, false)",
            [str(a.pk), str(alice.pk)],
        )
        people = raw.execute("SELECT DISTINCT end_user_id FROM sessions_app_session").fetchall()
        assert people == [(alice.pk,)]
        # A tenant-wide session (nobody's) stays readable to a person-bound request.
        shared, _ = session_create_or_get(tenant=a, user_id=None, agent_id="chat")
        ids = {row[0] for row in raw.execute("SELECT id FROM sessions_app_session")}
        assert shared.pk in ids
        assert len(ids) == 2


def test_the_policy_leaves_the_planner_its_statistics(transactional_db: None) -> None:
    # A policy comparing `tenant_id::text` hid the column's statistics: the planner guessed
    # 0.5 % of a tenant's rows and picked nested loops (a 1 ms cleanup batch became 400 ms).
    a = Tenant.objects.create(slug="rls-plan-a", name="A")
    b = Tenant.objects.create(slug="rls-plan-b", name="B")
    for tenant, count in ((a, 400), (b, 100)):
        session, _ = session_create_or_get(tenant=tenant, user_id="tg:1", agent_id="chat")
        message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[MessageInput(role="user", content=f"m{i}") for i in range(count)],
        )
    with _raw_connection() as raw:
        raw.execute("ANALYZE sessions_app_message")
        raw.execute("SELECT set_config('app.tenant_id', %s, false)", [str(a.pk)])
        plan = raw.execute("EXPLAIN (FORMAT JSON) SELECT id FROM sessions_app_message").fetchone()
        assert plan is not None
        estimated = plan[0][0]["Plan"]["Plan Rows"]
        # 1/n_distinct of 500 rows is 250; the old policy's guess was ~3.
        assert estimated >= 100, plan
        assert raw.execute("SELECT count(*) FROM sessions_app_message").fetchone() == (400,)


def test_the_policy_reads_its_settings_once_a_statement_not_once_a_row(
    two_tenants: tuple[Tenant, Tenant],
) -> None:
    # Each setting in a scalar subquery is an InitPlan: rows are compared with its value. A
    # bare current_setting() (and the regular expression on it) ran again for every row: a
    # 28,000-row scan took 35 ms instead of 11.
    a, _ = two_tenants
    with _raw_connection() as raw:
        raw.execute("SELECT set_config('app.tenant_id', %s, false)", [str(a.pk)])
        for table in ("sessions_app_message", "sessions_app_session"):
            explained = raw.execute(f"EXPLAIN (VERBOSE) SELECT id FROM {table}")  # noqa: S608
            plan = "\n".join(row[0] for row in explained)
            filters = [line for line in plan.splitlines() if "Filter:" in line]
            assert filters, plan
            assert not any("current_setting" in line for line in filters), plan
            assert "InitPlan" in plan, plan
        assert raw.execute("SELECT count(*) FROM sessions_app_message").fetchone() == (1,)


@pytest.mark.django_db
def test_a_person_bound_tenant_scopes_to_its_person(tenant: Tenant) -> None:
    person = end_user_get_or_create(tenant=tenant, external_id="tg:1")
    with rls.rls_scope(tenant_id=None):
        rls.rls_for_tenant(tenant_bound(tenant=tenant, binding=PersonBinding(end_user=person)))
        assert _settings() == (str(tenant.pk), str(person.pk))
        rls.rls_for_tenant(tenant)
        assert _settings() == (str(tenant.pk), "")
    assert _settings() == ("*", "")


@pytest.mark.django_db
def test_scopes_nest_and_restore() -> None:
    assert _settings() == ("*", "")
    with rls.rls_scope(tenant_id=7, end_user_id=9):
        assert _settings() == ("7", "9")
        assert rls.rls_current() == ("7", "9")
        with rls.rls_scope(tenant_id=None):
            assert _settings() == ("", "")
        assert _settings() == ("7", "9")
    assert _settings() == ("*", "")


def test_an_api_request_is_scoped_to_its_key_and_restores_the_connection(
    two_tenants: tuple[Tenant, Tenant],
) -> None:
    a, _ = two_tenants
    api = client_for(api_key_create(tenant=a, name="t", scopes=["read"])[1])
    before = _settings()
    response = api.get("/api/v1/sessions/")
    assert response.status_code == 200
    assert [row["user_id"] for row in response.json()["results"]] == ["tg:alice"]
    assert _settings() == before
    # No credential: the request ran fail-closed and still leaves the connection as it was.
    assert APIClient().get("/api/v1/sessions/").status_code == 401
    assert _settings() == before


def test_a_streamed_page_reads_in_its_requests_scope(
    two_tenants: tuple[Tenant, Tenant], member_client: Callable[..., Any]
) -> None:
    # The export streams: its rows are read after the middleware has reset the connection.
    a, _ = two_tenants
    client = member_client(a)
    with rls.rls_scope(tenant_id=None):  # as in a server: the connection starts unscoped
        response = client.get("/export/")
        assert response.status_code == 200
        body = b"".join(response.streaming_content).decode()
        assert _settings() == ("", "")
    assert "A's secret" in body
    assert "B's secret" not in body


def test_a_forgetful_query_inside_a_request_finds_nothing_of_another_tenant(
    two_tenants: tuple[Tenant, Tenant], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A selector that "forgot" for_tenant(): the wall still keeps B's rows out of A's request.
    from sessions_app.api import views as session_views

    a, _ = two_tenants
    seen: list[list[str]] = []
    original = session_views.SessionViewSet.initial

    def forgetful(self: Any, request: Any, *args: Any, **kwargs: Any) -> None:
        original(self, request, *args, **kwargs)  # authentication: the request's scope
        seen.append([row.content for row in Message.objects.all()])

    monkeypatch.setattr(session_views.SessionViewSet, "initial", forgetful)
    api = client_for(api_key_create(tenant=a, name="t", scopes=["read"])[1])
    assert api.get("/api/v1/sessions/").status_code == 200
    assert seen == [["A's secret"]]


def _pending() -> bool:
    return bool(getattr(connection, rls._PENDING, False))


def test_a_request_resets_lazily_and_the_next_statement_runs_fail_closed(
    two_tenants: tuple[Tenant, Tenant],
) -> None:
    # As in a server: the connection starts unscoped; the request ends without a round trip.
    a, _ = two_tenants
    api = client_for(api_key_create(tenant=a, name="t", scopes=["read"])[1])
    with rls.rls_scope(tenant_id=None):
        assert api.get("/api/v1/sessions/").status_code == 200
        assert _pending()
        assert rls.rls_current() == ("", "")
        # The first statement after it settles the reset before it runs.
        assert Message.objects.count() == 0
        assert not _pending()
        assert _settings() == ("", "")


def test_a_lazy_reset_is_settled_for_good_before_a_transaction_that_rolls_back(
    two_tenants: tuple[Tenant, Tenant],
) -> None:
    from django.db import transaction

    a, b = two_tenants
    api = client_for(api_key_create(tenant=a, name="t", scopes=["read"])[1])
    with rls.rls_scope(tenant_id=None):
        for scope_inside in (None, b.pk):
            assert api.get("/api/v1/sessions/").status_code == 200
            assert _pending()
            with transaction.atomic():
                if scope_inside is not None:
                    rls.rls_set(tenant_id=scope_inside)  # a scope set inside, then rolled back
                Message.objects.count()
                transaction.set_rollback(True)
            # The rollback did not bring back the last request's tenant.
            assert _settings() == ("", "")
            assert Message.objects.filter(tenant=a).count() == 0
            rls.rls_set(tenant_id="")


def test_the_same_tenant_next_needs_no_round_trip_another_one_gets_its_own(
    two_tenants: tuple[Tenant, Tenant], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two_tenants
    api = client_for(api_key_create(tenant=a, name="t", scopes=["read"])[1])
    with rls.rls_scope(tenant_id=None):
        assert api.get("/api/v1/sessions/").status_code == 200
        assert _pending()
        cursors: list[None] = []
        original = psycopg.Connection.cursor

        def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
            cursors.append(None)
            return original(self, *args, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "cursor", counting)
        rls.rls_set(tenant_id=a.pk)
        assert cursors == []
        assert not _pending()
        monkeypatch.undo()
        assert _settings() == (str(a.pk), "")
        rls.rls_set(tenant_id="")
        assert api.get("/api/v1/sessions/").status_code == 200
        rls.rls_set(tenant_id=b.pk)
        assert _settings() == (str(b.pk), "")
        assert [m.content for m in Message.objects.all()] == ["B's secret"]
        rls.rls_set(tenant_id="")


@pytest.mark.django_db
def test_tasks_run_in_their_tenants_scope(tenant: Tenant) -> None:
    session = _chat(tenant, "tg:1", "hello")
    seen: list[tuple[str, str]] = []

    def resolve(session_id: str) -> int | None:
        return Session.objects.filter(pk=session_id).values_list("tenant_id", flat=True).first()

    @rls.tenant_task(resolve)
    def per_session(session_id: str) -> None:
        seen.append(_settings())

    @rls.system_task
    def sweep() -> None:
        seen.append(_settings())

    with rls.rls_scope(tenant_id=None):
        per_session(str(session.pk))
        sweep()
        assert _settings() == ("", "")
    assert seen == [(str(tenant.pk), ""), ("*", "")]


def test_every_task_has_a_scope() -> None:
    from memoryhub.celery import app

    app.loader.import_default_modules()
    ours = {
        name: task
        for name, task in app.tasks.items()
        if name.startswith(("sessions_app.", "facts_app.", "memoryhub."))
    }
    assert ours
    unscoped = sorted(
        name
        for name, task in ours.items()
        if getattr(task.run, "rls_scope", None) not in ("tenant", "system")
    )
    assert unscoped == []


@pytest.mark.django_db
def test_a_command_runs_in_its_tenants_scope(
    tenant: Tenant, other_tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryhub.transfer.management.commands import export_memory

    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(
        export_memory.Command, "handle", lambda self, *args, **options: seen.append(_settings())
    )
    call_command(export_memory.Command(), "--tenant", tenant.slug, "-o", "-")
    assert seen == [(str(tenant.pk), "")]
    assert _settings() == ("*", "")


def test_a_command_finds_only_its_tenants_rows(
    two_tenants: tuple[Tenant, Tenant], tmp_path: Any
) -> None:
    a, _ = two_tenants
    output = tmp_path / "a.jsonl"
    with rls.rls_scope(tenant_id=None):
        call_command(
            "export_memory",
            "--tenant",
            a.slug,
            "-o",
            str(output),
            "--no-progress",
            stderr=io.StringIO(),
        )
        assert _settings() == ("", "")
    text = output.read_text()
    assert "A's secret" in text
    assert "B's secret" not in text


@pytest.mark.django_db
def test_commands_without_a_tenant_run_in_the_system_scope(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sessions_app.management.commands import recount_sessions

    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(
        recount_sessions.Command, "handle", lambda self, *args, **options: seen.append(_settings())
    )
    with rls.rls_scope(tenant_id=None):
        call_command(recount_sessions.Command())
    assert seen == [("*", "")]


@pytest.mark.django_db
def test_migrate_runs_in_the_system_scope_and_leaves_the_scope_as_it_was() -> None:
    with rls.rls_scope(tenant_id=None):
        call_command("migrate", verbosity=0)
        assert _settings() == ("", "")
    # Installing twice changes nothing (post_migrate runs it on every migrate).
    rls.policies_install()
    rls.policies_install()


@pytest.mark.slow
@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL: a real broker")
def test_a_real_worker_scopes_a_task_to_its_tenant(
    two_tenants: tuple[Tenant, Tenant],
    celery_workers: Callable[..., CeleryWorker],
    enqueue_for_real: None,
) -> None:
    # The worker's connections start fail-closed: the task finds its session's messages (and
    # writes their vectors) only because it scoped itself to the session's tenant.
    from sessions_app.tasks import embed_session_messages

    a, _ = two_tenants
    MessageVector.objects.all().delete()
    session = Session.objects.get(tenant=a)
    worker = celery_workers()
    embed_session_messages.delay(str(session.pk))
    wait_until(
        lambda: MessageVector.objects.filter(message__session=session).exists(),
        timeout=60,
        describe=worker.log_tail,
    )
    assert set(MessageVector.objects.values_list("tenant_id", flat=True)) == {a.pk}
