import io
import re

import pytest
from django.core.management import CommandError, call_command

from memoryhub.accounts.models import ApiKey, Membership, Tenant, User
from tests.helpers import client_for

KEY = re.compile(r"(mh_\S+)")


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_tenant_prints_a_working_key(db):
    output = run("create_tenant", "support-bot", "--name", "Support bot")

    secret = KEY.search(output).group(1)
    assert Tenant.objects.get(slug="support-bot").name == "Support bot"
    assert client_for(secret).get("/api/v1/sessions/").status_code == 200


def test_create_tenant_refuses_an_existing_slug(tenant):
    with pytest.raises(CommandError, match="already exists"):
        run("create_tenant", tenant.slug)


def test_create_tenant_refuses_unknown_scopes(db):
    with pytest.raises(CommandError, match="Unknown API key scopes"):
        run("create_tenant", "x", "--scopes", "read,admin")
    assert not Tenant.objects.filter(slug="x").exists()


def test_create_api_key_issues_a_key_with_the_asked_scopes(tenant):
    output = run("create_api_key", "--tenant", tenant.slug, "--scopes", "read")

    secret = KEY.search(output).group(1)
    client = client_for(secret)
    assert client.get("/api/v1/sessions/").status_code == 200
    assert client.post("/api/v1/sessions/", {}, format="json").status_code == 403


def test_bootstrap_demo_is_rerunnable_and_revokes_the_previous_demo_key(db):
    first = KEY.search(run("bootstrap_demo")).group(1)
    second = KEY.search(run("bootstrap_demo")).group(1)

    assert client_for(first).get("/api/v1/sessions/").status_code == 401
    assert client_for(second).get("/api/v1/sessions/").status_code == 200
    assert User.objects.filter(username="admin", is_superuser=True).count() == 1
    assert Membership.objects.filter(tenant__slug="demo").count() == 1
    assert ApiKey.objects.filter(tenant__slug="demo", revoked=False).count() == 1


def test_seed_demo_fills_an_empty_demo_tenant_once(db):
    from sessions_app.models import Message, Session

    run("bootstrap_demo")
    assert "Seeded 3 demo conversations" in run("seed_demo")
    assert "nothing seeded" in run("seed_demo")
    assert Session.objects.count() == 3
    assert Message.objects.filter(content__contains="aubergines").count() == 2
