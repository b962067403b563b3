"""What MemoryHub answers while something it needs is down (in-process; tests/test_server.py
has the same with a real gunicorn and a database that is really down).

- The database: the API answers 503 `service_unavailable` with Retry-After wherever the error
  is raised (the key's lookup in authentication, a view); pages a plain 503 page.
- The broker (a Redis nobody listens on, for real): `POST …/summarize/` is a 503 with
  Retry-After, never a 500; appends still work; /readyz says so at once, not after seconds of
  retries.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.db import InterfaceError, OperationalError
from django.test import Client

from memoryhub import health
from memoryhub.accounts import authentication
from memoryhub.celery import app as celery_app
from sessions_app import selectors
from tests.helpers import error_code

DEAD_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def refuse(*args: object, **kwargs: object) -> None:
    raise OperationalError('connection to server at "127.0.0.1", port 5432 failed')


class TestADatabaseOutage:
    def test_the_api_answers_503_with_retry_after_from_authentication(self, api, monkeypatch):
        monkeypatch.setattr(authentication, "api_key_for_secret", refuse)

        response = api.get("/api/v1/sessions/")

        assert response.status_code == 503
        assert response["Retry-After"] == "5"
        assert error_code(response) == "service_unavailable"

    def test_and_from_a_view(self, api, session, monkeypatch, settings):
        settings.MEMORYHUB_RETRY_AFTER_SECONDS = 9

        def connection_lost(**kwargs: object) -> None:
            raise InterfaceError("connection already closed")

        monkeypatch.setattr(selectors, "session_get_for_tenant", connection_lost)

        response = api.get(f"/api/v1/sessions/{session.id}/summary/")

        assert response.status_code == 503
        assert response["Retry-After"] == "9"
        assert error_code(response) == "service_unavailable"

    @pytest.mark.django_db
    def test_a_page_answers_a_plain_503_page(self, monkeypatch):
        # The session is read from the database as the page checks who is logged in.
        monkeypatch.setattr(SessionStore, "load", refuse)
        browser = Client(raise_request_exception=False)
        browser.cookies["sessionid"] = "a-session-to-look-up"

        response = browser.get("/")

        assert response.status_code == 503
        assert response["Retry-After"] == "5"
        assert b"unavailable" in response.content


def drop_broker_pools() -> None:
    # Celery keeps a connection pool and a producer pool bound to the broker they first used
    # (an eager task creates them too): without them, the next publish connects anew.
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@pytest.fixture
def broker_down() -> Iterator[None]:
    """Tasks are published (not run eagerly) to a broker that refuses connections."""
    conf = celery_app.conf
    saved = conf.broker_url, conf.task_always_eager
    conf.broker_url, conf.task_always_eager = DEAD_BROKER, False
    drop_broker_pools()
    yield
    conf.broker_url, conf.task_always_eager = saved
    drop_broker_pools()


class TestTheBrokerDown:
    # Transactional: outside a transaction, as in a request, the enqueue runs at once.
    @pytest.mark.django_db(transaction=True)
    def test_summarize_is_a_503_with_retry_after(self, api, session, broker_down):
        response = api.post(f"/api/v1/sessions/{session.id}/summarize/")

        assert response.status_code == 503
        assert response["Retry-After"] == "5"
        assert error_code(response) == "service_unavailable"
        assert "nothing was queued" in response.json()["error"]["message"]

    @pytest.mark.django_db(transaction=True)
    def test_appends_keep_working(self, api, session, broker_down):
        # Their background work is requested in the database; the enqueue after the response
        # fails (logged) and the beat sweeps take it over once the broker is back.
        response = api.post(
            f"/api/v1/sessions/{session.id}/messages/", {"role": "user", "content": "hello"}
        )

        assert response.status_code == 201
        assert api.get(f"/api/v1/sessions/{session.id}/messages/").json()["last_seq"] == 1

    @pytest.mark.django_db
    def test_readyz_says_so_within_a_second(self, client, broker_down):
        started = time.monotonic()
        response = client.get("/readyz")
        elapsed = time.monotonic() - started

        assert response.status_code == 503
        assert response.json()["checks"] == {"database": True, "broker": False}
        assert elapsed < 1.5  # 2.9 s before: one retry, a 2 s timeout

    @pytest.mark.django_db
    def test_readyz_does_not_wait_for_a_check_that_hangs(self, client, monkeypatch):
        def hangs() -> bool:
            time.sleep(3)
            return True

        monkeypatch.setattr(health, "_database_ok", hangs)
        started = time.monotonic()
        response = client.get("/readyz")

        assert time.monotonic() - started < 2
        assert response.status_code == 503
        assert response.json()["checks"] == {"database": False, "broker": True}
