"""Work deferred to after the response: kept during a request, run when it finishes, run at once
outside a request, and a failure there is logged, not raised. (The signal handlers are called
directly: sending Django's request signals would also close the test's database connection.)"""

from __future__ import annotations

import logging

from memoryhub.core.after_response import after_response, request_finished, request_started


def test_inside_a_request_it_waits_for_the_response_to_finish():
    done: list[str] = []
    request_started()
    try:
        after_response(lambda: done.append("enqueued"))
        assert done == []
    finally:
        request_finished()
    assert done == ["enqueued"]


def test_outside_a_request_it_runs_at_once():
    done: list[str] = []

    after_response(lambda: done.append("now"))

    assert done == ["now"]


def test_a_failure_after_the_response_is_logged_and_the_rest_still_runs(caplog):
    done: list[str] = []

    def broken() -> None:
        raise ConnectionError("broker down")

    request_started()
    after_response(broken)
    after_response(lambda: done.append("second"))
    with caplog.at_level(logging.ERROR):
        request_finished()

    assert done == ["second"]
    assert "work after the response failed" in caplog.text
