"""Row-level security: PostgreSQL's second wall behind the ORM's `for_tenant()`.

Every table of a model with a tenant (TenantOwnedModel's and any other with a `tenant` foreign
key, found through the app registry) gets ENABLE + FORCE ROW LEVEL SECURITY and one policy: a
row is visible and writable only when its `tenant_id` equals the connection's `app.tenant_id`
setting, and, on tables with an `end_user_id`, when `app.end_user_id` is unset, the row is
tenant-wide (NULL) or it is that person's. FORCE because the role that runs the app may own the
tables (CI's does); an owner is otherwise exempt. A superuser or BYPASSRLS role is exempt
whatever we do, so the app must not run as one.

Seed 002 uses `SET LOCAL` per transaction. Django runs in autocommit (no ATOMIC_REQUESTS), where
a transaction-local setting is gone after each statement, so the settings here are
session-level (`set_config(…, false)`) with a guaranteed reset: every scope is a context
manager that puts the previous value back, a request starts fail-closed and ends as it began
(RlsRequestMiddleware), and a new connection starts at '' (nothing visible). The effect is seed
002's: the settings live exactly as long as the request, task or command that set them.

Going back to fail-closed outside a transaction is lazy (a round trip saved per request, and a
second one when the next request is the same tenant's, as it mostly is for a worker): the
connection is marked, and what uses it next settles the mark first: a statement run through
Django (an execute wrapper every connection carries) resets the settings for real, outside any
transaction, before it runs; a scope set next writes its own (or nothing, when the connection
already holds that very scope). Until then the code sees fail-closed (`rls_current()`); no
statement of ours ever runs in the stale scope.

'*' is the system scope: every tenant. Only named code paths take it: credential lookups
(before the tenant is known), beat sweeps, the admin for staff, management commands without
--tenant, migrations.

SQLite has no row-level security: there, and with MEMORYHUB_RLS off, every function here is a
no-op and the ORM is the only wall.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from django.apps import apps as global_apps
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from psycopg.pq import ExecStatus, TransactionStatus

logger = logging.getLogger(__name__)

SYSTEM = "*"
NOBODY = ""
POLICY_NAME = "memoryhub_tenant_isolation"

# (tenant setting, end-user setting) as last set on a connection; kept on the connection wrapper
# so reading the current scope costs no round trip.
Scope = tuple[str, str]
_FAIL_CLOSED: Scope = (NOBODY, NOBODY)
_ATTRIBUTE = "memoryhub_rls_scope"
# Set when the connection is fail-closed to the code but may still hold its last scope (the lazy
# reset above); only ever set outside a transaction.
_PENDING = "memoryhub_rls_reset_pending"
# The reset as one static statement, for libpq directly (no parameters, no psycopg transaction).
_RESET_SQL = (
    b"SELECT set_config('app.tenant_id', '', false), set_config('app.end_user_id', '', false)"
)
_MIGRATING = "memoryhub_rls_before_migrate"

P = ParamSpec("P")
R = TypeVar("R")


def rls_active(connection: BaseDatabaseWrapper | None = None) -> bool:
    """Whether the wall stands on this connection: PostgreSQL with MEMORYHUB_RLS on."""
    connection = connection or connections[DEFAULT_DB_ALIAS]
    return connection.vendor == "postgresql" and bool(getattr(settings, "MEMORYHUB_RLS", True))


def _idle(connection: BaseDatabaseWrapper) -> bool:
    """No transaction open on the server (psycopg begins one lazily, with the first statement)."""
    return bool(connection.connection.info.transaction_status == TransactionStatus.IDLE)


def _settle(connection: BaseDatabaseWrapper) -> None:
    """Carry out a pending reset: the connection really fail-closed, for good. Through libpq
    directly while no transaction is open, so that a transaction Django has begun (autocommit
    off, psycopg's BEGIN not yet sent) cannot take the reset back with a rollback."""
    setattr(connection, _PENDING, False)
    if getattr(connection, _ATTRIBUTE, _FAIL_CLOSED) == _FAIL_CLOSED:
        return
    if not _idle(connection):
        # Never in practice (the mark is set outside a transaction, and the first statement
        # after it comes through here): the reset inside the transaction, as a scope would be.
        _write(connection, _FAIL_CLOSED)
        return
    result = connection.connection.pgconn.exec_(_RESET_SQL)
    if result.status != ExecStatus.TUPLES_OK:
        logger.warning("rls: could not reset the scope; closing the connection")
        connection.close()
        raise OperationalError("rls: could not reset the scope")
    setattr(connection, _ATTRIBUTE, _FAIL_CLOSED)


def _settle_before_statement(
    execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
) -> Any:
    """An execute wrapper on every connection (connection_baseline): a pending reset is carried
    out before any statement runs."""
    connection = context["connection"]
    if getattr(connection, _PENDING, False):
        _settle(connection)
    return execute(sql, params, many, context)


def _reset_lazily(connection: BaseDatabaseWrapper) -> bool:
    """Mark the connection fail-closed without a round trip, where that is safe: connected, in
    autocommit, no transaction open. False when the reset must be written now."""
    if connection.connection is None or not connection.get_autocommit() or not _idle(connection):
        return False
    setattr(connection, _PENDING, True)
    return True


def _write(connection: BaseDatabaseWrapper, scope: Scope) -> None:
    connection.ensure_connection()
    if getattr(connection, _PENDING, False):
        if getattr(connection, _ATTRIBUTE, None) == scope and _idle(connection):
            # Still holds exactly this scope (set outside any transaction): nothing to send.
            setattr(connection, _PENDING, False)
            return
        if not connection.get_autocommit():
            # This write may be in a transaction that rolls back to the stale scope: reset
            # for good first.
            _settle(connection)
        setattr(connection, _PENDING, False)
    # On the driver's own cursor: a scope is the connection's state, not one of the request's
    # queries, so it stays out of the query log (and the tests' query counts of the app's work).
    with connection.connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('app.tenant_id', %s, false), "
            "set_config('app.end_user_id', %s, false)",
            list(scope),
        )
    setattr(connection, _ATTRIBUTE, scope)


