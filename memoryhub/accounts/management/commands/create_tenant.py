from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from memoryhub.accounts.models import DEFAULT_API_KEY_SCOPES, ApiKeyScope, Tenant
from memoryhub.accounts.services import api_key_create, tenant_create


class Command(BaseCommand):
    help = "Create a tenant and print a new API key for it (the key is shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="Short unique name, e.g. 'acme-support-bot'.")
        parser.add_argument("--name", default="", help="Display name (defaults to the slug).")
        parser.add_argument(
            "--scopes",
            default=",".join(DEFAULT_API_KEY_SCOPES),
            help=f"Comma-separated key scopes from: {', '.join(ApiKeyScope.values)}.",
        )

    def handle(self, *args: Any, slug: str, name: str, scopes: str, **options: Any) -> None:
        if Tenant.objects.filter(slug=slug).exists():
            raise CommandError(f"Tenant {slug!r} already exists; use create_api_key for a new key.")
        try:
            with transaction.atomic():
                tenant = tenant_create(slug=slug, name=name)
                _, secret = api_key_create(
                    tenant=tenant, name="created with create_tenant", scopes=scopes.split(",")
                )
        except ValueError as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"Created tenant {tenant.slug!r}.")
        self.stdout.write(f"API key (shown once, store it now): {secret}")
