"""Issue 14 item 15: a key past its request rate, and an address past its wrong keys, get 429
with Retry-After in the API's error shape; the counts live in the cache, so every client (and,
with Redis, every web process) of a key counts against the same number."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from tests.helpers import client_for, error_code

SESSIONS = "/api/v1/sessions/"
# Five seconds into a minute: every window in these tests is a minute or five, so the test
# knows how long the Retry-After must be and never straddles a window's end.
START = dt.datetime(2031, 3, 4, 12, 0, 5, tzinfo=dt.UTC)


@pytest.fixture
def clock():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


@pytest.fixture
def three_a_minute(settings):
    settings.MEMORYHUB_RATE_LIMIT_PER_KEY = "3/min"


def _from(address: str, secret: str | None = None, **headers: str) -> APIClient:
    client = client_for(secret) if secret else APIClient()
    client.defaults["REMOTE_ADDR"] = address
    client.defaults.update(headers)
    return client


# --- requests per key -----------------------------------------------------------------------


def test_it_answers_429_with_retry_after_past_the_key_rate(clock, three_a_minute, api):
    statuses = [api.get(SESSIONS).status_code for _ in range(3)]
    refused = api.get(SESSIONS)

    assert statuses == [200, 200, 200]
    assert refused.status_code == 429
    assert refused["Retry-After"] == "55"
    assert error_code(refused) == "rate_limited"
    assert "Retry in 55 seconds" in refused.json()["error"]["message"]


def test_it_serves_the_key_again_in_the_next_window(clock, three_a_minute, api):
    for _ in range(4):
        api.get(SESSIONS)

    clock.shift(55)

    assert api.get(SESSIONS).status_code == 200


def test_two_clients_of_one_key_share_its_count(clock, three_a_minute, tenant, make_key):
    _, secret = make_key(tenant)
    first, second = client_for(secret), _from("10.0.0.9", secret)

    assert first.get(SESSIONS).status_code == 200
    assert second.get(SESSIONS).status_code == 200
    assert first.post(SESSIONS, {"user_id": "u1"}, format="json").status_code == 201

    assert second.get(SESSIONS).status_code == 429
    assert first.get(SESSIONS).status_code == 429


def test_another_key_of_the_same_tenant_has_its_own_count(clock, three_a_minute, tenant, make_key):
    busy, quiet = client_for(make_key(tenant)[1]), client_for(make_key(tenant)[1])
    for _ in range(4):
        busy.get(SESSIONS)

    assert busy.get(SESSIONS).status_code == 429
    assert quiet.get(SESSIONS).status_code == 200


def test_off_means_no_limit(clock, settings, api):
    settings.MEMORYHUB_RATE_LIMIT_PER_KEY = None

    assert {api.get(SESSIONS).status_code for _ in range(30)} == {200}


def test_the_open_schema_is_not_counted_against_anyone(clock, three_a_minute, client):
    assert {client.get("/api/schema/").status_code for _ in range(5)} == {200}


def test_a_cache_outage_lets_requests_through(clock, three_a_minute, settings, api):
    # Nothing listens on port 9: the counters cannot be reached, and the API stays up.
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        }
    }

    assert {api.get(SESSIONS).status_code for _ in range(5)} == {200}


@pytest.mark.skipif(not django_settings.REDIS_URL, reason="needs REDIS_URL")
def test_with_redis_the_count_is_in_redis_where_every_process_reads_it(
    clock, three_a_minute, settings, api
):
    import redis

    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": django_settings.REDIS_CACHE_URL,
            "KEY_PREFIX": "test-rate-limits",
        }
    }
    for _ in range(2):
        api.get(SESSIONS)

    raw = redis.Redis.from_url(django_settings.REDIS_CACHE_URL)
    keys = raw.keys("test-rate-limits:*rate:api_key:*")
    try:
        assert len(keys) == 1
        assert int(raw.get(keys[0])) == 2
    finally:
        raw.delete(*keys)


# --- wrong keys per client address --------------------------------------------------------


@pytest.fixture
def five_wrong_keys(settings):
    settings.MEMORYHUB_FAILED_AUTH_LIMIT = 5
    settings.MEMORYHUB_FAILED_AUTH_WINDOW_SECONDS = 300


WRONG = "mh_abcdefgh.not-the-secret"


def test_an_address_past_its_wrong_keys_gets_429_even_with_a_right_key(
    clock, five_wrong_keys, tenant, make_key
):
    attacker = _from("203.0.113.7", WRONG)
    statuses = [attacker.get(SESSIONS).status_code for _ in range(5)]
    refused = attacker.get(SESSIONS)
    right_key_from_there = _from("203.0.113.7", make_key(tenant)[1]).get(SESSIONS)

    assert statuses == [401] * 5
    assert refused.status_code == 429
    assert error_code(refused) == "too_many_failed_authentications"
    assert refused["Retry-After"] == "295"  # the five-minute window started at 12:00:00
    assert right_key_from_there.status_code == 429


def test_another_address_is_unaffected(clock, five_wrong_keys, tenant, make_key):
    for _ in range(6):
        _from("203.0.113.7", WRONG).get(SESSIONS)

    assert _from("198.51.100.2", make_key(tenant)[1]).get(SESSIONS).status_code == 200
    assert _from("198.51.100.2", WRONG).get(SESSIONS).status_code == 401


def test_a_success_does_not_reset_the_failures(clock, five_wrong_keys, tenant, make_key):
    _, secret = make_key(tenant)
    for _ in range(4):
        _from("203.0.113.7", WRONG).get(SESSIONS)

    assert _from("203.0.113.7", secret).get(SESSIONS).status_code == 200
    assert _from("203.0.113.7", WRONG).get(SESSIONS).status_code == 401
    assert _from("203.0.113.7", secret).get(SESSIONS).status_code == 429


def test_the_address_is_served_again_after_the_window(clock, five_wrong_keys, tenant, make_key):
    for _ in range(6):
        _from("203.0.113.7", WRONG).get(SESSIONS)

    clock.shift(295)

    assert _from("203.0.113.7", make_key(tenant)[1]).get(SESSIONS).status_code == 200


def test_requests_without_a_key_are_not_counted_as_failures(clock, five_wrong_keys, api):
    for _ in range(10):
        assert _from("203.0.113.7").get(SESSIONS).status_code == 401

    api.defaults["REMOTE_ADDR"] = "203.0.113.7"
    assert api.get(SESSIONS).status_code == 200


def test_x_forwarded_for_is_ignored_unless_proxies_are_configured(
    clock, five_wrong_keys, tenant, make_key
):
    # A client rotating the header would otherwise get a fresh count each time.
    for number in range(6):
        _from("203.0.113.7", WRONG, HTTP_X_FORWARDED_FOR=f"10.1.1.{number}").get(SESSIONS)

    assert _from("203.0.113.7", make_key(tenant)[1]).get(SESSIONS).status_code == 429


def test_behind_a_proxy_the_address_the_proxy_saw_counts(
    clock, five_wrong_keys, settings, tenant, make_key
):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    proxy = "10.0.0.1"
    for _ in range(6):
        # What the client wrote first is ignored; the proxy appended the address it saw.
        _from(proxy, WRONG, HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.7").get(SESSIONS)
    _, secret = make_key(tenant)

    blocked = _from(proxy, secret, HTTP_X_FORWARDED_FOR="9.9.9.9, 203.0.113.7").get(SESSIONS)
    other = _from(proxy, secret, HTTP_X_FORWARDED_FOR="203.0.113.7, 198.51.100.2").get(SESSIONS)

    assert blocked.status_code == 429
    assert other.status_code == 200


def test_a_proxy_entry_that_is_no_address_counts_as_the_connection(
    clock, five_wrong_keys, settings, tenant, make_key
):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    for _ in range(6):
        _from("203.0.113.7", WRONG, HTTP_X_FORWARDED_FOR="unknown").get(SESSIONS)

    assert _from("203.0.113.7", make_key(tenant)[1]).get(SESSIONS).status_code == 429


def test_the_schema_documents_429(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    assert "429" in schema["paths"]["/api/v1/sessions/"]["get"]["responses"]
