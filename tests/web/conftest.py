"""Page-test fixtures: people with a role in a tenant, logged in through Django's test client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from memoryhub.accounts.models import Membership, MembershipRole, Tenant, User


@pytest.fixture
def member_client(db: None) -> Callable[..., Client]:
    """member_client(tenant, role="member") -> a Client logged in as a member of `tenant`."""
    made = 0

    def make(tenant: Tenant, role: str = MembershipRole.MEMBER, **more: Any) -> Client:
        nonlocal made
        made += 1
        user = User.objects.create_user(username=f"{role}-{made}", password="pw-for-tests-only")
        Membership.objects.create(user=user, tenant=tenant, role=role)
        for other in more.get("also", []):
            Membership.objects.create(user=user, tenant=other, role=role)
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def editor(tenant: Tenant, member_client: Callable[..., Client]) -> Client:
    return member_client(tenant, MembershipRole.MEMBER)


@pytest.fixture
def viewer(tenant: Tenant, member_client: Callable[..., Client]) -> Client:
    return member_client(tenant, MembershipRole.VIEWER)
