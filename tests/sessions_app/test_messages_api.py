import datetime as dt
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryhub.accounts.models import IdempotencyRecord
from sessions_app.models import Message, Session
from tests.factories import MessageFactory
from tests.helpers import error_code, error_fields


def messages_url(session) -> str:
    return f"/api/v1/sessions/{session.id}/messages/"


def append(api, session, payload, **extra):
    return api.post(messages_url(session), payload, format="json", **extra)


class TestAppend:
    def test_it_appends_one_message_with_seq_and_token_count(self, api, session):
        response = append(api, session, {"role": "user", "content": "Hello, tell me about memory."})

        assert response.status_code == 201
        body = response.json()
        assert body["seq"] == 1
        assert body["role"] == "user"
        assert body["session_id"] == str(session.id)
        assert body["token_count"] == 7  # o200k_base, counted offline
        session.refresh_from_db()
        assert (session.message_count, session.last_seq, session.token_count) == (1, 1, 7)

    def test_it_appends_a_batch_in_order(self, api, session):
        batch = {
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Weather?", "name": "sachi"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "wx", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
                {"role": "assistant", "content": "Sunny."},
            ]
        }

        response = append(api, session, batch)

        assert response.status_code == 201
        rows = response.json()["messages"]
        assert [row["seq"] for row in rows] == [1, 2, 3, 4, 5]
        assert rows[1]["name"] == "sachi"
        assert rows[2]["tool_calls"][0]["function"]["name"] == "wx"
        assert rows[3]["tool_call_id"] == "call_1"

    def test_it_continues_the_seq_after_earlier_appends(self, api, session):
        append(api, session, {"role": "user", "content": "one"})
        append(api, session, {"messages": [{"role": "user", "content": "two"}] * 3})

        response = append(api, session, {"role": "user", "content": "five"})

        assert response.json()["seq"] == 5
        assert list(Message.objects.filter(session=session).values_list("seq", flat=True)) == [
            1,
            2,
            3,
            4,
            5,
        ]

    def test_it_keeps_whitespace_and_unicode_exactly(self, api, session):
        content = "  indented\n\ttabbed — ünïcödé 🎉  "

        response = append(api, session, {"role": "user", "content": content})

        assert response.json()["content"] == content
        assert Message.objects.get(session=session).content == content

    def test_it_touches_the_session(self, api, session):
        before = session.last_active_at

        append(api, session, {"role": "user", "content": "hi"})

        session.refresh_from_db()
        assert session.last_active_at > before


