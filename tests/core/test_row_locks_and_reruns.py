"""memoryhub.core.locks for writers and deleters of the same rows: rows_hold and rows_lock need a
transaction and say which rows are still there; run_rerunning runs a transaction again after a
deadlock (and a delete's after a foreign-key violation at commit), never inside an outer one;
the admin's deletes use it. The real races are in tests/people/test_erasure_races.py."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, OperationalError, transaction
from django.urls import reverse

from memoryhub.accounts import admin as accounts_admin
from memoryhub.accounts.models import AuditAction, AuditEvent, EndUser, User
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.core import locks
from memoryhub.core.locks import (
    DELETE_RERUN_SQLSTATES,
    rows_hold,
    rows_lock,
    run_rerunning,
)
from tests.factories import TenantFactory


class _Cause(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


def database_error(kind: type[Exception], sqlstate: str) -> Exception:
    """What Django raises for a PostgreSQL error: its own class, psycopg's error as the cause."""
    error = kind(f"error {sqlstate}")
    error.__cause__ = _Cause(sqlstate)
    return error


@pytest.fixture(autouse=True)
def _no_pauses(monkeypatch):
    monkeypatch.setattr(locks, "RERUN_FIRST_DELAY_SECONDS", 0)


def failing(times: int, error: Exception):
    calls = []

    def work() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "done"

    return work, calls


def test_a_deadlock_is_run_again():
    work, calls = failing(2, database_error(OperationalError, "40P01"))

    assert run_rerunning(work) == "done"
    assert len(calls) == 3


def test_a_serialization_failure_is_run_again():
    work, calls = failing(1, database_error(OperationalError, "40001"))

    assert run_rerunning(work) == "done"
    assert len(calls) == 2


def test_it_gives_up_after_the_last_attempt():
    work, calls = failing(10, database_error(OperationalError, "40P01"))

    with pytest.raises(OperationalError):
        run_rerunning(work, attempts=3)
    assert len(calls) == 3


def test_other_errors_are_not_run_again():
    work, calls = failing(1, database_error(OperationalError, "57014"))  # a statement timeout

    with pytest.raises(OperationalError):
        run_rerunning(work)
    assert len(calls) == 1


def test_a_foreign_key_violation_is_run_again_only_for_a_delete():
    violation = database_error(IntegrityError, "23503")
    work, calls = failing(1, violation)
    with pytest.raises(IntegrityError):
        run_rerunning(work)

    work, calls = failing(1, violation)
    assert run_rerunning(work, sqlstates=DELETE_RERUN_SQLSTATES) == "done"
    assert len(calls) == 2


@pytest.mark.django_db
def test_inside_an_outer_transaction_it_runs_once():
    # The rollback took the outer transaction too: only its owner can run it again.
    work, calls = failing(1, database_error(OperationalError, "40P01"))

    with pytest.raises(OperationalError), transaction.atomic():
        run_rerunning(work)
    assert len(calls) == 1


@pytest.mark.django_db(transaction=True)
def test_row_locks_need_a_transaction_and_name_the_rows_still_there():
    tenant = TenantFactory()
    person = end_user_get_or_create(tenant=tenant, external_id="u1")
    people = EndUser.objects.filter(tenant=tenant)

    with pytest.raises(transaction.TransactionManagementError):
        rows_hold(people)
    with transaction.atomic():
        assert rows_hold(people) == [person.pk]
        assert rows_lock(people) == [person.pk]
        assert rows_hold(people.filter(external_id="nobody")) == []


@pytest.mark.django_db(transaction=True)
def test_an_admin_erasure_that_meets_a_deadlock_runs_again(client, monkeypatch):
    tenant = TenantFactory()
    client.force_login(User.objects.create_superuser(username="root", password="pw-tests-only"))
    person = end_user_get_or_create(tenant=tenant, external_id="u1")
    real_erase = accounts_admin.end_user_erase
    calls = []

    def erase_after_a_deadlock(**kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise database_error(OperationalError, "40P01")
        return real_erase(**kwargs)

    monkeypatch.setattr(accounts_admin, "end_user_erase", erase_after_a_deadlock)

    response = client.post(
        reverse("admin:accounts_enduser_delete", args=[person.pk]), {"post": "yes"}
    )

    assert response.status_code == 302
    assert len(calls) == 2
    assert not EndUser.objects.filter(pk=person.pk).exists()
    assert AuditEvent.objects.filter(action=AuditAction.ERASE).count() == 1
