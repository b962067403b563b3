"""A real Celery worker (a subprocess, over Redis) summarizes a session once appends push it past
the threshold: the enqueue happens after commit and the worker sees the committed rows."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from memoryhub.accounts.services import api_key_create
from memoryhub.celery import app
from sessions_app.models import Session, Summary
from tests.conftest import client_for
from tests.factories import TenantFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not settings.REDIS_URL, reason="needs REDIS_URL: a real broker for a real worker"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
THRESHOLD = 100
WAIT_SECONDS = 60


def database_url() -> str:
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{database['NAME']}"
    return (
        f"postgres://{database['USER']}@{database['HOST'] or '127.0.0.1'}:"
        f"{database['PORT'] or 5432}/{database['NAME']}"
    )


@pytest.fixture
def worker(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "MEMORYHUB_SUMMARY_THRESHOLD_TOKENS": str(THRESHOLD),
        "MEMORYHUB_SUMMARY_KEEP_RECENT": "10",
        "LLM_BASE_URL": "",
    }
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "memoryhub",
            "worker",
            "--pool=solo",
            "-Q",
            "celery",
            "--loglevel=INFO",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield tmp_path / "worker.log"
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


@pytest.fixture
def enqueue_for_real():
    # Tests run tasks eagerly by default; this one sends them to the broker.
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = False
    yield
    app.conf.task_always_eager = previous


def test_a_real_worker_writes_the_summary(worker, enqueue_for_real, settings):
    settings.SUMMARY_THRESHOLD_TOKENS = THRESHOLD
    settings.SUMMARY_KEEP_RECENT = 10
    tenant = TenantFactory(slug="worker")
    api = client_for(api_key_create(tenant=tenant, name="t", scopes=["read", "write"])[1])
    session_id = api.post("/api/v1/sessions/", {}, format="json").json()["id"]
    batch = {
        "messages": [
            {"role": "user", "content": f"Message {i}: the tomatoes in the garden are ripening."}
            for i in range(30)
        ]
    }
    response = api.post(f"/api/v1/sessions/{session_id}/messages/", batch, format="json")
    assert response.status_code == 201

    deadline = time.monotonic() + WAIT_SECONDS
    summary = None
    while summary is None and time.monotonic() < deadline:
        summary = Summary.objects.filter(session_id=session_id).first()
        if summary is None:
            time.sleep(0.5)

    assert summary is not None, worker.read_text()[-3000:]
    assert (summary.through_seq, summary.model) == (20, "offline")
    assert "Message 0:" in summary.text
    # The worker clears the request once it is done.
    deadline = time.monotonic() + 10
    while Session.objects.get(pk=session_id).summary_requested_at is not None:
        assert time.monotonic() < deadline, worker.read_text()[-3000:]
        time.sleep(0.2)
