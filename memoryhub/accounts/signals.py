"""Keep the caches honest: this process's memory policies when a policy is saved or deleted
here; the shared verified-key cache when a key or its tenant is saved or deleted anywhere (the
admin's edits and deletes included: they go through save() and the deletion collector, which
sends post_delete for every key a tenant's delete takes with it)."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from memoryhub.accounts.models import ApiKey, MemoryPolicy, Tenant
from memoryhub.accounts.selectors import memory_policy_cache_clear
from memoryhub.accounts.services import api_key_cache_forget, api_key_cache_forget_tenant


@receiver(post_save, sender=MemoryPolicy)
@receiver(post_delete, sender=MemoryPolicy)
def memory_policy_changed(**_: Any) -> None:
    memory_policy_cache_clear()


@receiver(post_save, sender=ApiKey)
@receiver(post_delete, sender=ApiKey)
def api_key_changed(instance: ApiKey, **_: Any) -> None:
    # Revoked, deleted, re-scoped, a new expiry: the next request checks the row.
    api_key_cache_forget(prefixes=[instance.prefix])


@receiver(post_save, sender=Tenant)
def tenant_changed(instance: Tenant, created: bool, **_: Any) -> None:
    # The entries carry the tenant's row; a new tenant has no keys yet. (A deleted tenant's
    # keys go with it, each through api_key_changed.)
    if not created:
        api_key_cache_forget_tenant(tenant_id=instance.pk)
