"""`manage.py seed_demo`: a few conversations in the demo tenant, for `make run`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from facts_app.services.facts import fact_create
from facts_app.services.memories import memory_save
from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import end_user_get_or_create
from sessions_app.models import Session
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get

# Enough for a newcomer's dashboard to draw a chart and for the search to find something.
DEMO_CONVERSATIONS = (
    (
        "telegram:1001",
        "gardener",
        [
            ("user", "Hi! I'm Ana. I want to grow tomatoes and basil on my balcony in Lisbon."),
            ("assistant", "Lovely. Cherry tomatoes and Genovese basil do well in pots there."),
            ("user", "How often should I water the tomatoes in summer?"),
            ("assistant", "Every morning, about a litre per plant; less when it is cloudy."),
        ],
    ),
    (
        "whatsapp:+351900000",
        "chat",
        [
            ("user", "Can you remind me which aubergines I planted last spring?"),
            ("assistant", "You planted 'Black Beauty' aubergines in the large terracotta pot."),
        ],
    ),
    (
        "telegram:1001",
        "chat",
        [
            ("user", "My favourite colour is teal; paint ideas for the kitchen?"),
            ("assistant", "A teal accent wall with warm white cabinets would suit it."),
        ],
    ),
)


class Command(BaseCommand):
    help = "Seed a few demo conversations into a tenant that has none (default: demo)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", default="demo")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No such tenant: {options['tenant']}")
        if Session.objects.for_tenant(tenant).exists():
            self.stdout.write(f"{tenant.slug} already has conversations; nothing seeded.")
            return
        with transaction.atomic():
            demo_conversations_seed(tenant=tenant)
        self.stdout.write(f"Seeded {len(DEMO_CONVERSATIONS)} demo conversations in {tenant.slug}.")


def demo_conversations_seed(*, tenant: Tenant) -> None:
    now = timezone.now()
    for number, (user_id, agent_id, turns) in enumerate(DEMO_CONVERSATIONS):
        session, _ = session_create_or_get(tenant=tenant, user_id=user_id, agent_id=agent_id)
        started = now - dt.timedelta(days=2 * (len(DEMO_CONVERSATIONS) - number), hours=3)
        message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role=role, content=text, created_at=started + dt.timedelta(minutes=i))
                for i, (role, text) in enumerate(turns)
            ],
        )
        Session.objects.filter(pk=session.pk).update(
            created_at=started, last_active_at=started + dt.timedelta(minutes=len(turns))
        )
    ana = end_user_get_or_create(tenant=tenant, external_id="telegram:1001")
    memory_save(tenant=tenant, end_user=ana, key="name", content="Ana", pinned=True)
    fact_create(tenant=tenant, end_user=ana, content="Ana grows tomatoes and basil in Lisbon")
    fact_create(tenant=tenant, end_user=ana, content="Ana's favourite colour is teal")
