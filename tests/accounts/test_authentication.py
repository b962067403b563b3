import datetime as dt

import pytest
from django.utils import timezone

from memoryhub.accounts.models import Actor, ApiKey, AuditAction, AuditEvent
from memoryhub.accounts.services import api_key_revoke
from tests.helpers import client_for, error_code

SESSIONS = "/api/v1/sessions/"


def test_it_refuses_a_request_without_a_key(api, db):
    from rest_framework.test import APIClient

    response = APIClient().get(SESSIONS)

    assert response.status_code == 401
    assert error_code(response) == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer mh_nodot", "Bearer mh_abcdefgh.wrongsecret", "Token whatever", "Basic Zm9v"],
)
def test_it_refuses_malformed_or_unknown_keys(db, tenant, header):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)

    response = client.get(SESSIONS)

    assert response.status_code == 401
    assert error_code(response) == "authentication_failed"


def test_it_accepts_a_key_in_the_x_api_key_header(tenant, make_key):
    from rest_framework.test import APIClient

    _, secret = make_key(tenant)
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=secret)

    assert client.get(SESSIONS).status_code == 200


def test_it_refuses_a_revoked_key(tenant, make_key):
    api_key, secret = make_key(tenant)
    api_key_revoke(api_key=api_key, actor=Actor.system("test"))

    response = client_for(secret).get(SESSIONS)

    assert response.status_code == 401
    assert "revoked" in response.json()["error"]["message"]
    assert AuditEvent.objects.filter(action=AuditAction.KEY_REVOKE, tenant=tenant).exists()


def test_it_refuses_an_expired_key(tenant, make_key):
    _, secret = make_key(tenant, expires_at=timezone.now() - dt.timedelta(seconds=1))

    response = client_for(secret).get(SESSIONS)

    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]


def test_it_accepts_a_key_before_its_expiry(tenant, make_key):
    _, secret = make_key(tenant, expires_at=timezone.now() + dt.timedelta(hours=1))

    assert client_for(secret).get(SESSIONS).status_code == 200


def test_it_forbids_writes_with_a_read_only_key(read_only_api):
    response = read_only_api.post(SESSIONS, {"user_id": "u"}, format="json")

    assert response.status_code == 403
    assert error_code(response) == "insufficient_scope"


def test_it_lets_a_read_only_key_read(read_only_api):
    assert read_only_api.get(SESSIONS).status_code == 200


def test_it_records_last_use_at_most_once_per_resolution(tenant, make_key, settings):
    settings.API_KEY_LAST_USED_RESOLUTION_SECONDS = 3600
    api_key, secret = make_key(tenant)
    client = client_for(secret)

    client.get(SESSIONS)
    first = ApiKey.objects.get(pk=api_key.pk).last_used_at
    client.get(SESSIONS)
    second = ApiKey.objects.get(pk=api_key.pk).last_used_at

    assert first is not None
    assert second == first


def test_it_stores_only_a_hash_of_the_key(tenant, make_key):
    api_key, secret = make_key(tenant)

    stored = ApiKey.objects.get(pk=api_key.pk)

    assert secret.startswith("mh_")
    assert secret.split(".", 1)[1] not in stored.hashed_key
    assert stored.hashed_key.startswith("sha512$$")