def rls_current(*, using: str = DEFAULT_DB_ALIAS) -> Scope:
    """The (tenant, end user) settings this code last gave the connection ('' and '' when it is
    closed: the next one starts there)."""
    connection = connections[using]
    if connection.connection is None or getattr(connection, _PENDING, False):
        return _FAIL_CLOSED
    scope: Scope = getattr(connection, _ATTRIBUTE, _FAIL_CLOSED)
    return scope


def rls_set(*, tenant_id: int | str, end_user_id: int | str | None = None) -> None:
    """Scope the current connection to one tenant (and, for a person-bound credential, one end
    user) until something else sets it. Prefer `rls_scope()`; this is for the request's
    authentication, whose scope the request middleware resets."""
    connection = connections[DEFAULT_DB_ALIAS]
    if rls_active(connection):
        _write(connection, (str(tenant_id), "" if end_user_id is None else str(end_user_id)))


def rls_set_system() -> None:
    connection = connections[DEFAULT_DB_ALIAS]
    if rls_active(connection):
        _write(connection, (SYSTEM, NOBODY))


def _restore(connection: BaseDatabaseWrapper, scope: Scope) -> None:
    if connection.connection is None:
        # Closed meanwhile: the next connection starts at the baseline anyway.
        return
    if connection.connection.info.transaction_status == TransactionStatus.INERROR:
        # A failed transaction takes no statement; its rollback reverts what was set inside it
        # (PostgreSQL undoes a SET with its transaction), which is where this scope began.
        setattr(connection, _ATTRIBUTE, scope)
        return
    if scope == _FAIL_CLOSED and _reset_lazily(connection):
        return
    try:
        _write(connection, scope)
    except Exception:
        # A connection that cannot be reset must not carry its scope into the next use.
        logger.warning("rls: could not restore the scope; closing the connection")
        connection.close()
        raise


