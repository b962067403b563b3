"""Concurrent note writes against the real database (threads, one connection each): every append
lands, versions stay gapless, and no write is lost. Runs on SQLite and PostgreSQL."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from facts_app.models import Note, NoteKind
from memoryhub.accounts.services import api_key_create
from tests.factories import TenantFactory
from tests.helpers import client_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

THREADS = 5
PER_THREAD = 6


def in_threads(count, work):
    def run(index):
        try:
            return work(index)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(run, range(count)))


def test_concurrent_appends_to_one_day_keep_every_line_and_gapless_versions():
    tenant = TenantFactory(slug="busy-notes")
    secret = api_key_create(tenant=tenant, name="t", scopes=["read", "write"])[1]
    url = "/api/v1/users/tui:local/notes/daily/"

    def work(index):
        client = client_for(secret)
        return [
            client.post(url, {"content": f"t{index}-{j}", "day": "2026-02-10"}).status_code
            for j in range(PER_THREAD)
        ]

    statuses = [code for codes in in_threads(THREADS, work) for code in codes]

    assert statuses == [201] * (THREADS * PER_THREAD)
    versions = list(
        Note.objects.filter(tenant=tenant, kind=NoteKind.DAILY)
        .order_by("version")
        .values_list("version", flat=True)
    )
    assert versions == list(range(1, THREADS * PER_THREAD + 1))
    current = Note.objects.filter(tenant=tenant).order_by("-version").first()
    assert sorted(current.content.split("\n")) == sorted(
        f"t{i}-{j}" for i in range(THREADS) for j in range(PER_THREAD)
    )