class TestBadInput:
    @pytest.mark.parametrize(
        ("payload", "field", "code"),
        [
            ({"content": "no role"}, "role", "required"),
            ({"role": "wizard", "content": "x"}, "role", "invalid_choice"),
            ({"role": "user", "content": ""}, "content", "blank"),
            ({"role": "user"}, "content", "blank"),
            ({"role": "user", "content": 42}, "content", "invalid"),
            ({"role": "user", "content": "a\x00b"}, "content", "null_characters_not_allowed"),
            ({"role": "user", "content": "x", "metadata": [1]}, "metadata", "not_a_dict"),
            (
                {"role": "user", "content": "x", "metadata": {"k": "v" * 17_000}},
                "metadata",
                "too_large",
            ),
            ({"role": "tool", "content": "result"}, "tool_call_id", "required"),
            (
                {"role": "user", "content": "x", "tool_calls": [{"id": "c", "function": {}}]},
                "tool_calls",
                "invalid",
            ),
        ],
    )
    def test_it_explains_each_bad_field_and_writes_nothing(
        self, api, session, payload, field, code
    ):
        response = append(api, session, payload)

        assert response.status_code == 400
        assert error_code(response) == "validation_error"
        assert error_fields(response)[field][0]["code"] == code
        assert not Message.objects.exists()

    def test_it_refuses_oversized_content(self, api, session, limits):
        limits["MESSAGE_CONTENT_MAX_BYTES"] = 10

        ok = append(api, session, {"role": "user", "content": "é" * 5})  # 10 bytes
        too_big = append(api, session, {"role": "user", "content": "é" * 6})  # 12 bytes

        assert ok.status_code == 201
        assert too_big.status_code == 400
        assert error_fields(too_big)["content"][0]["code"] == "too_large"

    def test_the_default_content_limit_is_64_kib(self, api, session):
        response = append(api, session, {"role": "user", "content": "x" * (64 * 1024 + 1)})

        assert response.status_code == 400
        assert error_fields(response)["content"][0]["code"] == "too_large"

    def test_a_batch_over_the_limit_writes_nothing(self, api, session):
        batch = {"messages": [{"role": "user", "content": f"m{i}"} for i in range(101)]}

        response = append(api, session, batch)

        assert response.status_code == 400
        assert error_fields(response)["messages"][0]["code"] == "batch_too_large"
        assert not Message.objects.exists()

    def test_one_bad_message_in_a_batch_writes_none_of_it(self, api, session):
        batch = {
            "messages": [{"role": "user", "content": "fine"}, {"role": "nope", "content": "x"}]
        }

        response = append(api, session, batch)

        assert response.status_code == 400
        assert error_fields(response)["messages"]["1"]["role"][0]["code"] == "invalid_choice"
        assert not Message.objects.exists()

    def test_an_empty_batch_is_refused(self, api, session):
        response = append(api, session, {"messages": []})

        assert response.status_code == 400
        assert error_fields(response)["messages"]["non_field_errors"][0]["code"] == "empty"

    def test_malformed_json_is_a_400(self, api, session):
        response = api.post(
            messages_url(session), '{"role": "user",', content_type="application/json"
        )

        assert response.status_code == 400
        assert error_code(response) == "parse_error"

    def test_a_json_array_body_is_a_400(self, api, session):
        response = api.post(messages_url(session), "[]", content_type="application/json")

        assert response.status_code == 400

    def test_the_wrong_content_type_is_a_415(self, api, session):
        response = api.post(messages_url(session), "role=user", content_type="text/plain")

        assert response.status_code == 415
        assert error_code(response) == "unsupported_media_type"

    def test_a_body_over_the_request_limit_is_a_413(self, api, session, settings):
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

        response = append(api, session, {"role": "user", "content": "x" * 2000})

        assert response.status_code == 413
        assert error_code(response) == "payload_too_large"
        assert not Message.objects.exists()

    def test_a_session_id_that_is_not_a_uuid_is_a_404(self, api, db):
        response = api.post(
            "/api/v1/sessions/xyz/messages/", {"role": "user", "content": "x"}, format="json"
        )

        assert response.status_code == 404

    def test_a_read_only_key_cannot_append(self, read_only_api, session):
        response = append(read_only_api, session, {"role": "user", "content": "x"})

        assert response.status_code == 403
        assert not Message.objects.exists()


