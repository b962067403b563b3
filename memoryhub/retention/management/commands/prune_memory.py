"""`manage.py prune_memory [--tenant SLUG] [--dry-run]`: apply retention now, by hand."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from memoryhub.accounts.models import Actor, Tenant
from memoryhub.retention.prune import BATCH_SIZE, retention_prune


class Command(BaseCommand):
    help = (
        "Apply each tenant's retention policy now, as the hourly beat task does: expired "
        "sessions, messages, replaced summaries, daily notes, expired memories and idempotency "
        "records go, in batches; each tenant's run is audited. --dry-run only counts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--tenant",
            action="append",
            default=[],
            help="A tenant slug; repeatable. Default: every tenant.",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would go; delete nothing."
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=BATCH_SIZE,
            help=f"Rows per delete (default {BATCH_SIZE}).",
        )
        parser.add_argument(
            "--no-progress", action="store_true", help="No progress bar (for logs)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slugs: list[str] = options["tenant"]
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1.")
        tenants = Tenant.objects.order_by("pk")
        if slugs:
            tenants = tenants.filter(slug__in=slugs)
            missing = sorted(set(slugs) - set(tenants.values_list("slug", flat=True)))
            if missing:
                raise CommandError(f"No such tenant: {', '.join(missing)}")
        dry_run: bool = options["dry_run"]
        with tqdm(
            unit=" rows",
            desc="counting" if dry_run else "deleting",
            disable=options["no_progress"],
            file=sys.stderr,
        ) as bar:

            def progress(kind: str, rows: int) -> None:
                bar.set_postfix_str(kind, refresh=False)
                bar.update(rows)

            reports = retention_prune(
                tenants=tenants,
                dry_run=dry_run,
                batch_size=options["batch_size"],
                progress=progress,
                actor=Actor.command("prune_memory"),
            )
        verb = "would delete" if dry_run else "deleted"
        for report in reports:
            counts = report.as_dict()
            summary = ", ".join(f"{kind}={count}" for kind, count in counts.items()) or "nothing"
            self.stdout.write(f"{report.tenant.slug}: {verb} {summary}")
        total = sum(report.total for report in reports)
        self.stdout.write(self.style.SUCCESS(f"{verb} {total} rows in {len(reports)} tenant(s)"))
