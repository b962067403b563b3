"""`manage.py import_memory PATH --tenant SLUG [--format F] [--dry-run]`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from memoryhub.accounts.models import Tenant
from memoryhub.transfer.formats import ALIASES, FORMATS, format_name, reader_for
from memoryhub.transfer.runner import import_items
from memoryhub.transfer.types import Item


class Command(BaseCommand):
    help = (
        "Import memory into a tenant: MemoryHub's own JSON Lines export (.jsonl or .jsonl.gz) "
        "or a bot's store (basic-session: a memory/ directory; picobot: sessions.json or its "
        "SQLite database; bub: a tape .jsonl; sclaw: an sclaw memory.db; the old names seed000, "
        "seed001, seed003 and seed004 still work). Each session is its own transaction; a bad "
        "record is reported with its file and line and the rest goes on; running the same import "
        "again adds nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path, help="The file or directory to import.")
        parser.add_argument("--tenant", required=True, help="The tenant's slug.")
        parser.add_argument(
            "--format",
            choices=[*FORMATS, *ALIASES],
            default="memoryhub",
            help="Default: memoryhub.",
        )
        parser.add_argument("--dry-run", action="store_true", help="Check and count; keep nothing.")
        parser.add_argument("--no-progress", action="store_true", help="No progress bar.")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["path"]
        if not path.exists():
            raise CommandError(f"No such file or directory: {path}")
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No such tenant: {options['tenant']}")
        reader = reader_for(options["format"])
        with tqdm(
            unit=" records", desc="importing", disable=options["no_progress"], file=sys.stderr
        ) as bar:

            def progress(_: Item) -> None:
                bar.update(1)

            report = import_items(
                tenant=tenant,
                # Under its own name, so that a re-run under an old alias adds nothing.
                source=format_name(options["format"]),
                items=reader(path),
                dry_run=options["dry_run"],
                progress=progress,
            )
        for line in report.lines():
            self.stdout.write(line)
        verb = "Dry run: would import" if report.dry_run else "Imported"
        total = sum(report.imported.values())
        style = self.style.WARNING if report.skipped else self.style.SUCCESS
        self.stdout.write(
            style(f"{verb} {total} records; {len(report.skipped)} skipped (listed above).")
        )