class TestIdempotency:
    def test_a_replay_returns_the_first_response_and_writes_nothing(self, api, session):
        payload = {
            "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        }

        first = append(api, session, payload, HTTP_IDEMPOTENCY_KEY="req-1")
        replay = append(api, session, payload, HTTP_IDEMPOTENCY_KEY="req-1")

        assert first.status_code == replay.status_code == 201
        assert replay.json() == first.json()
        assert replay["Idempotent-Replayed"] == "true"
        assert Message.objects.filter(session=session).count() == 2
        assert Session.objects.get(pk=session.pk).message_count == 2

    def test_the_same_key_with_another_body_is_a_422(self, api, session):
        append(api, session, {"role": "user", "content": "a"}, HTTP_IDEMPOTENCY_KEY="req-1")

        response = append(
            api, session, {"role": "user", "content": "b"}, HTTP_IDEMPOTENCY_KEY="req-1"
        )

        assert response.status_code == 422
        assert error_code(response) == "idempotency_key_reused"
        assert Message.objects.count() == 1

    def test_the_same_key_on_another_session_is_a_422(self, api, session, tenant):
        other, _ = Session.objects.get_or_create(
            tenant=tenant, last_active_at=session.last_active_at, agent_id="x"
        )
        append(api, session, {"role": "user", "content": "a"}, HTTP_IDEMPOTENCY_KEY="req-1")

        response = append(
            api, other, {"role": "user", "content": "a"}, HTTP_IDEMPOTENCY_KEY="req-1"
        )

        assert response.status_code == 422

    def test_different_keys_write_twice(self, api, session):
        append(api, session, {"role": "user", "content": "a"}, HTTP_IDEMPOTENCY_KEY="req-1")
        append(api, session, {"role": "user", "content": "a"}, HTTP_IDEMPOTENCY_KEY="req-2")

        assert Message.objects.count() == 2

    def test_a_failed_request_does_not_burn_the_key(self, api, session):
        bad = append(api, session, {"role": "nope", "content": "a"}, HTTP_IDEMPOTENCY_KEY="req-1")
        good = append(api, session, {"role": "user", "content": "a"}, HTTP_IDEMPOTENCY_KEY="req-1")

        assert bad.status_code == 400
        assert good.status_code == 201
        assert IdempotencyRecord.objects.count() == 1

    def test_keys_are_per_tenant(self, api, outsider_api, session, other_tenant):
        other_session = outsider_api.post("/api/v1/sessions/", {}, format="json").json()
        append(api, session, {"role": "user", "content": "a"}, HTTP_IDEMPOTENCY_KEY="shared")

        response = outsider_api.post(
            f"/api/v1/sessions/{other_session['id']}/messages/",
            {"role": "user", "content": "b"},
            format="json",
            HTTP_IDEMPOTENCY_KEY="shared",
        )

        assert response.status_code == 201

    def test_a_malformed_key_is_a_400(self, api, session):
        response = append(
            api, session, {"role": "user", "content": "a"}, HTTP_IDEMPOTENCY_KEY="has space"
        )

        assert response.status_code == 400
        assert "Idempotency-Key" in error_fields(response)


class TestRead:
    @pytest.fixture
    def history(self, session):
        for seq in range(1, 31):
            MessageFactory(session=session, seq=seq)
        Session.objects.filter(pk=session.pk).update(last_seq=30, message_count=30)
        return session

    def test_it_reads_the_last_20_by_default_oldest_first(self, api, history):
        body = api.get(messages_url(history)).json()

        assert [row["seq"] for row in body["results"]] == list(range(11, 31))
        assert body["has_more"] is True
        assert body["last_seq"] == 30

    def test_it_reads_the_last_n(self, api, history):
        body = api.get(messages_url(history), {"last": 5}).json()

        assert [row["seq"] for row in body["results"]] == [26, 27, 28, 29, 30]

    def test_it_reads_everything_when_n_exceeds_history(self, api, history):
        body = api.get(messages_url(history), {"last": 100}).json()

        assert len(body["results"]) == 30
        assert body["has_more"] is False

    def test_it_reads_after_a_seq_with_a_limit(self, api, history):
        first = api.get(messages_url(history), {"after_seq": 10, "limit": 15}).json()
        rest = api.get(messages_url(history), {"after_seq": 25, "limit": 15}).json()

        assert [row["seq"] for row in first["results"]] == list(range(11, 26))
        assert first["has_more"] is True
        assert [row["seq"] for row in rest["results"]] == list(range(26, 31))
        assert rest["has_more"] is False

    def test_an_empty_session_reads_as_an_empty_page(self, api, session):
        body = api.get(messages_url(session)).json()

        assert body == {"results": [], "has_more": False, "last_seq": 0}

    def test_reading_past_the_end_gives_an_empty_page_with_the_last_seq(self, api, history):
        body = api.get(messages_url(history), {"after_seq": 30}).json()

        assert body == {"results": [], "has_more": False, "last_seq": 30}

    def test_reading_after_a_seq_past_any_integer_column_is_an_empty_page(self, api, history):
        body = api.get(messages_url(history), {"after_seq": 2**64, "limit": 5}).json()

        assert body == {"results": [], "has_more": False, "last_seq": 30}

    @pytest.mark.parametrize(
        "params",
        [{"last": 0}, {"last": "x"}, {"last": 501}, {"after_seq": -1}, {"last": 5, "after_seq": 1}],
    )
    def test_it_refuses_bad_read_parameters(self, api, history, params):
        assert api.get(messages_url(history), params).status_code == 400

    def test_a_read_page_matches_the_documented_serializer(self, api, session):
        from sessions_app.api.serializers import MessageOutputSerializer

        stored = append(
            api,
            session,
            {
                "messages": [
                    {
                        "role": "user",
                        "content": "Hi",
                        "metadata": {"k": [1, {"a": None}]},
                        "created_at": "2020-01-01T00:00:00Z",
                    },
                    {
                        "role": "assistant",
                        "content": "",
                        "name": "bot",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{}"},
                            }
                        ],
                        "created_at": "2020-01-02T03:04:05.123456+02:00",
                    },
                    {"role": "tool", "content": "42", "tool_call_id": "c1"},
                ]
            },
        )
        assert stored.status_code == 201
        expected = [
            json.loads(json.dumps(MessageOutputSerializer(message).data))
            for message in Message.objects.filter(session=session).order_by("seq")
        ]

        last = api.get(messages_url(session), {"last": 3}).json()["results"]
        after = api.get(messages_url(session), {"after_seq": 0}).json()["results"]

        assert last == after == expected
        assert last[1]["tool_calls"][0]["function"]["name"] == "f"
        assert last[2]["created_at"].endswith("Z")

    def test_it_uses_a_fixed_number_of_queries(self, api, history, django_assert_max_num_queries):
        api.get(messages_url(history))  # first use writes the key's last_used_at

        # key lookup + messages (which carry their session's last_seq through a join)
        with django_assert_max_num_queries(2):
            response = api.get(messages_url(history), {"last": 30})
        assert len(response.json()["results"]) == 30


