"""The verified-key cache (accounts.selectors.api_key_cached): a request with a key verified a
moment ago costs no key query, and whatever changes the key or its tenant takes effect on the
very next request, through the shared cache."""

import datetime as dt
from unittest import mock

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCacheClient
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from memoryhub.accounts.authentication import ApiKeyAuthentication
from memoryhub.accounts.models import Actor, ApiKey, User
from memoryhub.accounts.selectors import api_key_cache_key
from memoryhub.accounts.services import api_key_revoke
from tests.helpers import client_for, error_code

SESSIONS = "/api/v1/sessions/"


def key_queries(captured: CaptureQueriesContext) -> list[str]:
    """The SELECTs that look a key up (not the UPDATE of its last use)."""
    return [
        query["sql"]
        for query in captured.captured_queries
        if "accounts_apikey" in query["sql"] and query["sql"].lstrip().upper().startswith("SELECT")
    ]


def get_counting(client, path=SESSIONS):
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    return response, captured


@pytest.fixture
def staff_client(client, db):
    user = User.objects.create_superuser(username="root", password="pw-for-tests-only")
    client.force_login(user)
    return client


def test_a_second_request_costs_no_key_query(tenant, make_key):
    _, secret = make_key(tenant)
    client = client_for(secret)

    first, first_queries = get_counting(client)
    second, second_queries = get_counting(client)

    assert first.status_code == second.status_code == 200
    assert len(key_queries(first_queries)) == 1
    assert key_queries(second_queries) == []
    # Otherwise the same work (the first request also recorded the key's first use).
    assert [q["sql"] for q in second_queries.captured_queries] == [
        q["sql"] for q in first_queries.captured_queries if "accounts_apikey" not in q["sql"]
    ]


def test_the_cache_holds_no_secret(tenant, make_key):
    api_key, secret = make_key(tenant)
    client_for(secret).get(SESSIONS)

    entry = cache.get(api_key_cache_key(prefix=api_key.prefix))

    assert entry is not None
    assert secret.split(".", 1)[1] not in repr(entry)
    assert "hashed_key" not in entry["key"]


def test_with_the_cache_off_every_request_looks_the_key_up(tenant, make_key, settings):
    settings.MEMORYHUB_AUTH_CACHE_SECONDS = 0
    _, secret = make_key(tenant)
    client = client_for(secret)

    client.get(SESSIONS)
    response, queries = get_counting(client)

    assert response.status_code == 200
    assert len(key_queries(queries)) == 1


def test_an_entry_older_than_the_setting_is_not_used(tenant, make_key, settings):
    settings.MEMORYHUB_AUTH_CACHE_SECONDS = 30
    _, secret = make_key(tenant)
    client = client_for(secret)
    client.get(SESSIONS)

    with mock.patch("memoryhub.accounts.selectors.time.time", return_value=10**10):
        response, queries = get_counting(client)

    assert response.status_code == 200
    assert len(key_queries(queries)) == 1


def test_a_key_revoked_through_the_service_is_refused_on_the_next_request(tenant, make_key):
    api_key, secret = make_key(tenant)
    client = client_for(secret)
    assert client.get(SESSIONS).status_code == 200

    api_key_revoke(api_key=api_key, actor=Actor.system("test"))
    response = client.get(SESSIONS)

    assert response.status_code == 401
    assert "revoked" in response.json()["error"]["message"]


def test_a_key_revoked_on_the_keys_page_object_is_refused_on_the_next_request(tenant, make_key):
    # Another copy of the row (as a page or the admin loads it), not the one that was cached.
    api_key, secret = make_key(tenant)
    client = client_for(secret)
    assert client.get(SESSIONS).status_code == 200

    row = ApiKey.objects.get(pk=api_key.pk)
    row.revoked = True
    row.save()

    assert client.get(SESSIONS).status_code == 401


def test_a_key_revoked_by_the_admin_action_is_refused_on_the_next_request(
    tenant, make_key, staff_client
):
    api_key, secret = make_key(tenant)
    client = client_for(secret)
    assert client.get(SESSIONS).status_code == 200

    staff_client.post(
        reverse("admin:accounts_apikey_changelist"),
        {"action": "revoke_keys", "_selected_action": [api_key.pk]},
    )

    assert ApiKey.objects.get(pk=api_key.pk).revoked
    response = client.get(SESSIONS)
    assert response.status_code == 401
    assert "revoked" in response.json()["error"]["message"]


