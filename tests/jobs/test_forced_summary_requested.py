"""A summary forced with POST …/summarize/ marks no request column on the session: the job row
says it is requested from the moment the broker takes the task (Celery's after_task_publish, in
the process that enqueued it), not "idle" until a worker starts it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from memoryhub.celery import app
from memoryhub.jobs import signals
from memoryhub.jobs.models import JobKind, JobRun, JobState
from tests.jobs.test_session_jobs import jobs_url, states


@pytest.fixture
def force(api, django_capture_on_commit_callbacks):
    """POST …/summarize/ as a request does it: the enqueue runs once the transaction commits."""

    def post(session):
        with django_capture_on_commit_callbacks(execute=True):
            return api.post(f"/api/v1/sessions/{session.pk}/summarize/")

    return post


@pytest.fixture
def queue_emptied(enqueue_for_real: None) -> Iterator[None]:
    # What these tests enqueue is never run: take it off the broker again.
    yield
    app.control.purge()


@pytest.mark.django_db
class TestAForcedSummary:
    def test_shows_requested_until_a_worker_starts_it(self, api, session, force, queue_emptied):
        assert states(api, session)["summary"] == "idle"

        response = force(session)

        assert response.status_code == 202, response.content
        job = {j["kind"]: j for j in api.get(jobs_url(session.pk)).json()["jobs"]}["summary"]
        assert job["state"] == "requested", job
        assert job["requested_at"] is not None
        run = JobRun.objects.get(session=session, kind=JobKind.SUMMARY)
        assert run.task_id == response.json()["task_id"]
        # The others are untouched.
        assert states(api, session)["extraction"] == "idle"

    def test_a_run_in_progress_keeps_showing_as_running(self, api, session, force, queue_emptied):
        JobRun.objects.create(
            tenant=session.tenant, session=session, kind=JobKind.SUMMARY, state=JobState.RUNNING
        )

        response = force(session)

        assert response.status_code == 202
        assert states(api, session)["summary"] == "running"

    def test_after_a_finished_run_it_is_requested_again(self, api, session, force, queue_emptied):
        JobRun.objects.create(
            tenant=session.tenant,
            session=session,
            kind=JobKind.SUMMARY,
            state=JobState.FAILED,
            error="LLMPermanentError: boom",
        )

        force(session)

        job = {j["kind"]: j for j in api.get(jobs_url(session.pk)).json()["jobs"]}["summary"]
        assert job["state"] == "requested"
        assert job["error"] == ""

    def test_another_tenants_session_is_404_and_marks_nothing(
        self, outsider_api, session, queue_emptied, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True):
            response = outsider_api.post(f"/api/v1/sessions/{session.pk}/summarize/")

        assert response.status_code == 404
        assert not JobRun.objects.filter(session=session).exists()


@pytest.mark.django_db
def test_only_a_forced_summary_is_marked_on_publish(session):
    """The append path's own summaries, and every other task, are requested through the
    session's columns: their publish writes nothing (no write added to the enqueuing path)."""
    for name, kwargs in (
        ("sessions_app.tasks.summarize_session", {}),
        ("sessions_app.tasks.summarize_session", {"force": False}),
        ("sessions_app.tasks.extract_session_facts", {"force": True}),
    ):
        signals.on_after_task_publish(
            sender=name,
            headers={"task": name, "id": str(uuid.uuid4())},
            body=((str(session.pk),), kwargs, {}),
        )
    assert not JobRun.objects.exists()

    signals.on_after_task_publish(
        sender="sessions_app.tasks.summarize_session",
        headers={"id": "t-1"},
        body=((str(session.pk),), {"force": True}, {}),
    )
    assert JobRun.objects.get().state == JobState.REQUESTED
