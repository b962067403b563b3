"""Job visibility: each session's summary, extraction and embedding work, as the API, the
session page and the dashboard show it (tasks run eagerly here; test_jobs_worker.py has a real
worker)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memoryhub.jobs.models import JobKind, JobRun, JobState
from memoryhub.jobs.selectors import IDLE, job_state
from sessions_app.models import Session
from tests.helpers import error_code

pytestmark = pytest.mark.usefixtures("_no_embeddings")


@pytest.fixture
def _no_embeddings(settings):
    # The ONNX embedder would load a model in this process for every append; not what we test.
    settings.EMBEDDINGS_BACKEND = "off"


def jobs_url(session_id) -> str:
    return f"/api/v1/sessions/{session_id}/jobs/"


def states(api, session) -> dict[str, str]:
    response = api.get(jobs_url(session.pk))
    assert response.status_code == 200, response.content
    return {job["kind"]: job["state"] for job in response.json()["jobs"]}


def exchange(api, session, capture, user="I live in Berlin.", assistant="Noted!") -> None:
    with capture(execute=True):
        response = api.post(
            f"/api/v1/sessions/{session.pk}/messages/",
            {
                "messages": [
                    {"role": "user", "content": user},
                    {"role": "assistant", "content": assistant},
                ]
            },
            format="json",
        )
    assert response.status_code == 201, response.content


NOW = timezone.now()


class TestTheStateOfAJob:
    def run(self, state, finished_at=None):
        return JobRun(state=state, finished_at=finished_at)

    def test_it_is_idle_when_never_requested_nor_run(self):
        assert job_state(requested_at=None, run=None) == IDLE

    def test_it_is_requested_while_queued(self):
        assert job_state(requested_at=NOW, run=None) == JobState.REQUESTED

    def test_a_request_newer_than_the_last_run_is_a_new_run_waiting(self):
        earlier = NOW - dt.timedelta(minutes=1)
        assert job_state(requested_at=NOW, run=self.run(JobState.DONE, earlier)) == "requested"

    def test_a_failure_recorded_after_its_request_was_restamped_shows_as_failed(self):
        later = NOW + dt.timedelta(seconds=1)
        assert job_state(requested_at=NOW, run=self.run(JobState.FAILED, later)) == "failed"

    def test_a_running_run_is_running_whatever_the_request(self):
        assert job_state(requested_at=NOW, run=self.run(JobState.RUNNING)) == "running"

    def test_a_finished_run_without_request_keeps_its_outcome(self):
        assert job_state(requested_at=None, run=self.run(JobState.DONE, NOW)) == "done"


class TestTheJobsEndpoint:
    def test_a_new_session_has_every_kind_idle(self, api, session):
        response = api.get(jobs_url(session.pk))

        assert response.status_code == 200
        body = response.json()
        assert body["session_id"] == str(session.pk)
        assert [job["kind"] for job in body["jobs"]] == ["summary", "extraction", "embedding"]
        assert {job["state"] for job in body["jobs"]} == {"idle"}

    def test_an_outsider_gets_404(self, outsider_api, session):
        response = outsider_api.get(jobs_url(session.pk))

        assert response.status_code == 404
        assert error_code(response) == "not_found"

    def test_a_malformed_or_unknown_id_is_404(self, api):
        assert api.get(jobs_url("not-a-uuid")).status_code == 404
        assert api.get(jobs_url("0190a1b2-0000-7000-8000-000000000000")).status_code == 404

    def test_a_read_only_key_may_look(self, read_only_api, session):
        assert read_only_api.get(jobs_url(session.pk)).status_code == 200

    def test_a_pending_request_shows_as_requested(self, api, session):
        Session.objects.filter(pk=session.pk).update(summary_requested_at=timezone.now())

        assert states(api, session)["summary"] == "requested"

    def test_extraction_is_done_after_an_exchange(
        self, api, session, fake_llm, django_capture_on_commit_callbacks
    ):
        fake_llm.reply("User lives in Berlin.")

        exchange(api, session, django_capture_on_commit_callbacks)

        job = {j["kind"]: j for j in api.get(jobs_url(session.pk)).json()["jobs"]}["extraction"]
        assert job["state"] == "done", job
        assert job["result"] == 1
        assert job["attempt"] == 1
        assert job["started_at"]
        assert job["finished_at"]
        assert job["requested_at"] is None

    def test_a_failed_extraction_shows_its_error(
        self, api, session, fake_llm, django_capture_on_commit_callbacks
    ):
        fake_llm.fail(400, message="model not found")

        exchange(api, session, django_capture_on_commit_callbacks)

        job = {j["kind"]: j for j in api.get(jobs_url(session.pk)).json()["jobs"]}["extraction"]
        assert job["state"] == "failed", job
        assert "HTTP 400" in job["error"]
        assert "model not found" in job["error"]
        # The request stays stamped for the sweep's later retry.
        assert job["requested_at"] is not None

    def test_a_summary_is_done_once_written(
        self, api, session, settings, django_capture_on_commit_callbacks
    ):
        settings.LLM_BASE_URL = ""  # offline: the extractive summary
        with django_capture_on_commit_callbacks(execute=True):
            response = api.post(f"/api/v1/sessions/{session.pk}/summarize/")
        assert response.status_code == 202

        run = JobRun.objects.get(session=session, kind=JobKind.SUMMARY)
        assert run.state == JobState.DONE
        assert run.tenant_id == session.tenant_id

    def test_the_rows_go_with_their_session_and_are_not_counted_as_a_kind(
        self, api, session, fake_llm, django_capture_on_commit_callbacks
    ):
        exchange(api, session, django_capture_on_commit_callbacks)
        assert JobRun.objects.filter(session=session).exists()

        response = api.delete(f"/api/v1/sessions/{session.pk}/")

        assert response.status_code in (200, 204)
        assert not JobRun.objects.filter(session_id=session.pk).exists()


class TestThePages:
    def test_the_session_page_shows_each_jobs_state(
        self, editor, session, fake_llm, api, django_capture_on_commit_callbacks
    ):
        fake_llm.fail(400, message="no such model")
        exchange(api, session, django_capture_on_commit_callbacks)

        html = editor.get(f"/sessions/{session.pk}/").content.decode()

        assert 'id="job-table"' in html
        assert 'data-kind="extraction" data-state="failed"' in html
        assert "no such model" in html
        assert 'data-kind="summary" data-state="idle"' in html

    def test_the_dashboard_shows_the_tenants_backlog(
        self,
        editor,
        tenant,
        other_tenant,
        session,
        fake_llm,
        api,
        django_capture_on_commit_callbacks,
    ):
        Session.objects.filter(pk=session.pk).update(summary_requested_at=timezone.now())
        fake_llm.fail(400, message="no such model")
        exchange(api, session, django_capture_on_commit_callbacks)
        foreign, _ = Session.objects.get_or_create(
            tenant=other_tenant, external_key="x", defaults={"last_active_at": timezone.now()}
        )
        Session.objects.filter(pk=foreign.pk).update(summary_requested_at=timezone.now())

        html = editor.get("/").content.decode()

        assert 'id="backlog-table"' in html
        assert '<tr data-kind="summary"><th scope="row">Summaries</th><td>1</td>' in html
        assert (
            '<tr data-kind="extraction"><th scope="row">Fact extraction</th>'
            "<td>1</td><td>0</td><td>1</td>" in html
        )
        assert "no such model" in html
