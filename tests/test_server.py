"""The production server configuration (gunicorn.conf.py), tried for real: gunicorn with it, on
the test database (or on a database that is down), reached over sockets.

- Slow uploads hold threads, not processes: with 2 workers x 4 threads, six clients trickling
  their bodies leave room for fast requests, which all answer while the uploads still send.
- An API URL past MEMORYHUB_MAX_URL_LENGTH gets MemoryHub's JSON 414; one past gunicorn's own
  request-line maximum (8190 bytes) gets gunicorn's plain 414 (documented in the README).
- Workers that `max_requests` replaces (forks of the preloaded master) keep every append: with
  a replacement every five requests, 30 appends all land, in order.
- With the database down, the API answers 503 `service_unavailable` with Retry-After (the key's
  lookup in authentication is where it fails first), pages a plain 503 page, /readyz a 503.

No test asserts how long anything took, beyond bounds generous enough for a busy machine.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryhub.accounts.services import api_key_create
from sessions_app.models import Session
from tests.factories import TenantFactory
from tests.live_gunicorn import Gunicorn

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WORKERS, THREADS = 2, 4
SLOW_UPLOADS = 6  # fewer than the 8 threads: two stay free for everyone else
SLOW_SECONDS = 10


@pytest.fixture
def secret() -> str:
    tenant = TenantFactory(slug="acme")
    return api_key_create(tenant=tenant, name="server test", scopes=["read", "write"])[1]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Gunicorn]:
    running = Gunicorn(
        log_path=tmp_path / "gunicorn.log",
        env={"GUNICORN_WORKERS": str(WORKERS), "GUNICORN_THREADS": str(THREADS)},
    ).start()
    yield running
    running.stop()


class SlowUpload(threading.Thread):
    """`POST /api/v1/sessions/` on a raw socket: the headers at once, then the JSON body a byte
    at a time over `seconds`."""

    def __init__(self, *, port: int, secret: str, number: int, seconds: float) -> None:
        super().__init__(name=f"slow-upload-{number}", daemon=True)
        self.port, self.seconds = port, seconds
        body = json.dumps({"user_id": f"slow-{number}", "agent_id": "chat"})
        self.body = body.ljust(64).encode()
        self.head = (
            "POST /api/v1/sessions/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {secret}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(self.body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        self.sending = threading.Event()
        self.finished_sending_at = float("inf")
        self.status_line = b""

    def run(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as sock:
            sock.sendall(self.head)
            self.sending.set()
            for index in range(len(self.body)):
                sock.sendall(self.body[index : index + 1])
                time.sleep(self.seconds / len(self.body))
            self.finished_sending_at = time.monotonic()
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        self.status_line = answer.split(b"\r\n", 1)[0]


def test_slow_uploads_do_not_stall_fast_requests(server: Gunicorn, secret: str) -> None:
    uploads = [
        SlowUpload(port=server.port, secret=secret, number=number, seconds=SLOW_SECONDS)
        for number in range(SLOW_UPLOADS)
    ]
    for upload in uploads:
        upload.start()
    for upload in uploads:
        assert upload.sending.wait(timeout=30)
    time.sleep(1)  # let the server take them all in (each then holds a thread)

    answered: list[tuple[str, int, float]] = []
    for _ in range(6):
        for path, headers in (
            ("/healthz", {}),
            ("/api/v1/sessions/?limit=1", {"Authorization": f"Bearer {secret}"}),
        ):
            # Each must answer within the uploads' own duration; with sync workers they wait
            # for the uploads to end (then longer than that).
            response = server.request("GET", path, headers=headers, timeout=SLOW_SECONDS)
            answered.append((path, response.status, time.monotonic()))
        time.sleep(0.5)
    for upload in uploads:
        upload.join(timeout=SLOW_SECONDS * 3)

    assert [status for _, status, _ in answered] == [200] * len(answered), answered
    still_sending_until = min(upload.finished_sending_at for upload in uploads)
    assert all(at < still_sending_until for _, _, at in answered), server.log_tail()
    assert [upload.status_line for upload in uploads] == [b"HTTP/1.1 201 Created"] * SLOW_UPLOADS
    assert Session.objects.filter(end_user__external_id__startswith="slow-").count() == 6


def test_workers_that_max_requests_replaces_keep_every_append(tmp_path: Path, secret: str) -> None:
    # Every fifth request replaces the worker that served it (jitter 5 // 10 = 0): the
    # replacements are forks of the preloaded master, each with its own database connection.
    running = Gunicorn(
        log_path=tmp_path / "gunicorn.log",
        env={"GUNICORN_WORKERS": "2", "GUNICORN_THREADS": "2", "GUNICORN_MAX_REQUESTS": "5"},
    ).start()
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    try:
        created = running.request(
            "POST",
            "/api/v1/sessions/",
            headers=headers,
            body=json.dumps({"user_id": "restarts", "agent_id": "chat"}).encode(),
        )
        assert created.status == 201, running.log_tail()
        session_id = json.loads(created.data)["id"]  # type: ignore[attr-defined]
        statuses = [
            running.request(
                "POST",
                f"/api/v1/sessions/{session_id}/messages/",
                headers=headers,
                body=json.dumps({"role": "user", "content": f"turn {number}"}).encode(),
            ).status
            for number in range(30)
        ]
        booted = set(re.findall(r"Booting worker with pid: (\d+)", running.log_tail(100_000)))
    finally:
        running.stop()

    assert statuses == [201] * 30
    # The first two, then about one for every five requests (the last may still be booting).
    assert len(booted) >= 2 + 4, booted
    session = Session.objects.get(pk=session_id)
    assert list(session.messages.order_by("seq").values_list("seq", "content")) == [
        (number + 1, f"turn {number}") for number in range(30)
    ]
    assert session.message_count == 30


def test_an_api_url_past_memoryhubs_limit_is_a_json_414(server: Gunicorn, secret: str) -> None:
    # 5000 characters: past MEMORYHUB_MAX_URL_LENGTH (4096), within gunicorn's 8190 bytes.
    path = "/api/v1/sessions/?user_id=" + "x" * (5000 - len("/api/v1/sessions/?user_id="))

    response = server.request("GET", path, headers={"Authorization": f"Bearer {secret}"})

    assert response.status == 414
    assert response.getheader("Content-Type") == "application/json"
    assert json.loads(response.data)["error"]["code"] == "uri_too_long"  # type: ignore[attr-defined]


def test_a_request_line_past_gunicorns_maximum_gets_gunicorns_own_414(server: Gunicorn) -> None:
    # Documented behaviour (README, "Running it in production"): gunicorn answers before
    # Django, in its own words; a proxy in front answers first with its own limit.
    response = server.request("GET", "/api/v1/sessions/?q=" + "x" * 9000)

    assert response.status == 414
    assert response.getheader("Content-Type") != "application/json"


def test_with_the_database_down_the_api_answers_503_with_retry_after(tmp_path: Path) -> None:
    # Nothing listens on port 1: a real refused connection on every query.
    down = Gunicorn(
        log_path=tmp_path / "gunicorn.log",
        env={
            "DATABASE_URL": "postgres://memoryhub@127.0.0.1:1/memoryhub",
            "GUNICORN_WORKERS": "1",
            "GUNICORN_THREADS": "2",
            "MEMORYHUB_RETRY_AFTER_SECONDS": "7",
        },
    ).start()
    try:
        # Well-formed, so that authentication looks it up (a malformed key is a 401 first).
        key = {"Authorization": "Bearer mh_abcdefgh.a-secret-the-database-would-check"}
        listing = down.request("GET", "/api/v1/sessions/", headers=key)
        writing = down.request(
            "POST",
            "/api/v1/sessions/",
            headers={**key, "Content-Type": "application/json"},
            body=b'{"user_id": "someone"}',
        )
        page = down.request("GET", "/", headers={"Cookie": "sessionid=a-session-to-look-up"})
        ready = down.request("GET", "/readyz")
    finally:
        down.stop()

    for response in (listing, writing):
        assert response.status == 503, down.log_tail()
        assert response.getheader("Retry-After") == "7"
        body = json.loads(response.data)  # type: ignore[attr-defined]
        assert body["error"]["code"] == "service_unavailable"
    assert page.status == 503
    assert page.getheader("Retry-After") == "7"
    assert b"unavailable" in page.data  # type: ignore[attr-defined]
    assert ready.status == 503
    assert json.loads(ready.data)["checks"]["database"] is False  # type: ignore[attr-defined]
