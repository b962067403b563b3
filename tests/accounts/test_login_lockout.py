"""Issue 14 item 15: repeated wrong passwords on the web UI's and the admin's log-in lock that
username out from that address (django-axes), with a page that says to wait."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.test import Client

from memoryhub.accounts.models import User

PASSWORD = "pw-for-tests-only"
START = dt.datetime(2031, 3, 4, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def staff(db) -> User:
    return User.objects.create_user(username="ana", password=PASSWORD, is_staff=True)


@pytest.fixture
def limit_three(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = dt.timedelta(minutes=15)


@pytest.fixture
def clock():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


def _log_in(client: Client, url: str, password: str, username: str = "ana"):
    return client.post(url, {"username": username, "password": password})


def _from(address: str) -> Client:
    return Client(REMOTE_ADDR=address)


@pytest.mark.parametrize("url", ["/login/", "/admin/login/"])
def test_wrong_passwords_lock_the_username_out_from_that_address(url, staff, limit_three, clock):
    client = _from("203.0.113.7")
    wrong = [_log_in(client, url, "nope").status_code for _ in range(2)]
    locking = _log_in(client, url, "nope")
    right_password = _log_in(client, url, PASSWORD)

    assert wrong == [200, 200]  # the form again, with its error
    assert locking.status_code == 429
    assert right_password.status_code == 429
    assert b"Too many failed log-ins" in right_password.content
    assert b"Wait 15 minutes" in right_password.content
    assert "_auth_user_id" not in client.session


def test_the_lockout_keeps_other_addresses_and_usernames_out_of_it(staff, limit_three, clock):
    User.objects.create_user(username="bo", password=PASSWORD, is_staff=True)
    for _ in range(3):
        _log_in(_from("203.0.113.7"), "/login/", "nope")

    elsewhere = _log_in(_from("198.51.100.2"), "/login/", PASSWORD)
    another_user = _log_in(_from("203.0.113.7"), "/login/", PASSWORD, username="bo")

    assert elsewhere.status_code == 302
    assert another_user.status_code == 302


def test_the_web_and_admin_log_ins_count_together(staff, limit_three, clock):
    client = _from("203.0.113.7")
    _log_in(client, "/login/", "nope")
    _log_in(client, "/admin/login/", "nope")
    _log_in(client, "/login/", "nope")

    assert _log_in(client, "/admin/login/", PASSWORD).status_code == 429


def test_behind_a_proxy_the_lockout_takes_the_address_it_saw(staff, limit_three, clock, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    proxy = _from("10.0.0.1")
    wrong = {"username": "ana", "password": "nope"}
    right = {"username": "ana", "password": PASSWORD}
    for written_by_client in ("1.1.1.1", "2.2.2.2", "3.3.3.3"):
        hops = f"{written_by_client}, 203.0.113.7"
        proxy.post("/login/", wrong, HTTP_X_FORWARDED_FOR=hops)
    # An entry that is no address stands for the connection's own (and is no error).
    garbage = proxy.post("/login/", wrong, HTTP_X_FORWARDED_FOR="not-an-address")

    locked = proxy.post("/login/", right, HTTP_X_FORWARDED_FOR="203.0.113.7")
    other = proxy.post("/login/", right, HTTP_X_FORWARDED_FOR="198.51.100.2")

    assert garbage.status_code == 200
    assert locked.status_code == 429
    assert other.status_code == 302


def test_the_lockout_ends_after_the_cool_off(staff, limit_three, clock):
    client = _from("203.0.113.7")
    for _ in range(3):
        _log_in(client, "/login/", "nope")

    clock.shift(dt.timedelta(minutes=15, seconds=1))

    assert _log_in(client, "/login/", PASSWORD).status_code == 302


def test_a_success_before_the_limit_starts_the_count_again(staff, limit_three, clock):
    client = _from("203.0.113.7")
    for _ in range(2):
        _log_in(client, "/login/", "nope")
    assert _log_in(client, "/login/", PASSWORD).status_code == 302
    client.logout()

    assert [_log_in(client, "/login/", "nope").status_code for _ in range(2)] == [200, 200]
    assert _log_in(client, "/login/", PASSWORD).status_code == 302
