"""A retried Idempotency-Key after what it wrote was deleted (issue 14, item 2): the stored answer
went with it, so a replay never returns deleted content — and never writes it again either.

Deleting or purging a session, retention and a purge by age blank the stored responses of the
writes they remove: a replay answers 410 `idempotency_key_erased` and writes nothing. Erasing a
person deletes their stored responses with them: a replay is a new request, and a write to one
of their sessions finds no session (404).
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.utils import timezone

from memoryhub.accounts.models import IdempotencyRecord
from memoryhub.retention import prune as retention
from sessions_app.models import Message, Plan, Session
from tests.helpers import client_for, error_code

SECRET_TEXT = "my card number is 4111"


@pytest.fixture
def bot(tenant, make_key):
    return client_for(make_key(tenant, scopes=["read", "write", "purge"])[1])


def new_session(bot, user_id: str = "telegram:42") -> str:
    return bot.post("/api/v1/sessions/", {"user_id": user_id}, format="json").json()["id"]


def append(bot, session_id: str, key: str, body: dict | None = None):
    return bot.post(
        f"/api/v1/sessions/{session_id}/messages/",
        body or {"role": "user", "content": SECRET_TEXT},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


def assert_erased_replay(response) -> None:
    assert response.status_code == 410, response.content
    assert error_code(response) == "idempotency_key_erased"
    assert response["Idempotent-Replayed"] == "true"
    assert SECRET_TEXT not in response.content.decode()


def nothing_stored_quotes_the_secret() -> bool:
    return all(
        SECRET_TEXT not in json.dumps(body)
        for body in IdempotencyRecord.objects.values_list("response_body", flat=True)
    )


def make_old(session_id: str, *, days: int) -> None:
    moment = timezone.now() - dt.timedelta(days=days)
    Message.objects.filter(session_id=session_id).update(created_at=moment)
    Session.objects.filter(pk=session_id).update(last_active_at=moment)


def test_the_stored_response_knows_its_session(bot):
    session_id = new_session(bot)

    assert append(bot, session_id, "k1").status_code == 201

    record = IdempotencyRecord.objects.get(key="k1")
    assert str(record.session_id) == session_id
    assert record.end_user_id is not None


def test_a_replay_after_the_session_was_deleted_answers_410_and_writes_nothing(bot):
    session_id = new_session(bot)
    first = append(bot, session_id, "k1")
    assert first.status_code == 201
    assert append(bot, session_id, "k1").json() == first.json()  # a replay, before

    assert bot.delete(f"/api/v1/sessions/{session_id}/").status_code == 204
    replay = append(bot, session_id, "k1")

    assert_erased_replay(replay)
    assert not Message.objects.exists()
    assert not Session.objects.filter(pk=session_id).exists()
    assert nothing_stored_quotes_the_secret()


def test_a_blanked_key_answers_410_whatever_the_body(bot):
    # The blank record keeps no digest of the deleted request, so it cannot tell a retry from a
    # reuse: either way nothing is written.
    session_id = new_session(bot)
    append(bot, session_id, "k1")
    bot.delete(f"/api/v1/sessions/{session_id}/")

    other = append(bot, session_id, "k1", {"role": "user", "content": "something else"})

    assert_erased_replay(other)
    assert IdempotencyRecord.objects.get(key="k1").request_hash == ""


def test_a_replay_after_a_session_purge_answers_410(bot):
    session_id = new_session(bot)
    append(bot, session_id, "k1")
    batch = {
        "messages": [
            {"role": "user", "content": SECRET_TEXT},
            {"role": "assistant", "content": "ok"},
        ]
    }
    assert append(bot, session_id, "k2", batch).status_code == 201

    purged = bot.post(
        "/api/v1/purge/", {"scope": "session", "session_id": session_id}, format="json"
    )

    assert purged.status_code == 200
    assert purged.json()["counts"]["messages"] == 3
    assert_erased_replay(append(bot, session_id, "k1"))
    assert_erased_replay(append(bot, session_id, "k2", batch))
    assert nothing_stored_quotes_the_secret()


def test_a_replayed_create_of_a_deleted_session_creates_nothing(bot):
    body = {"user_id": "telegram:42", "metadata": {"topic": SECRET_TEXT}}
    created = bot.post("/api/v1/sessions/", body, format="json", HTTP_IDEMPOTENCY_KEY="s1")
    assert created.status_code == 201
    bot.delete(f"/api/v1/sessions/{created.json()['id']}/")

    replay = bot.post("/api/v1/sessions/", body, format="json", HTTP_IDEMPOTENCY_KEY="s1")

    assert_erased_replay(replay)
    assert not Session.objects.exists()


def test_a_replayed_plan_of_a_deleted_session_is_erased_too(bot):
    session_id = new_session(bot)
    body = {"plan_id": "p1", "goal_event": "g", "session_id": session_id, "state": {"x": 1}}
    assert (
        bot.post("/api/v1/plans/", body, format="json", HTTP_IDEMPOTENCY_KEY="p1").status_code
        == 201
    )
    bot.delete(f"/api/v1/sessions/{session_id}/")

    replay = bot.post("/api/v1/plans/", body, format="json", HTTP_IDEMPOTENCY_KEY="p1")

    assert replay.status_code == 410
    assert not Plan.objects.exists()


def test_a_purge_by_age_blanks_the_responses_of_the_sessions_it_removes(bot):
    old, live = new_session(bot), new_session(bot, "telegram:43")
    append(bot, old, "old")
    append(bot, live, "live", {"role": "user", "content": "fresh"})
    make_old(old, days=40)

    purged = bot.post("/api/v1/purge/", {"scope": "older_than", "days": 30}, format="json")

    assert purged.json()["counts"]["sessions"] == 1
    assert_erased_replay(append(bot, old, "old"))
    kept = append(bot, live, "live", {"role": "user", "content": "fresh"})
    assert (kept.status_code, kept.json()["content"]) == (201, "fresh")


def test_a_purge_by_age_blanks_the_responses_of_backfilled_messages_it_removes(bot):
    # A live session keeps its recent appends' answers; an append that backfilled an old
    # message (its own created_at) loses its answer with the message, single or in a batch.
    session_id = new_session(bot)
    long_ago = (timezone.now() - dt.timedelta(days=60)).isoformat()
    single = {"role": "user", "content": SECRET_TEXT, "created_at": long_ago}
    batch = {
        "messages": [
            {"role": "user", "content": SECRET_TEXT, "created_at": long_ago},
            {"role": "assistant", "content": "ok", "created_at": long_ago},
        ]
    }
    assert append(bot, session_id, "backfill", single).status_code == 201
    assert append(bot, session_id, "backfill-batch", batch).status_code == 201
    assert append(bot, session_id, "recent", {"role": "user", "content": "now"}).status_code == 201

    purged = bot.post("/api/v1/purge/", {"scope": "older_than", "days": 30}, format="json")

    assert purged.json()["counts"] == {"messages": 3}
    assert_erased_replay(append(bot, session_id, "backfill", single))
    assert_erased_replay(append(bot, session_id, "backfill-batch", batch))
    recent = append(bot, session_id, "recent", {"role": "user", "content": "now"})
    assert recent.status_code == 201
    assert recent["Idempotent-Replayed"] == "true"
    assert list(Message.objects.values_list("content", flat=True)) == ["now"]
    assert nothing_stored_quotes_the_secret()


def test_retention_blanks_the_responses_of_what_it_removes(bot, tenant):
    session_id = new_session(bot)
    append(bot, session_id, "k1")
    make_old(session_id, days=200)

    report = retention.retention_prune_tenant(tenant=tenant)

    assert report.counts["sessions"] == 1
    assert_erased_replay(append(bot, session_id, "k1"))
    assert nothing_stored_quotes_the_secret()


def test_after_an_erasure_a_replay_is_a_new_request_and_finds_no_session(bot):
    session_id = new_session(bot)
    append(bot, session_id, "k1")

    assert bot.delete("/api/v1/users/telegram:42/").status_code == 200
    replay = append(bot, session_id, "k1")

    assert replay.status_code == 404
    assert not Message.objects.exists()
    assert not IdempotencyRecord.objects.exists()
