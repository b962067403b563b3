from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from memoryhub.accounts.models import (
    Actor,
    ApiKey,
    ApiKeyScope,
    Membership,
    MembershipRole,
    Tenant,
    User,
)
from memoryhub.accounts.services import api_key_create, api_key_revoke, tenant_create

DEMO_KEY_NAME = "demo key (make run)"


class Command(BaseCommand):
    help = (
        "For `make run`: ensure a demo tenant and an admin user exist, then issue a fresh demo API "
        "key (revoking the previous one) and print it."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        username = os.environ.get("DEMO_ADMIN_USERNAME", "admin")
        password = os.environ.get("DEMO_ADMIN_PASSWORD", "admin")
        with transaction.atomic():
            tenant = Tenant.objects.filter(slug="demo").first() or tenant_create(
                slug="demo", name="Demo tenant"
            )
            admin = User.objects.filter(username=username).first()
            if admin is None:
                admin = User.objects.create_superuser(username=username, password=password)
                admin_note = f"created with password {password!r}"
            else:
                admin_note = "already existed (password unchanged)"
            Membership.objects.get_or_create(
                user=admin, tenant=tenant, defaults={"role": MembershipRole.OWNER}
            )
            for old in ApiKey.objects.filter(tenant=tenant, name=DEMO_KEY_NAME, revoked=False):
                api_key_revoke(api_key=old, actor=Actor.system("bootstrap_demo"))
            _, secret = api_key_create(
                tenant=tenant, name=DEMO_KEY_NAME, scopes=list(ApiKeyScope.values)
            )
        self.stdout.write("")
        self.stdout.write("=" * 72)
        self.stdout.write(f" Demo tenant: {tenant.slug}")
        self.stdout.write(f" Admin user:  {username} ({admin_note})")
        self.stdout.write(" Web UI:      http://127.0.0.1:8000/ (log in as the admin) · /admin/")
        self.stdout.write(f" API key:     {secret}")
        self.stdout.write(
            "   (all scopes; a new key is issued and the old one revoked on each run)"
        )
        self.stdout.write("=" * 72)
        self.stdout.write("")
