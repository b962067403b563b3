"""Keep this process's memory-policy cache honest when a policy is saved or deleted here."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from memoryhub.accounts.models import MemoryPolicy
from memoryhub.accounts.selectors import memory_policy_cache_clear


@receiver(post_save, sender=MemoryPolicy)
@receiver(post_delete, sender=MemoryPolicy)
def memory_policy_changed(**_: Any) -> None:
    memory_policy_cache_clear()
