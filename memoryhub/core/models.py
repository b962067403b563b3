"""Abstract bases every tenant-owned table uses: the tenant column and the one narrowing method."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from django.db import models

if TYPE_CHECKING:
    from memoryhub.accounts.models import Tenant


class TenantQuerySet(models.QuerySet[Any]):
    def for_tenant(self, tenant: Tenant) -> Self:
        """The only way API and page code narrows rows: everything else starts from here."""
        return self.filter(tenant=tenant)


class TenantOwnedModel(models.Model):
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="+")

    objects = TenantQuerySet.as_manager()

    class Meta:
        abstract = True
