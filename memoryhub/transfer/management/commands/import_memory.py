"""`manage.py import_memory PATH --tenant SLUG [--format F] [--dry-run]
[--retention extend|pin|proceed]`."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from memoryhub.accounts.models import Actor, Tenant
from memoryhub.transfer.formats import ALIASES, FORMATS, format_name, reader_for
from memoryhub.transfer.retention import (
    RetentionChoice,
    RetentionSurvey,
    RetentionSurveyor,
    retention_choice_apply,
    retention_survey,
)
from memoryhub.transfer.runner import import_items
from memoryhub.transfer.types import Item


class Command(BaseCommand):
    # The model checks only: the URL checks import every view of the web process (seconds of
    # an import's start and tens of MB, for nothing an import uses).
    requires_system_checks = [Tags.models]
    help = (
        "Import memory into a tenant: MemoryHub's own JSON Lines export (.jsonl or .jsonl.gz) "
        "or a bot's store (basic-session: a memory/ directory; picobot: sessions.json or its "
        "SQLite database; bub: a tape .jsonl; sclaw: an sclaw memory.db; the old names seed000, "
        "seed001, seed003 and seed004 still work). Each session is its own transaction; a bad "
        "record is reported with its file and line and the rest goes on; running the same import "
        "again adds only what the store gained since. Before writing, it says what falls outside "
        "the tenant's retention windows; if anything does, choose with --retention (with "
        "--retention proceed given, it says so with the report, counted in the same pass)."
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
        parser.add_argument(
            "--retention",
            choices=RetentionChoice.values,
            help="What to do with imported items older than the tenant's retention windows: "
            "extend the policy (keep forever), pin what is imported, or proceed (the next "
            "retention run removes them). Required when the input holds such items.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["path"]
        if not path.exists():
            raise CommandError(f"No such file or directory: {path}")
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No such tenant: {options['tenant']}")
        reader = reader_for(options["format"])
        source = format_name(options["format"])
        choice = options["retention"]
        items: Iterable[Item] = reader(path)
        # `proceed` chosen beforehand changes nothing before the import writes: the survey then
        # counts in the import's own pass (a second read of the input was a fifteenth of a large
        # import's time) and is told with its report. Any other way, it reads the input first
        # and is told before anything is written.
        counted_while_importing = choice == RetentionChoice.PROCEED and not options["dry_run"]
        if counted_while_importing:
            surveyor = RetentionSurveyor(tenant=tenant, source=source)
            items = map(surveyor.see, items)
            survey = surveyor.survey
        else:
            survey = retention_survey(tenant=tenant, source=source, items=reader(path))
            self._tell(survey)
            if survey.outside and choice is None:
                choices = "; ".join(f"{c.value}: {c.label}" for c in RetentionChoice)
                if not options["dry_run"]:
                    raise CommandError(f"Nothing imported. Choose with --retention ({choices}).")
                self.stdout.write(f"Choose with --retention when importing ({choices}).")
            elif survey.outside and not options["dry_run"]:
                self._apply(tenant=tenant, survey=survey, choice=RetentionChoice(choice))
        with tqdm(
            unit=" records", desc="importing", disable=options["no_progress"], file=sys.stderr
        ) as bar:

            def progress(_: Item) -> None:
                bar.update(1)

            report = import_items(
                tenant=tenant,
                # Under its own name, so that a re-run under an old alias adds nothing.
                source=source,
                items=items,
                dry_run=options["dry_run"],
                pin=survey.outside and choice == RetentionChoice.PIN,
                progress=progress,
            )
        if counted_while_importing:
            self._tell(survey)
            if survey.outside:
                self._apply(tenant=tenant, survey=survey, choice=RetentionChoice.PROCEED)
        for line in report.lines():
            self.stdout.write(line)
        verb = "Dry run: would import" if report.dry_run else "Imported"
        total = sum(report.imported.values())
        style = self.style.WARNING if report.skipped or report.changed else self.style.SUCCESS
        self.stdout.write(
            style(
                f"{verb} {total} records; {len(report.skipped)} skipped"
                + (f", {len(report.changed)} changed" if report.changed else "")
                + " (listed above)."
            )
        )

    def _tell(self, survey: RetentionSurvey) -> None:
        if survey.outside:
            for line in survey.lines():
                self.stdout.write(self.style.WARNING(line))

    def _apply(self, *, tenant: Tenant, survey: RetentionSurvey, choice: RetentionChoice) -> None:
        for line in retention_choice_apply(
            tenant=tenant, survey=survey, choice=choice, actor=Actor.command("import_memory")
        ):
            self.stdout.write(line)
