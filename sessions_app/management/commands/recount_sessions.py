"""`manage.py recount_sessions [--tenant SLUG]`: set sessions' counters to what they store."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memoryhub.accounts.models import Tenant
from sessions_app.prune import session_counters_recount


class Command(BaseCommand):
    help = (
        "Count each session's messages and tokens again and correct message_count, "
        "token_count and summarized_tokens where they differ: a one-off repair for counters "
        "that drifted when retention or a purge removed old messages (before they were kept "
        "exact). Safe while bots write; run it once after upgrading."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--tenant", action="append", default=[], help="A tenant slug; repeatable."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slugs: list[str] = options["tenant"]
        tenants = Tenant.objects.order_by("pk")
        if slugs:
            tenants = tenants.filter(slug__in=slugs)
            missing = sorted(set(slugs) - set(tenants.values_list("slug", flat=True)))
            if missing:
                raise CommandError(f"No such tenant: {', '.join(missing)}")
        for tenant in tenants:
            corrected = session_counters_recount(tenant=tenant)
            self.stdout.write(f"{tenant.slug}: {corrected} session(s) corrected")
