from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.apps import AppConfig

if TYPE_CHECKING:
    from memoryhub.accounts.models import Tenant


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Conversation memory"

    def ready(self) -> None:
        from memoryhub.accounts.provenance import session_lookup_register

        session_lookup_register(_session_of_tenant)


def _session_of_tenant(tenant: Tenant, session_id: uuid.UUID) -> bool:
    from sessions_app.models import Session

    return Session.objects.filter(tenant=tenant, pk=session_id).exists()
