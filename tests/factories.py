"""factory_boy factories for the rows tests need; services are used where behaviour matters."""

from __future__ import annotations

import factory
from django.utils import timezone

from memoryhub.accounts.models import EndUser, Tenant
from sessions_app.models import Message, MessageRole, Session


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())


class EndUserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = EndUser

    tenant = factory.SubFactory(TenantFactory)
    external_id = factory.Sequence(lambda n: f"test:user-{n}")


class SessionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Session

    tenant = factory.SubFactory(TenantFactory)
    end_user = factory.SubFactory(EndUserFactory, tenant=factory.SelfAttribute("..tenant"))
    agent_id = "chat"
    last_active_at = factory.LazyFunction(timezone.now)


class MessageFactory(factory.django.DjangoModelFactory):
    """Builds rows directly; keep `seq` and the session's counters in step yourself."""

    class Meta:
        model = Message

    session = factory.SubFactory(SessionFactory)
    tenant = factory.SelfAttribute("session.tenant")
    seq = factory.Sequence(lambda n: n + 1)
    role = MessageRole.USER
    content = factory.Faker("sentence")
    created_at = factory.LazyFunction(timezone.now)
