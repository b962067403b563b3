"""Beat's schedule is defined in code and kept by django-celery-beat in the database, where staff
see and pause it in the admin; a pause survives beat restarting."""

from __future__ import annotations

import pytest
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from memoryhub.celery import app

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _keep_the_test_connection(monkeypatch):
    # The scheduler drops stale connections between ticks, as a long-running beat should; in a
    # test that would close the connection holding the test's transaction.
    monkeypatch.setattr("django_celery_beat.schedulers.close_old_connections", lambda: None)


def start_beat_scheduler() -> DatabaseScheduler:
    # What `celery beat -S django_celery_beat.schedulers:DatabaseScheduler` does at start-up.
    return DatabaseScheduler(app=app)


def test_the_schedule_in_code_is_written_to_the_database(settings):
    assert app.conf.beat_scheduler == settings.CELERY_BEAT_SCHEDULER

    scheduler = start_beat_scheduler()

    tasks = {task.name: task for task in PeriodicTask.objects.all()}
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        stored = tasks[name]
        assert stored.task == entry["task"]
        assert stored.interval.every == entry["schedule"]
        assert stored.expire_seconds == entry["options"]["expire_seconds"] < entry["schedule"]
        assert stored.enabled
        assert name in scheduler.schedule
    assert tasks["retention-cleanup"].interval.every == 3600


def test_a_pause_made_in_the_admin_survives_a_restart(admin_client):
    start_beat_scheduler()
    task = PeriodicTask.objects.get(name="retention-cleanup")

    response = admin_client.post(
        "/admin/django_celery_beat/periodictask/",
        {"action": "disable_tasks", "_selected_action": [task.pk]},
    )
    assert response.status_code == 302

    scheduler = start_beat_scheduler()

    assert not PeriodicTask.objects.get(name="retention-cleanup").enabled
    assert "retention-cleanup" not in scheduler.schedule
    assert "summaries-sweep" in scheduler.schedule
