from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from memoryhub.accounts.models import DEFAULT_API_KEY_SCOPES, ApiKeyScope, Tenant
from memoryhub.accounts.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key for an existing tenant and print it (shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="The tenant's slug.")
        parser.add_argument("--name", default="created with create_api_key")
        parser.add_argument(
            "--scopes",
            default=",".join(DEFAULT_API_KEY_SCOPES),
            help=f"Comma-separated key scopes from: {', '.join(ApiKeyScope.values)}.",
        )
        parser.add_argument("--expires-in-days", type=int, default=None)

    def handle(
        self,
        *args: Any,
        tenant: str,
        name: str,
        scopes: str,
        expires_in_days: int | None,
        **options: Any,
    ) -> None:
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"No tenant {tenant!r}.")
        expires_at = (
            timezone.now() + dt.timedelta(days=expires_in_days) if expires_in_days else None
        )
        try:
            api_key, secret = api_key_create(
                tenant=found, name=name, scopes=scopes.split(","), expires_at=expires_at
            )
        except ValueError as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"API key for {found.slug!r} with scopes {api_key.scopes}:")
        self.stdout.write(secret)
