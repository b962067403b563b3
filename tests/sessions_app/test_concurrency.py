"""Real concurrency against the real database: threads through the API (each thread has its own
connection) and separate processes through the service layer. Runs on SQLite and PostgreSQL."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

from memoryhub.accounts.models import IdempotencyRecord
from memoryhub.accounts.services import api_key_create
from sessions_app.models import Message, Session, StateEntry
from tests.factories import TenantFactory
from tests.helpers import client_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

THREADS = 6
PER_THREAD = 10
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def secret():
    tenant = TenantFactory(slug="busy")
    return api_key_create(tenant=tenant, name="t", scopes=["read", "write"])[1]


@pytest.fixture
def session_id(secret):
    return client_for(secret).post("/api/v1/sessions/", {}, format="json").json()["id"]


def in_threads(count, work):
    def run(index):
        try:
            return work(index)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(run, range(count)))


def test_concurrent_api_appends_get_gapless_seqs_and_one_row_per_201(secret, session_id):
    url = f"/api/v1/sessions/{session_id}/messages/"

    def work(index):
        client = client_for(secret)
        results = []
        for j in range(PER_THREAD):
            response = client.post(url, {"role": "user", "content": f"t{index}-{j}"}, format="json")
            results.append((response.status_code, response.json().get("seq")))
        return results

    results = [item for batch in in_threads(THREADS, work) for item in batch]

    total = THREADS * PER_THREAD
    assert [code for code, _ in results] == [201] * total
    assert sorted(seq for _, seq in results) == list(range(1, total + 1))
    rows = list(Message.objects.filter(session_id=session_id).values_list("seq", "content"))
    assert sorted(seq for seq, _ in rows) == list(range(1, total + 1))
    assert len({content for _, content in rows}) == total
    session = Session.objects.get(pk=session_id)
    assert (session.last_seq, session.message_count) == (total, total)


def test_concurrent_batches_stay_contiguous(secret, session_id):
    url = f"/api/v1/sessions/{session_id}/messages/"

    def work(index):
        batch = {"messages": [{"role": "user", "content": f"{index}:{j}"} for j in range(5)]}
        return client_for(secret).post(url, batch, format="json").json()["messages"]

    batches = in_threads(THREADS, work)

    for batch in batches:
        seqs = [row["seq"] for row in batch]
        assert seqs == list(range(seqs[0], seqs[0] + 5))
    assert sorted(row["seq"] for batch in batches for row in batch) == list(
        range(1, THREADS * 5 + 1)
    )


def test_concurrent_appends_from_separate_processes_get_gapless_seqs(session_id):
    session = Session.objects.get(pk=session_id)
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        url = f"sqlite:///{database['NAME']}"
    else:
        url = (
            f"postgres://{database['USER']}@{database['HOST'] or '127.0.0.1'}:"
            f"{database['PORT'] or 5432}/{database['NAME']}"
        )
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "memoryhub.settings"}
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.sessions_app.append_worker",
                str(session.tenant_id),
                session_id,
                "15",
                f"p{i}",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        outputs.append(json.loads(out.strip().splitlines()[-1]))

    seqs = sorted(seq for output in outputs for seq in output)
    assert seqs == list(range(1, 46))
    assert Message.objects.filter(session_id=session_id).count() == 45
    assert Session.objects.get(pk=session_id).last_seq == 45


def test_concurrent_retries_with_one_idempotency_key_write_once(secret, session_id):
    url = f"/api/v1/sessions/{session_id}/messages/"
    payload = {"role": "user", "content": "charge the card once"}

    def work(index):
        response = client_for(secret).post(
            url, payload, format="json", HTTP_IDEMPOTENCY_KEY="retry-me"
        )
        return response.status_code, response.json()

    results = in_threads(THREADS, work)

    assert {code for code, _ in results} == {201}
    assert len({json.dumps(body, sort_keys=True) for _, body in results}) == 1
    assert Message.objects.filter(session_id=session_id).count() == 1
    assert IdempotencyRecord.objects.count() == 1


def test_concurrent_get_or_create_by_external_key_makes_one_session(secret):
    def work(index):
        response = client_for(secret).post(
            "/api/v1/sessions/", {"user_id": "u", "external_key": "tg:42:main"}, format="json"
        )
        return response.status_code, response.json()["id"]

    results = in_threads(THREADS, work)

    assert len({session_id for _, session_id in results}) == 1
    assert sorted(code for code, _ in results) == [200] * (THREADS - 1) + [201]
    assert Session.objects.count() == 1


def test_concurrent_state_writes_respect_the_cap(secret, session_id, settings):
    settings.MEMORYHUB_LIMITS = {**settings.MEMORYHUB_LIMITS, "STATE_CAP": 4}

    def work(index):
        client = client_for(secret)
        return [
            client.put(
                f"/api/v1/sessions/{session_id}/state/k{index}-{j}/", {"value": j}, format="json"
            ).status_code
            for j in range(3)
        ]

    codes = [code for batch in in_threads(THREADS, work) for code in batch]

    assert set(codes) == {201}
    assert StateEntry.objects.filter(session_id=session_id).count() == 4