def test_a_key_deleted_in_the_admin_is_refused_on_the_next_request(tenant, make_key, staff_client):
    api_key, secret = make_key(tenant)
    client = client_for(secret)
    assert client.get(SESSIONS).status_code == 200

    staff_client.post(
        reverse("admin:accounts_apikey_changelist"),
        {"action": "delete_selected", "_selected_action": [api_key.pk], "post": "yes"},
    )

    assert not ApiKey.objects.filter(pk=api_key.pk).exists()
    assert client.get(SESSIONS).status_code == 401


def test_a_scope_taken_away_applies_to_the_next_request(tenant, make_key):
    api_key, secret = make_key(tenant, scopes=["read", "write"])
    client = client_for(secret)
    assert client.post(SESSIONS, {"user_id": "u"}, format="json").status_code == 201

    row = ApiKey.objects.get(pk=api_key.pk)
    row.scopes = ["read"]
    row.save()
    response = client.post(SESSIONS, {"user_id": "u2"}, format="json")

    assert response.status_code == 403
    assert error_code(response) == "insufficient_scope"


def test_a_new_expiry_applies_to_the_next_request(tenant, make_key):
    api_key, secret = make_key(tenant)
    client = client_for(secret)
    assert client.get(SESSIONS).status_code == 200

    row = ApiKey.objects.get(pk=api_key.pk)
    row.expiry_date = timezone.now() - dt.timedelta(seconds=1)
    row.save()
    response = client.get(SESSIONS)

    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]


def test_a_cached_key_that_expires_meanwhile_is_refused_without_a_query(tenant, make_key):
    _, secret = make_key(tenant, expires_at=timezone.now() + dt.timedelta(minutes=5))
    client = client_for(secret)
    assert client.get(SESSIONS).status_code == 200

    later = timezone.now() + dt.timedelta(minutes=10)
    with mock.patch("memoryhub.accounts.selectors.timezone.now", return_value=later):
        response, queries = get_counting(client)

    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]
    assert key_queries(queries) == []


def test_a_deleted_tenant_s_key_is_refused_on_the_next_request(tenant, make_key):
    _, secret = make_key(tenant)
    client = client_for(secret)
    assert client.get(SESSIONS).status_code == 200

    tenant.delete()

    assert client.get(SESSIONS).status_code == 401


def test_saving_the_tenant_drops_its_keys_from_the_cache(tenant, make_key):
    api_key, secret = make_key(tenant)
    client_for(secret).get(SESSIONS)
    assert cache.get(api_key_cache_key(prefix=api_key.prefix)) is not None

    tenant.name = "Renamed"
    tenant.save()

    assert cache.get(api_key_cache_key(prefix=api_key.prefix)) is None


def test_a_wrong_secret_with_a_cached_prefix_is_refused_and_counted(tenant, make_key, settings):
    settings.MEMORYHUB_FAILED_AUTH_LIMIT = 2
    api_key, secret = make_key(tenant)
    assert client_for(secret).get(SESSIONS).status_code == 200
    wrong = client_for(f"mh_{api_key.prefix}.not-the-secret")

    assert wrong.get(SESSIONS).status_code == 401
    assert wrong.get(SESSIONS).status_code == 401
    locked = client_for(secret).get(SESSIONS)

    # The right key from an address past the limit is refused too, cached or not.
    assert locked.status_code == 429
    assert error_code(locked) == "too_many_failed_authentications"


def test_a_cached_key_records_its_use_once_per_resolution(tenant, make_key, settings):
    settings.API_KEY_LAST_USED_RESOLUTION_SECONDS = 60
    api_key, secret = make_key(tenant)
    client = client_for(secret)
    client.get(SESSIONS)
    first_use = ApiKey.objects.get(pk=api_key.pk).last_used_at

    later = timezone.now() + dt.timedelta(minutes=2)
    updates = []
    with mock.patch("memoryhub.accounts.services.timezone.now", return_value=later):
        for _ in range(3):
            _, queries = get_counting(client)
            updates += [
                query["sql"]
                for query in queries.captured_queries
                if query["sql"].startswith("UPDATE") and "accounts_apikey" in query["sql"]
            ]

    assert first_use is not None
    assert ApiKey.objects.get(pk=api_key.pk).last_used_at == later
    assert len(updates) == 1


