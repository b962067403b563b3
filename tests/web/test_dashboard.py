"""Login, the tenant a page is about, and the dashboard."""

from __future__ import annotations

import datetime as dt

from django.test import Client
from django.utils import timezone

from memoryhub.accounts.models import MembershipRole, User
from sessions_app.models import Message
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get


def test_a_visitor_is_sent_to_log_in_and_can(client, tenant, db):
    User.objects.create_user(username="ana", password="pw-for-tests-only")

    assert client.get("/").url == "/login/?next=/"
    response = client.post(
        "/login/", {"username": "ana", "password": "pw-for-tests-only", "next": "/"}
    )

    assert (response.status_code, response.url) == (302, "/")


def test_a_wrong_password_says_so_on_the_form(client, db):
    User.objects.create_user(username="ana", password="pw-for-tests-only")

    response = client.post("/login/", {"username": "ana", "password": "nope"})

    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content


def test_the_dashboard_counts_and_charts_the_tenant(editor, tenant, other_tenant):
    for owner, user in ((tenant, "u1"), (other_tenant, "u2")):
        session, _ = session_create_or_get(tenant=owner, user_id=user, agent_id="chat")
        message_append_batch(
            tenant=owner,
            session_id=session.pk,
            messages=[MessageInput(role="user", content="hi"), MessageInput(role="assistant")],
        )
    Message.objects.filter(tenant=tenant, seq=1).update(
        created_at=timezone.now() - dt.timedelta(days=3)
    )

    response = editor.get("/")

    assert response.status_code == 200
    counts = response.context["counts"]
    assert (counts.end_users, counts.sessions, counts.messages) == (1, 1, 2)
    activity = response.context["activity"]
    assert len(activity["days"]) == 30
    assert sum(activity["messages"]) == 2
    assert activity["messages"][-4] == 1
    assert response.context["agents"][0]["agent_id"] == "chat"
    assert b'id="activity-chart"' in response.content
    assert b"vendor/chartjs/chart.umd.min.js" in response.content


def test_someone_in_no_tenant_sees_why(client, db):
    user = User.objects.create_user(username="loner", password="pw-for-tests-only")
    client.force_login(user)

    response = client.get("/")

    assert response.status_code == 403
    assert b"not a member of any tenant" in response.content


def test_switching_tenants_only_among_ones_own(member_client, tenant, other_tenant, db):
    from tests.factories import TenantFactory

    third = TenantFactory(slug="third")
    client: Client = member_client(tenant, MembershipRole.VIEWER, also=[third])

    assert client.get("/").context["request"].tenant == tenant
    client.post("/switch-tenant/", {"tenant": "third", "next": "/"})
    assert client.get("/").context["request"].tenant == third
    client.post("/switch-tenant/", {"tenant": other_tenant.slug, "next": "https://evil.example/"})
    response = client.get("/")
    assert response.context["request"].tenant == third
    assert response.context["can_edit"] is False


def test_the_navigation_lists_the_pages_that_exist(editor):
    links = editor.get("/").context["navigation"]

    assert links[0] == {"url": "/", "label": "Dashboard", "current": True}