@contextmanager
def _scoped(scope: Scope) -> Iterator[None]:
    connection = connections[DEFAULT_DB_ALIAS]
    if not rls_active(connection):
        yield
        return
    previous = rls_current()
    if scope == previous:
        # Already there (kept without a round trip; only a scope set inside a transaction that
        # was then rolled back could make this stale, and nothing here sets one there).
        yield
        return
    _write(connection, scope)
    try:
        yield
    finally:
        _restore(connection, previous)


def rls_scope(*, tenant_id: int | str | None, end_user_id: int | str | None = None) -> Any:
    """`with rls_scope(tenant_id=…):` one tenant (and optionally one person) inside, the
    previous scope after. tenant_id None (an object that is gone) scopes to nothing."""
    if tenant_id is None:
        return _scoped(_FAIL_CLOSED)
    return _scoped((str(tenant_id), "" if end_user_id is None else str(end_user_id)))


def rls_system_scope() -> Any:
    """`with rls_system_scope():` every tenant inside. Only for named system paths."""
    return _scoped((SYSTEM, NOBODY))


def rls_restored(scope: Scope) -> Any:
    """`with rls_restored(scope):` a scope captured earlier with `rls_current()` (work deferred
    past the end of a request runs in the request's scope)."""
    return _scoped(scope)


def rls_for_tenant(tenant: Any) -> None:
    """Scope to an authenticated tenant; a tenant bound to one person (accounts.binding puts a
    PersonBinding on `tenant.person`) narrows to that person too."""
    person = getattr(tenant, "person", None)
    end_user = getattr(person, "end_user", None) if person is not None else None
    rls_set(tenant_id=tenant.pk, end_user_id=None if end_user is None else end_user.pk)


# --- tasks ---------------------------------------------------------------------------------------


