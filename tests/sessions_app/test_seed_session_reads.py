"""Seed 000's session reads (working memory "" when unset, the storage listing of list_files)
and seed 004's empty summary (`GET …/summary/?empty=ok`)."""

from __future__ import annotations

import pytest

from memoryhub.accounts.models import MemoryPolicy
from sessions_app.services import MessageInput, message_append_batch, state_set
from sessions_app.summaries import summary_set
from sessions_app.task_services import plan_create
from tests.helpers import error_code, error_fields


def url(session, tail: str) -> str:
    return f"/api/v1/sessions/{session.id}/{tail}"


class TestWorkingMemory:
    def test_unset_is_an_empty_string_not_a_404(self, api, session):
        response = api.get(url(session, "working-memory/"))

        assert response.status_code == 200
        assert response.json() == {
            "key": "working_memory",
            "value": "",
            "is_set": False,
            "updated_at": None,
        }

    def test_set_through_the_state_api_it_reads_back(self, api, session):
        api.put(url(session, "state/working_memory/"), {"value": "goal: book"}, format="json")

        body = api.get(url(session, "working-memory/")).json()

        assert (body["value"], body["is_set"]) == ("goal: book", True)
        assert body["updated_at"] is not None

    def test_an_outsider_gets_404(self, outsider_api, session):
        response = outsider_api.get(url(session, "working-memory/"))

        assert response.status_code == 404
        assert error_code(response) == "not_found"


class TestStorage:
    def test_every_kind_with_counts_sizes_and_last_change(self, api, tenant, session):
        message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content="héllo"),  # 6 bytes
                MessageInput(role="assistant", content="hi"),
            ],
        )
        state_set(tenant=tenant, session_id=session.pk, key="k", value="v")
        summary_set(tenant=tenant, session_id=session.pk, text="abc")
        MemoryPolicy.objects.create(tenant=tenant, transcript_max_messages=500)

        response = api.get(url(session, "storage/"))

        assert response.status_code == 200
        kinds = {item["kind"]: item for item in response.json()["results"]}
        assert list(kinds) == ["messages", "state", "summaries", "plans", "task_contexts"]
        messages = kinds["messages"]
        assert (messages["count"], messages["bytes"], messages["cap"]) == (2, 8, 500)
        assert messages["tokens"] > 0
        assert messages["last_changed_at"]
        assert (kinds["state"]["count"], kinds["state"]["bytes"], kinds["state"]["cap"]) == (
            1,
            3,  # "v" as JSON
            200,
        )
        assert (kinds["summaries"]["count"], kinds["summaries"]["bytes"]) == (1, 3)
        assert kinds["plans"] == {
            "kind": "plans",
            "count": 0,
            "bytes": 0,
            "last_changed_at": None,
            "cap": None,
        }

    def test_the_query_count_does_not_grow(
        self, api, tenant, session, django_assert_max_num_queries
    ):
        def fill(n: int) -> None:
            message_append_batch(
                tenant=tenant,
                session_id=session.pk,
                messages=[MessageInput(role="user", content=f"m{i}") for i in range(n)],
            )
            for i in range(n):
                state_set(tenant=tenant, session_id=session.pk, key=f"k{n}-{i}", value=i)

        fill(1)
        with django_assert_max_num_queries(9) as small:
            api.get(url(session, "storage/"))
        fill(30)
        plan_create(
            tenant=tenant,
            plan_id="p1",
            user_id=None,
            session_id=session.pk,
            goal_event="g",
        )
        with django_assert_max_num_queries(len(small.captured_queries)):
            assert api.get(url(session, "storage/")).json()["results"][3]["count"] == 1

    def test_an_outsider_gets_404(self, outsider_api, session):
        assert outsider_api.get(url(session, "storage/")).status_code == 404


class TestEmptySummary:
    def test_without_a_summary_it_is_still_404(self, api, session):
        assert api.get(url(session, "summary/")).status_code == 404

    def test_empty_ok_answers_an_empty_summary(self, api, session):
        response = api.get(url(session, "summary/?empty=ok"))

        assert response.status_code == 200
        assert response.json() == {
            "text": "",
            "through_seq": 0,
            "token_count": 0,
            "model": "",
            "created_at": None,
        }

    def test_empty_ok_with_a_summary_answers_it(self, api, tenant, session):
        summary_set(tenant=tenant, session_id=session.pk, text="So far.")

        assert api.get(url(session, "summary/?empty=ok")).json()["text"] == "So far."

    def test_another_value_is_a_400(self, api, session):
        response = api.get(url(session, "summary/?empty=yes"))

        assert response.status_code == 400
        assert "empty" in error_fields(response)

    def test_an_outsider_gets_404_even_with_empty_ok(self, outsider_api, session):
        assert outsider_api.get(url(session, "summary/?empty=ok")).status_code == 404


class TestSummarizationSwitch:
    @pytest.fixture
    def off(self, tenant):
        return MemoryPolicy.objects.create(
            tenant=tenant, agent_id="chat", enable_summarization=False
        )

    def test_forcing_a_summary_is_refused_when_off(self, api, session, off):
        response = api.post(url(session, "summarize/"))

        assert response.status_code == 409
        assert error_code(response) == "summarization_off"
