"""Request ids and structured logs: the header, the access line, and the id carried into the
tasks a request enqueues."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from memoryhub.core import observability
from memoryhub.core.observability import (
    TASK_REQUEST_ID_HEADER,
    LogContextFilter,
    json_formatter,
    request_id_from,
)


@pytest.fixture
def access_lines():
    """The access log's records, formatted as the JSON handler would write them."""
    lines: list[dict] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(self.format(record)))

    handler = Collect()
    handler.setFormatter(json_formatter())
    handler.addFilter(LogContextFilter())
    request_logger = logging.getLogger("memoryhub.request")
    request_logger.addHandler(handler)
    try:
        yield lines
    finally:
        request_logger.removeHandler(handler)


class TestTheRequestId:
    def test_a_sane_incoming_id_is_kept(self, api, session):
        response = api.get(f"/api/v1/sessions/{session.pk}/", HTTP_X_REQUEST_ID="lb-1234.abc")

        assert response["X-Request-ID"] == "lb-1234.abc"

    @pytest.mark.parametrize("incoming", ["", "has space", "x" * 200, "<script>", "é"])
    def test_anything_else_is_replaced_by_a_new_one(self, incoming):
        made = request_id_from(incoming)

        assert made != incoming
        assert len(made) == 32

    def test_every_answer_has_one_even_a_404(self, client, db):
        first = client.get("/no/such/page/")
        second = client.get("/healthz")

        assert first.status_code == 404
        assert len(first["X-Request-ID"]) == 32
        assert second["X-Request-ID"] != first["X-Request-ID"]


class TestTheAccessLine:
    def test_it_has_the_request_id_tenant_route_status_and_duration(
        self, api, session, access_lines
    ):
        api.get(
            f"/api/v1/sessions/{session.pk}/messages/",
            {"q": "secret words"},
            HTTP_X_REQUEST_ID="req-42",
        )

        line = access_lines[-1]
        assert line["request_id"] == "req-42"
        assert line["tenant"] == "acme"
        assert line["route"] == "/api/v1/sessions/<str:session_id>/messages/"
        assert line["status"] == 200
        assert line["method"] == "GET"
        assert line["duration_ms"] >= 0
        assert line["db_queries"] >= 1
        assert line["level"] == "INFO"
        assert line["logger"] == "memoryhub.request"
        # The path, never the query string: queries carry people's words.
        assert "secret" not in json.dumps(line)

    def test_a_page_names_its_tenant_and_an_anonymous_probe_none(
        self, editor, client, db, access_lines
    ):
        editor.get("/")
        page = access_lines[-1]
        client.get("/healthz")
        probe = access_lines[-1]

        assert (page["tenant"], page["route"]) == ("acme", "/")
        assert (probe["tenant"], probe["route"]) == ("", "/healthz")

    def test_an_unresolved_path_is_one_bounded_route(self, client, db, access_lines):
        client.get("/wp-admin/setup.php")

        assert access_lines[-1]["route"] == "<unmatched>"
        assert access_lines[-1]["status"] == 404

    def test_a_refused_request_is_its_access_line_only(self, api, db, access_lines, caplog):
        # Django's own "Not Found: /…" WARNING per 4xx repeated the access line (a flood of
        # hostile requests logged twice); its ERROR for a 5xx, with the traceback, stays.
        with caplog.at_level(logging.INFO):
            response = api.get("/api/v1/sessions/00000000-0000-0000-0000-000000000000/")

        assert response.status_code == 404
        assert access_lines[-1]["status"] == 404
        assert [r for r in caplog.records if r.name == "django.request"] == []
        assert logging.getLogger("django.request").isEnabledFor(logging.ERROR)


class TestTasksCarryTheRequestId:
    def test_the_id_goes_into_the_message_and_into_the_tasks_log_records(self):
        observability._log_context.set({"request_id": "req-7"})
        headers: dict = {}
        observability.task_publishing(headers=headers)
        assert headers == {TASK_REQUEST_ID_HEADER: "req-7"}

        observability._log_context.set({})
        task = SimpleNamespace(
            name="sessions_app.tasks.summarize_session", request=SimpleNamespace(**headers)
        )
        observability.task_starting(task_id="t-1", task=task)
        record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
        LogContextFilter().filter(record)
        observability.task_ended(task_id="t-1", task=task, state="SUCCESS")

        assert (record.request_id, record.task_id, record.task_name) == (
            "req-7",
            "t-1",
            "sessions_app.tasks.summarize_session",
        )
        assert observability.log_context() == {}