class TestOutsider:
    def test_reading_another_tenants_messages_is_a_404(self, outsider_api, session):
        assert outsider_api.get(messages_url(session)).status_code == 404

    def test_appending_to_another_tenants_session_is_a_404_and_writes_nothing(
        self, outsider_api, session
    ):
        response = append(outsider_api, session, {"role": "user", "content": "x"})

        assert response.status_code == 404
        assert not Message.objects.exists()

    def test_an_idempotent_append_to_another_tenants_session_is_a_404(self, outsider_api, session):
        response = append(
            outsider_api, session, {"role": "user", "content": "x"}, HTTP_IDEMPOTENCY_KEY="k"
        )

        assert response.status_code == 404
        assert not IdempotencyRecord.objects.exists()


def test_the_response_is_plain_json(api, session):
    response = append(api, session, {"role": "user", "content": "x"})

    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content)["seq"] == 1


def test_the_fast_message_output_matches_the_documented_serializer(api, session):
    from sessions_app.api.serializers import MessageOutputSerializer, message_data

    append(
        api,
        session,
        {
            "role": "assistant",
            "content": "",
            "name": "bot",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
            "metadata": {"k": [1, 2]},
        },
    )
    message = Message.objects.get(session=session)

    assert message_data(message) == dict(MessageOutputSerializer(message).data)


