"""Every model has a factory, and every factory writes a row its parents' tenant agrees with."""

from __future__ import annotations

import inspect

import factory
import pytest
from django.apps import apps
from django.db import models

from facts_app.selectors.facts import fact_search_for_person
from tests import factories

FACTORIES = sorted(
    (
        value
        for value in vars(factories).values()
        if inspect.isclass(value)
        and issubclass(value, factory.django.DjangoModelFactory)
        and not value._meta.abstract
    ),
    key=lambda value: value.__name__,
)
APPS_WITH_FACTORIES = ("accounts", "llm", "transfer", "sessions_app", "facts_app")


def _parents(row: models.Model) -> list[models.Model]:
    """The rows this one points to (other than its tenant)."""
    found = []
    for field in row._meta.concrete_fields:
        if field.is_relation and field.name != "tenant":
            parent = getattr(row, field.name)
            if parent is not None:
                found.append(parent)
    return found


def test_it_has_a_factory_for_every_model():
    models_with_factories = {factory_class._meta.model for factory_class in FACTORIES}
    expected = {
        model for label in APPS_WITH_FACTORIES for model in apps.get_app_config(label).get_models()
    }

    assert expected - models_with_factories == set()


@pytest.mark.django_db
@pytest.mark.parametrize("factory_class", FACTORIES, ids=lambda value: value.__name__)
def test_it_creates_a_row_in_its_parents_tenant(factory_class):
    row = factory_class()
    model = factory_class._meta.model

    assert model.objects.filter(pk=row.pk).exists()
    for parent in _parents(row):
        assert parent.pk is not None
        if hasattr(parent, "tenant_id"):
            assert parent.tenant_id == row.tenant_id, (parent, row)


# Parents two rows can share; the rest share the tenant. The tenant policy is one per tenant.
SHARED = {
    "MessageFactory": "session",
    "StateEntryFactory": "session",
    "SummaryFactory": "session",
    "SubTaskFactory": "task",
    "UserMemoryVersionFactory": "memory",
    "PendingUploadChunkFactory": "upload",
    "TenantFactory": None,
    "UserFactory": None,
}
MORE = {"MemoryPolicyFactory": {"agent_id": "planner"}}


@pytest.mark.django_db
@pytest.mark.parametrize("factory_class", FACTORIES, ids=lambda value: value.__name__)
def test_its_sequences_let_two_rows_share_a_parent(factory_class):
    first = factory_class()
    shared = SHARED.get(factory_class.__name__, "tenant")
    kwargs = {shared: getattr(first, shared)} if shared else {}

    second = factory_class(**kwargs, **MORE.get(factory_class.__name__, {}))

    assert second.pk != first.pk


@pytest.mark.django_db
def test_it_refuses_a_parent_from_another_tenant():
    person = factories.EndUserFactory()

    with pytest.raises(ValueError, match="end_user belongs to tenant"):
        factories.PlanFactory(tenant=factories.TenantFactory(), end_user=person)


def test_it_builds_rows_without_the_database():
    message = factories.MessageFactory.build()

    assert message.pk is None
    assert message.tenant is message.session.tenant


@pytest.mark.django_db
def test_a_factory_fact_is_found_by_search_like_a_posted_one():
    fact = factories.FactFactory(content="The user keeps bees on the roof.")

    hits = fact_search_for_person(
        tenant_id=fact.tenant_id, end_user_id=fact.end_user_id, query="bees"
    )

    assert [hit.id for hit in hits] == [fact.pk]
