"""Fact.external_id as a column (issue 15, C4's follow-up): the unique index per tenant keeps
the id, a lost race is an IntegrityError turned into the same answers as the lookup's, and
migration 0005 copies the ids that metadata held."""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import pytest
from django.apps import apps
from django.db import IntegrityError, connection, transaction

from facts_app.models import Fact
from facts_app.services import facts as facts_service
from facts_app.services.facts import fact_create
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.core.errors import Conflict
from tests.factories import FactFactory

migration = importlib.import_module("facts_app.migrations.0005_fact_external_id")


def _blind_once(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The service's first `name` lookup finds nothing: a concurrent writer commits just after."""
    real = getattr(facts_service, name)
    calls = {"n": 0}

    def lookup(**kwargs: Any) -> Fact | None:
        calls["n"] += 1
        return None if calls["n"] == 1 else real(**kwargs)

    monkeypatch.setattr(facts_service, name, lookup)


class TestTheColumn:
    def test_the_database_refuses_a_second_fact_with_the_id(self, tenant):
        FactFactory(tenant=tenant, external_id="f1")

        with pytest.raises(IntegrityError), transaction.atomic():
            FactFactory(tenant=tenant, external_id="f1")

    def test_facts_without_an_id_and_other_tenants_do_not_clash(self, tenant, other_tenant):
        FactFactory.create_batch(2, tenant=tenant, external_id=None)
        FactFactory(tenant=tenant, external_id="f1")
        FactFactory(tenant=other_tenant, external_id="f1")

        assert Fact.objects.filter(external_id="f1").count() == 2

    def test_a_lost_race_for_the_id_on_another_text_is_a_conflict(self, tenant, monkeypatch):
        person = end_user_get_or_create(tenant=tenant, external_id="u1")
        first, _ = fact_create(tenant=tenant, end_user=person, content="Likes Go", external_id="f1")
        _blind_once(monkeypatch, "_by_external_id")

        with pytest.raises(Conflict) as raised:
            fact_create(tenant=tenant, end_user=person, content="Likes Rust", external_id="f1")

        assert raised.value.code == "fact_id_conflict"
        assert list(Fact.objects.filter(tenant=tenant).values_list("pk", flat=True)) == [first.pk]

    def test_a_lost_race_of_the_same_retry_returns_the_stored_fact(self, tenant, monkeypatch):
        person = end_user_get_or_create(tenant=tenant, external_id="u1")
        first, _ = fact_create(tenant=tenant, end_user=person, content="Likes Go", external_id="f1")
        _blind_once(monkeypatch, "_by_external_id")
        _blind_once(monkeypatch, "_existing")

        again, created = fact_create(
            tenant=tenant, end_user=person, content="Likes Go", external_id="f1"
        )

        assert (again.pk, created) == (first.pk, False)

    def test_a_lost_race_for_the_text_gives_the_winner_the_id(self, tenant, monkeypatch):
        person = end_user_get_or_create(tenant=tenant, external_id="u1")
        plain, _ = fact_create(tenant=tenant, end_user=person, content="Likes Go")
        _blind_once(monkeypatch, "_existing")

        found, created = fact_create(
            tenant=tenant, end_user=person, content="Likes Go", external_id="f1"
        )

        assert (found.pk, created) == (plain.pk, False)
        plain.refresh_from_db()
        assert (plain.external_id, plain.metadata) == ("f1", {"external_id": "f1"})


class TestTheDataMigration:
    def _run(self, function: Any) -> None:
        function(apps, SimpleNamespace(connection=connection))

    def test_ids_are_copied_the_first_of_a_duplicate_and_bad_ones_left(self, tenant, other_tenant):
        kept = FactFactory(tenant=tenant, metadata={"external_id": "a"})
        duplicate = FactFactory(tenant=tenant, metadata={"external_id": "a"})
        elsewhere = FactFactory(tenant=other_tenant, metadata={"external_id": "a"})
        not_text = FactFactory(tenant=tenant, metadata={"external_id": 7})
        too_long = FactFactory(tenant=tenant, metadata={"external_id": "x" * 256})
        empty = FactFactory(tenant=tenant, metadata={"external_id": ""})
        none = FactFactory(tenant=tenant, metadata={"other": 1})

        self._run(migration.copy_to_column)

        ids = dict(Fact.objects.values_list("pk", "external_id"))
        assert (ids[kept.pk], ids[elsewhere.pk]) == ("a", "a")
        assert {ids[f.pk] for f in (duplicate, not_text, too_long, empty, none)} == {None}

    def test_it_works_in_batches(self, tenant, monkeypatch):
        monkeypatch.setattr(migration, "BATCH", 2)
        facts = [FactFactory(tenant=tenant, metadata={"external_id": f"f{n}"}) for n in range(5)]

        self._run(migration.copy_to_column)

        assert [Fact.objects.get(pk=f.pk).external_id for f in facts] == [f"f{n}" for n in range(5)]

    def test_the_reverse_puts_the_ids_back_in_metadata(self, tenant):
        fact = FactFactory(tenant=tenant, external_id="f1", metadata={"source": "import"})

        self._run(migration.copy_to_metadata)

        fact.refresh_from_db()
        assert fact.metadata == {"source": "import", "external_id": "f1"}
