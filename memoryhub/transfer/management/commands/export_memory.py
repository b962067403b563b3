"""`manage.py export_memory --tenant SLUG [--user ID] -o FILE.jsonl[.gz]`."""

from __future__ import annotations

import gzip
import json
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from memoryhub.accounts.models import Actor, EndUser, Tenant
from memoryhub.transfer.export import export_records
from memoryhub.transfer.services import tenant_export_audit


class Command(BaseCommand):
    help = (
        "Write a tenant's memory (or one person's) as MemoryHub's JSON Lines export: a header, "
        "then one record per object. A .gz name compresses it. `import_memory` reads it back."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="The tenant's slug.")
        parser.add_argument("--user", help="Only this person (their end-user id).")
        parser.add_argument("-o", "--output", required=True, type=Path, help="'-' for stdout.")
        parser.add_argument("--no-progress", action="store_true", help="No progress bar.")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No such tenant: {options['tenant']}")
        end_user = None
        if options["user"]:
            end_user = EndUser.objects.filter(tenant=tenant, external_id=options["user"]).first()
            if end_user is None:
                raise CommandError(f"No such user in {tenant.slug}: {options['user']}")
        output: Path = options["output"]
        count = 0
        with (
            _open(output) as handle,
            tqdm(
                unit=" records", desc="exporting", disable=options["no_progress"], file=sys.stderr
            ) as bar,
        ):
            for record in export_records(tenant=tenant, end_user=end_user):
                handle.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
                handle.write("\n")
                count += 1
                bar.update(1)
        tenant_export_audit(
            tenant=tenant,
            end_user=end_user,
            actor=Actor.command("export_memory"),
            records=count,
        )
        if str(output) != "-":
            self.stdout.write(self.style.SUCCESS(f"Wrote {count} records to {output}"))


def _open(path: Path) -> AbstractContextManager[IO[str]]:
    if str(path) == "-":
        return nullcontext(sys.stdout)  # stdout stays open
    if path.suffix == ".gz":
        return gzip.open(path, "wt", encoding="utf-8")
    return path.open("w", encoding="utf-8")
