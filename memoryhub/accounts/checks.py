"""System checks of the tenancy models."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error, Tags, register
from django.db.models import Model, UniqueConstraint

from memoryhub.accounts.models import TenantOwnedModel


def _leading_fields(model: type[Model]) -> set[str]:
    """The first field of each index and unique constraint of `model` (its own Meta)."""
    firsts = {index.fields[0].lstrip("-") for index in model._meta.indexes if index.fields}
    firsts |= {
        constraint.fields[0]
        for constraint in model._meta.constraints
        if isinstance(constraint, UniqueConstraint) and constraint.fields
    }
    firsts |= {fields[0] for fields in model._meta.unique_together if fields}
    return firsts


@register(Tags.models)
def check_tenant_indexes(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """Every tenant-owned table is found by its tenant through an index: the tenant key has
    none of its own (accounts.models.TenantOwnedModel), so one of the model's must lead with
    it, or every tenant's lookups, purges and cascades would scan the table."""
    return [
        Error(
            f"{model._meta.label} has no index or unique constraint that leads with tenant.",
            hint='Add models.Index(fields=["tenant", ...]) to its Meta.indexes.',
            obj=model,
            id="memoryhub.E010",
        )
        for model in apps.get_models()
        if issubclass(model, TenantOwnedModel) and "tenant" not in _leading_fields(model)
    ]