def tenant_task(resolve: Callable[..., int | None]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a task function (under @shared_task): `resolve` gets the task's arguments and
    returns its tenant's id, looked up in the system scope; the task body then runs scoped to
    that tenant (to nothing when it returns None: the object is gone)."""

    def decorate(task: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(task)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            with rls_system_scope():
                tenant_id = resolve(*args, **kwargs)
            with rls_scope(tenant_id=tenant_id):
                return task(*args, **kwargs)

        run.rls_scope = "tenant"  # type: ignore[attr-defined]
        return run

    return decorate


def system_task(task: Callable[P, R]) -> Callable[P, R]:
    """Decorate a task function that works across tenants (a beat sweep): the system scope."""

    @functools.wraps(task)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with rls_system_scope():
            return task(*args, **kwargs)

    run.rls_scope = "system"  # type: ignore[attr-defined]
    return run


# --- requests ------------------------------------------------------------------------------------


def _in_scope(content: Iterable[Any], scope: Scope) -> Iterator[Any]:
    with rls_restored(scope):
        yield from content


class RlsRequestMiddleware:
    """Every request starts fail-closed (its authentication scopes it) and leaves the connection
    as it found it: '' in a server, the test's own scope in a test."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        connection = connections[DEFAULT_DB_ALIAS]
        if not rls_active(connection):
            return self.get_response(request)
        previous = rls_current()
        if previous != _FAIL_CLOSED:
            _write(connection, _FAIL_CLOSED)
        try:
            response = self.get_response(request)
            if isinstance(response, StreamingHttpResponse) and not response.is_async:
                # A streamed body is read after this returns: it reads in the request's scope.
                response.streaming_content = _in_scope(response.streaming_content, rls_current())
            return response
        finally:
            if rls_current() != previous:
                _restore(connection, previous)

    def process_view(self, request: HttpRequest, *_: Any) -> None:
        # The admin is staff-wide work across tenants: the system scope, for active staff only
        # (anyone else gets the admin's login page, which reads no tenant's rows).
        match = request.resolver_match
        user = getattr(request, "user", None)
        if (
            match is not None
            and match.app_name == "admin"
            and user is not None
            and user.is_active
            and user.is_staff
        ):
            rls_set_system()


# --- the baseline, migrations, commands ----------------------------------------------------------


def connection_baseline(sender: Any, connection: BaseDatabaseWrapper, **_: Any) -> None:
    """connection_created: a new connection sees nothing until something scopes it."""
    if rls_active(connection):
        # A new server connection: a mark left by the previous one means nothing here.
        setattr(connection, _PENDING, False)
        if _settle_before_statement not in connection.execute_wrappers:
            # First, not appended: `execute_wrapper()` blocks pop the last one on their way out
            # (a connection is often opened inside one, e.g. the observability middleware's).
            connection.execute_wrappers.insert(0, _settle_before_statement)
        _write(connection, _FAIL_CLOSED)


def migrations_system_scope(sender: Any, using: str = DEFAULT_DB_ALIAS, **_: Any) -> None:
    """pre_migrate (sent once per app): migrations, data migrations included, work on every
    tenant's rows; policies_install puts the previous scope back after the last app."""
    connection = connections[using]
    if rls_active(connection) and not hasattr(connection, _MIGRATING):
        setattr(connection, _MIGRATING, rls_current(using=using))
        _write(connection, (SYSTEM, NOBODY))


def tenant_tables() -> list[tuple[str, bool]]:
    """(table, has end_user_id) of every concrete model with a `tenant` foreign key to
    accounts.Tenant."""
    tenant_model = global_apps.get_model("accounts", "Tenant")
    found: dict[str, bool] = {}
    for model in global_apps.get_models(include_auto_created=True):
        meta = model._meta
        if meta.abstract or meta.proxy or not meta.managed or model in _exempt_models():
            continue
        columns = {
            field.column: field
            for field in meta.concrete_fields
            if getattr(field, "related_model", None) is not None
        }
        tenant_field = columns.get("tenant_id")
        if tenant_field is None or tenant_field.related_model is not tenant_model:
            continue
        found[meta.db_table] = "end_user_id" in columns
    return sorted(found.items())


def _exempt_models() -> set[type[Model]]:
    # Membership is the directory of who may see which tenant: the pages read it to find the
    # tenant before there is one to scope to, and it holds no memory.
    return {global_apps.get_model("accounts", "Membership")}


def _scope_id(setting: str) -> str:
    # The setting as a bigint (NULL when unset, '' or '*'), compared with the column as it is:
    # `tenant_id::text = current_setting(...)` hid the column from its index and its statistics,
    # so the planner guessed 0.5 % of the rows, chose nested loops over a tenant's 100,000
    # messages and turned a 1 ms batch into 400 ms. CASE, not a bare cast: an unset or '*'
    # setting must match nothing here, not raise.
    value = f"current_setting('{setting}', true)"
    return f"(SELECT CASE WHEN {value} ~ '^[0-9]{{1,18}}$' THEN {value}::bigint END)"


def _setting(setting: str) -> str:
    return f"(SELECT current_setting('{setting}', true))"


def _policy_sql(table: str, *, person: bool) -> list[str]:
    # Every setting in a scalar subquery: PostgreSQL computes each once per statement (an
    # InitPlan) and compares rows with its value, instead of reading the setting and matching
    # the regular expression again for every row (a 28,000-row scan: 35 -> 11 ms). The
    # settings cannot change while a statement runs, so the rows that pass are the same.
    quoted = f'"{table}"'
    tenant = f"({_setting('app.tenant_id')} = '*' OR tenant_id = {_scope_id('app.tenant_id')})"
    condition = tenant
    if person:
        # Tenant-wide rows (no person) stay readable to a person-bound request; that it may
        # not write them is the ORM's rule (accounts.binding), not this wall's.
        condition += (
            f" AND (coalesce({_setting('app.end_user_id')}, '') = '' "
            "OR end_user_id IS NULL "
            f"OR end_user_id = {_scope_id('app.end_user_id')})"
        )
    return [
        f"ALTER TABLE {quoted} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE {quoted} FORCE ROW LEVEL SECURITY",
        f"DROP POLICY IF EXISTS {POLICY_NAME} ON {quoted}",
        f"CREATE POLICY {POLICY_NAME} ON {quoted} USING ({condition}) WITH CHECK ({condition})",
    ]


def policies_install(sender: Any = None, using: str = DEFAULT_DB_ALIAS, **_: Any) -> None:
    """post_migrate: (re)create the policy of every tenant table, so a new one is covered the
    moment it is migrated. Idempotent. With MEMORYHUB_RLS off, the policies are dropped and RLS
    disabled (an operator's switch must switch the wall off, not leave it half up)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    # post_migrate is sent once per app: install once, after the last one (every table exists).
    labels = [config.label for config in global_apps.get_app_configs() if config.models_module]
    if sender is not None and labels and getattr(sender, "label", None) != labels[-1]:
        return
    # One transaction: between a DROP and its CREATE, a forced table would hide every row.
    with transaction.atomic(using=using), connection.cursor() as cursor:
        for table, person in tenant_tables():
            if rls_active(connection):
                for statement in _policy_sql(table, person=person):
                    cursor.execute(statement)
            else:
                cursor.execute(f'DROP POLICY IF EXISTS {POLICY_NAME} ON "{table}"')
                cursor.execute(f'ALTER TABLE "{table}" NO FORCE ROW LEVEL SECURITY')
                cursor.execute(f'ALTER TABLE "{table}" DISABLE ROW LEVEL SECURITY')
    if hasattr(connection, _MIGRATING):
        _restore(connection, getattr(connection, _MIGRATING))
        delattr(connection, _MIGRATING)


_PROJECT_PACKAGES = ("memoryhub.", "sessions_app.", "facts_app.")
# Django's own commands an operator uses on the data: they act for the whole install.
_SYSTEM_COMMANDS = frozenset({"shell", "dumpdata", "loaddata"})


def _tenant_id_for_slug(slug: str) -> int | None:
    tenant_model = global_apps.get_model("accounts", "Tenant")
    found: int | None = tenant_model.objects.filter(slug=slug).values_list("pk", flat=True).first()
    return found


def commands_scope_install() -> None:
    """Management commands run in a scope from the start: `--tenant <slug>` when the command
    takes one, the system scope otherwise (an operator acts for the whole install). A command's
    own tenant lookups are then in that scope too."""
    from django.core.management.base import BaseCommand

    if getattr(BaseCommand.execute, "rls_wrapped", False):
        return
    execute = BaseCommand.execute

    @functools.wraps(execute)
    def scoped_execute(self: BaseCommand, *args: Any, **options: Any) -> Any:
        module = type(self).__module__
        name = module.rsplit(".", 1)[-1]
        if not (module.startswith(_PROJECT_PACKAGES) or (name in _SYSTEM_COMMANDS)):
            return execute(self, *args, **options)
        slug = options.get("tenant")
        if not isinstance(slug, str) or not rls_active():
            with rls_system_scope():
                return execute(self, *args, **options)
        with rls_system_scope():
            tenant_id = _tenant_id_for_slug(slug)
        # An unknown slug: the command's own lookup says so (scoped to the system to find it).
        if tenant_id is None:
            with rls_system_scope():
                return execute(self, *args, **options)
        with rls_scope(tenant_id=tenant_id):
            return execute(self, *args, **options)

    scoped_execute.rls_wrapped = True  # type: ignore[attr-defined]
    BaseCommand.execute = scoped_execute  # type: ignore[method-assign]


def rls_signals_connect() -> None:
    from django.db.backends.signals import connection_created
    from django.db.models.signals import post_migrate, pre_migrate

    connection_created.connect(connection_baseline, dispatch_uid="memoryhub_rls_baseline")
    pre_migrate.connect(migrations_system_scope, dispatch_uid="memoryhub_rls_migrate")
    post_migrate.connect(policies_install, dispatch_uid="memoryhub_rls_policies")
    commands_scope_install()