class TestBackfilledTimes:
    """A message may bring its own created_at (an import, a bot backfilling history)."""

    T1 = "2025-03-01T08:00:00Z"
    T2 = "2025-03-01T09:00:00Z"
    T3 = "2025-03-01T10:00:00Z"

    def test_it_stores_and_returns_a_past_time(self, api, session):
        payload = {"role": "user", "content": "hi", "created_at": "2025-03-01T10:00:00+02:00"}

        response = append(api, session, payload)

        assert response.status_code == 201
        assert response.json()["created_at"] == self.T1
        stored = Message.objects.get(session=session).created_at
        assert stored == dt.datetime(2025, 3, 1, 8, 0, tzinfo=dt.UTC)
        assert api.get(messages_url(session)).json()["results"][0]["created_at"] == self.T1

    def test_it_stores_a_batch_of_past_times_in_order(self, api, session):
        batch = {
            "messages": [
                {"role": "user", "content": "a", "created_at": self.T1},
                {"role": "assistant", "content": "b", "created_at": self.T2},
                {"role": "user", "content": "c"},
            ]
        }

        rows = append(api, session, batch).json()["messages"]

        assert [row["created_at"] for row in rows[:2]] == [self.T1, self.T2]
        assert rows[2]["created_at"] > self.T2

    def test_it_takes_a_naive_time_as_utc(self, api, session):
        response = append(
            api, session, {"role": "user", "content": "hi", "created_at": "2025-03-01T08:00:00"}
        )

        assert response.status_code == 201
        assert response.json()["created_at"] == self.T1

    @pytest.mark.parametrize("created_at", [None, "omitted"])
    def test_without_a_time_it_is_now(self, api, session, created_at):
        payload = {"role": "user", "content": "hi"}
        if created_at != "omitted":
            payload["created_at"] = created_at
        before = timezone.now()

        response = append(api, session, payload)

        stored = Message.objects.get(session=session).created_at
        assert before <= stored <= timezone.now()
        assert response.json()["created_at"] == stored.isoformat().replace("+00:00", "Z")

    def test_it_refuses_a_time_in_the_future_and_writes_nothing(self, api, session):
        later = (timezone.now() + dt.timedelta(hours=1)).isoformat()

        response = append(api, session, {"role": "user", "content": "hi", "created_at": later})

        assert response.status_code == 400
        assert error_fields(response)["created_at"][0]["code"] == "created_at_in_future"
        assert not Message.objects.exists()

    def test_a_time_a_little_ahead_is_clock_skew_and_stored_as_now(self, api, session):
        ahead = (timezone.now() + dt.timedelta(minutes=2)).isoformat()

        response = append(api, session, {"role": "user", "content": "hi", "created_at": ahead})
        after = append(api, session, {"role": "user", "content": "next"})

        assert response.status_code == 201
        first, second = Message.objects.filter(session=session).order_by("seq")
        assert first.created_at <= second.created_at <= timezone.now()
        assert after.status_code == 201

    def test_it_refuses_a_time_before_the_previous_message(self, api, session):
        append(api, session, {"role": "user", "content": "a", "created_at": self.T2})

        response = append(api, session, {"role": "user", "content": "b", "created_at": self.T1})

        assert response.status_code == 400
        assert error_code(response) == "validation_error"
        assert error_fields(response)["created_at"][0]["code"] == "created_at_out_of_order"
        assert Message.objects.count() == 1
        session.refresh_from_db()
        assert (session.last_seq, session.message_count) == (1, 1)

    def test_a_batch_starting_before_the_previous_message_names_the_message(self, api, session):
        append(api, session, {"role": "user", "content": "a", "created_at": self.T2})
        batch = {
            "messages": [
                {"role": "user", "content": "b", "created_at": self.T1},
                {"role": "assistant", "content": "c", "created_at": self.T3},
            ]
        }

        response = append(api, session, batch)

        assert response.status_code == 400
        fields = error_fields(response)
        assert fields["messages"]["0"]["created_at"][0]["code"] == "created_at_out_of_order"
        assert Message.objects.count() == 1
        session.refresh_from_db()
        assert session.last_seq == 1

    @pytest.mark.parametrize(
        "times",
        [
            ["2025-03-01T08:00:00Z", "2025-03-01T10:00:00Z", "2025-03-01T09:00:00Z"],
            ["2025-03-01T08:00:00Z", None, "2025-03-01T09:00:00Z"],
        ],
        ids=["given", "after_now"],
    )
    def test_a_batch_out_of_order_is_refused_and_writes_nothing(self, api, session, times):
        batch = {
            "messages": [
                {"role": "user", "content": f"m{i}", "created_at": time}
                for i, time in enumerate(times)
            ]
        }

        response = append(api, session, batch)

        assert response.status_code == 400
        fields = error_fields(response)
        assert fields["messages"]["2"]["created_at"][0]["code"] == "created_at_out_of_order"
        assert not Message.objects.exists()
        session.refresh_from_db()
        assert session.last_seq == 0

    def test_equal_times_are_in_order(self, api, session):
        batch = {
            "messages": [
                {"role": "user", "content": "a", "created_at": self.T1},
                {"role": "assistant", "content": "b", "created_at": self.T1},
            ]
        }

        first = append(api, session, batch)
        second = append(api, session, {"role": "user", "content": "c", "created_at": self.T1})

        assert first.status_code == second.status_code == 201
        assert Message.objects.filter(session=session).count() == 3

    @pytest.mark.parametrize(
        "created_at", ["yesterday", "2025-13-01T00:00:00Z", "0001-01-01T00:00:00+05:00", 1700000000]
    )
    def test_it_refuses_a_time_that_is_not_one(self, api, session, created_at):
        response = append(api, session, {"role": "user", "content": "x", "created_at": created_at})

        assert response.status_code == 400
        assert "created_at" in error_fields(response)
        assert not Message.objects.exists()

    def test_an_idempotent_retry_with_a_time_still_replays(self, api, session):
        payload = {
            "messages": [
                {"role": "user", "content": "a", "created_at": self.T1},
                {"role": "assistant", "content": "b", "created_at": self.T2},
            ]
        }

        first = append(api, session, payload, HTTP_IDEMPOTENCY_KEY="backfill-1")
        # Run again, T1 would now be before the stored T2: the replay must not run it again.
        replay = append(api, session, payload, HTTP_IDEMPOTENCY_KEY="backfill-1")

        assert first.status_code == replay.status_code == 201
        assert replay["Idempotent-Replayed"] == "true"
        assert replay.json() == first.json()
        assert Message.objects.filter(session=session).count() == 2

    def test_a_refused_time_does_not_burn_the_idempotency_key(self, api, session):
        append(api, session, {"role": "user", "content": "a", "created_at": self.T2})

        bad = append(
            api,
            session,
            {"role": "user", "content": "b", "created_at": self.T1},
            HTTP_IDEMPOTENCY_KEY="k",
        )
        good = append(
            api,
            session,
            {"role": "user", "content": "b", "created_at": self.T3},
            HTTP_IDEMPOTENCY_KEY="k",
        )

        assert bad.status_code == 400
        assert good.status_code == 201

    def test_an_append_without_a_time_reads_no_message(self, api, session):
        append(api, session, {"role": "user", "content": "a", "created_at": self.T1})
        table = Message._meta.db_table

        with CaptureQueriesContext(connection) as queries:
            append(api, session, {"role": "user", "content": "b"})

        reads = [q["sql"] for q in queries if q["sql"].startswith("SELECT") and table in q["sql"]]
        assert reads == []
