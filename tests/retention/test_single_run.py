"""One retention run per beat tick, however many beats send it (a second beat started by
mistake, a scaled-out deployment that ran beat twice): the run beat sends claims its tick in
the shared cache, and a second one in the same tick does nothing. Runs sent by hand are never
held back. (scripts/scaleout_check.py shows the same with two real beat containers.)"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.core.cache import cache
from django.utils import timezone

from memoryhub.accounts.models import AuditEvent
from memoryhub.retention import tasks
from sessions_app.models import Session
from tests.retention.test_retention import DAY, conversation

# What django-celery-beat puts on every message it sends (the schedule entry's name).
BEAT_HEADERS = {"periodic_task_name": "retention-cleanup"}


@pytest.fixture(autouse=True)
def no_claim() -> Iterator[None]:
    cache.delete(tasks.RETENTION_TICK_KEY)
    yield
    cache.delete(tasks.RETENTION_TICK_KEY)


def scheduled_run() -> dict[str, dict[str, int]] | None:
    return tasks.retention_cleanup.apply(headers=BEAT_HEADERS).get()


def old_conversation(tenant, user: str) -> Session:
    return conversation(tenant, user=user, last_active=timezone.now() - 100 * DAY)


def retention_runs(tenant) -> int:
    return AuditEvent.objects.filter(tenant=tenant, object_type="retention").count()


def test_a_second_beats_run_in_the_same_tick_does_nothing(tenant):
    old_conversation(tenant, "a")
    assert scheduled_run() == {tenant.slug: {"messages": 2, "sessions": 1, "state_entries": 1}}
    late = old_conversation(tenant, "b")

    assert scheduled_run() is None

    assert Session.objects.filter(pk=late.pk).exists()
    assert retention_runs(tenant) == 1


def test_a_run_sent_by_hand_is_never_held_back(tenant):
    assert scheduled_run() == {}
    late = old_conversation(tenant, "b")

    assert tasks.retention_cleanup.apply().get() is not None

    assert not Session.objects.filter(pk=late.pk).exists()


def test_the_next_tick_runs_again(tenant, settings):
    settings.CLEANUP_INTERVAL_SECONDS = 1  # the claim lasts max(1 s, 90 % of the interval)
    assert scheduled_run() == {}
    late = old_conversation(tenant, "b")
    assert scheduled_run() is None

    deadline = time.monotonic() + 30
    while scheduled_run() is None:  # the claim runs out after a second
        assert time.monotonic() < deadline, "the tick's claim never expired"
        time.sleep(0.2)

    assert not Session.objects.filter(pk=late.pk).exists()


def test_with_the_cache_down_the_run_goes_ahead(tenant, monkeypatch):
    class DownCache:
        def add(self, *args, **kwargs):
            raise ConnectionError("cache down")

    monkeypatch.setattr(tasks, "cache", DownCache())
    old_conversation(tenant, "a")

    assert scheduled_run() is not None
    assert scheduled_run() is not None  # nothing left to delete, but it ran