def test_a_cache_hit_gives_the_request_the_same_key_and_tenant(tenant, make_key):
    api_key, secret = make_key(tenant, scopes=["read", "write", "purge"])
    factory = APIRequestFactory()

    def authenticate():
        request = Request(factory.get(SESSIONS, HTTP_AUTHORIZATION=f"Bearer {secret}"))
        with CaptureQueriesContext(connection) as captured:
            _, credential = ApiKeyAuthentication().authenticate(request)
        return request, credential, captured

    authenticate()
    request, seen, captured = authenticate()

    assert key_queries(captured) == []
    assert isinstance(seen, ApiKey)
    assert (seen.pk, seen.prefix, seen.name) == (api_key.pk, api_key.prefix, api_key.name)
    assert seen.scopes == ["purge", "read", "write"]
    assert not seen.revoked
    assert seen.last_used_at is not None
    assert (seen.tenant.pk, seen.tenant.slug, seen.tenant.name) == (
        tenant.pk,
        tenant.slug,
        tenant.name,
    )
    assert seen.tenant.created_at == tenant.created_at
    assert seen.tenant.person is None
    assert request.tenant.pk == tenant.pk
    # A full row as Django loads one, minus the stored hash (deferred: nothing reads it).
    assert not seen._state.adding
    assert seen.get_deferred_fields() == {"hashed_key"}


@pytest.mark.skipif(
    not django_settings.CACHES["default"]["BACKEND"].endswith("RedisCache"),
    reason="needs REDIS_URL: the shared cache",
)
def test_a_revoke_reaches_other_processes_through_redis(tenant, make_key):
    import redis

    api_key, secret = make_key(tenant)
    client_for(secret).get(SESSIONS)
    # Another process's view: its own connection to the same Redis database.
    other = redis.Redis.from_url(django_settings.CACHES["default"]["LOCATION"])
    stored_key = cache.make_and_validate_key(api_key_cache_key(prefix=api_key.prefix))
    assert other.exists(stored_key)

    api_key_revoke(api_key=api_key, actor=Actor.system("test"))

    assert not other.exists(stored_key)


def test_the_failures_count_and_the_key_are_one_cache_read(tenant, make_key, settings):
    settings.MEMORYHUB_FAILED_AUTH_LIMIT = 5
    _, secret = make_key(tenant)
    client = client_for(secret)
    assert client.get(SESSIONS).status_code == 200  # verified and cached

    with (
        mock.patch.object(cache, "get", wraps=cache.get) as get,
        mock.patch.object(cache, "get_many", wraps=cache.get_many) as get_many,
    ):
        response, captured = get_counting(client)

    assert response.status_code == 200
    assert key_queries(captured) == []  # the key came from the cache
    read = [sorted(call.args[0]) for call in get_many.call_args_list]
    assert len(read) == 1
    assert len(read[0]) == 2
    assert any(name.startswith("auth:api-key:") for name in read[0])
    assert any("auth-failures:" in name for name in read[0])
    # Local memory's get_many is its get per key; Redis's is one MGET, and no GET beside it.
    redis_backend = isinstance(getattr(cache, "_cache", None), RedisCacheClient)
    assert get.call_count == (0 if redis_backend else 2)


def test_a_cache_outage_costs_the_key_query_and_counts_nothing(tenant, make_key, settings):
    settings.MEMORYHUB_FAILED_AUTH_LIMIT = 1
    _, secret = make_key(tenant)
    client = client_for(secret)
    assert client.get(SESSIONS).status_code == 200

    with mock.patch.object(cache, "get_many", side_effect=ConnectionError("cache down")):
        response, captured = get_counting(client)

    assert response.status_code == 200
    assert len(key_queries(captured)) == 1  # verified in the database instead
