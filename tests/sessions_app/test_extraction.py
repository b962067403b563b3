"""Fact extraction: after a user/assistant exchange a task (eager here, a real worker in
production) asks the LLM — a real local chat-completions server — for facts about the person."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from facts_app.models import Fact
from facts_app.services.facts import fact_create
from memoryhub.accounts.models import MemoryPolicy
from memoryhub.llm import LLMPermanentError, LLMTransientError
from memoryhub.llm.models import LlmUsage
from memoryhub.llm.prompts import DATA_NOT_INSTRUCTIONS
from sessions_app import extraction, tasks
from sessions_app.models import Message, Session
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get


def messages_url(session: Session) -> str:
    return f"/api/v1/sessions/{session.id}/messages/"


def exchange(api, session, user: str, assistant: str, capture) -> list[dict]:
    """One turn through the API, running the after-commit enqueues (the tasks run eagerly)."""
    with capture(execute=True):
        response = api.post(
            messages_url(session),
            {
                "messages": [
                    {"role": "user", "content": user},
                    {"role": "assistant", "content": assistant},
                ]
            },
            format="json",
        )
    assert response.status_code == 201, response.content
    return response.json()["messages"]


def current_facts(session: Session) -> list[str]:
    return sorted(
        Fact.objects.filter(end_user=session.end_user, superseded_by=None).values_list(
            "content", flat=True
        )
    )


def fresh(session: Session) -> Session:
    return Session.objects.get(pk=session.pk)


class TestAnExchange:
    def test_it_becomes_facts_with_provenance(
        self, api, session, fake_llm, django_capture_on_commit_callbacks
    ):
        fake_llm.reply("- User lives in Berlin.\n- User has a dog named Rex", prompt_tokens=120)

        sent = exchange(
            api,
            session,
            "I moved to Berlin last year with my dog Rex.",
            "Berlin is lovely! How is Rex settling in?",
            django_capture_on_commit_callbacks,
        )

        assert current_facts(session) == ["User has a dog named Rex", "User lives in Berlin."]
        fact = Fact.objects.get(content="User lives in Berlin.")
        assert fact.source_session_id == session.pk
        assert fact.source_message_ids == [message["id"] for message in sent]
        assert fact.metadata == {"source": "extraction", "model": fake_llm.model}
        assert fact.end_user_id == session.end_user_id
        assert (fresh(session).extracted_seq, fresh(session).extraction_requested_at) == (2, None)
        request = fake_llm.last_request
        assert DATA_NOT_INSTRUCTIONS in request.content_of("system")
        assert "I moved to Berlin" in request.content_of("user")
        usage = LlmUsage.objects.get(tenant=session.tenant)
        assert (usage.purpose, usage.calls, usage.prompt_tokens) == ("extraction", 1, 120)

    def test_the_fact_is_found_by_the_context_of_a_later_question(
        self, api, session, fake_llm, django_capture_on_commit_callbacks
    ):
        fake_llm.reply("User is allergic to peanuts")
        exchange(
            api,
            session,
            "Note that I'm allergic to peanuts.",
            "Noted.",
            django_capture_on_commit_callbacks,
        )

        response = api.get(
            f"/api/v1/sessions/{session.id}/context/", {"query": "peanuts in the recipe?"}
        )

        assert "User is allergic to peanuts" in response.json()["content"]

    def test_nothing_is_asked_before_the_assistant_replies(
        self, api, session, fake_llm, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True):
            api.post(messages_url(session), {"role": "user", "content": "Hi"}, format="json")

        assert fake_llm.requests == []
        assert fresh(session).extraction_requested_at is None

    def test_the_reply_requests_it_in_its_own_claim(
        self, session, fake_llm, django_assert_num_queries
    ):
        # The policy is every agent's: the claim's UPDATE sets the request, no statement more
        # (savepoint, the claim and the insert: one statement on PostgreSQL, release).
        statements = 3 if connection.vendor == "postgresql" else 4
        message_append_batch(  # the policies read once (they are cached)
            tenant=session.tenant,
            session_id=session.pk,
            messages=[MessageInput(role="user", content="Hi")],
        )
        with django_assert_num_queries(statements):
            message_append_batch(
                tenant=session.tenant,
                session_id=session.pk,
                messages=[MessageInput(role="user", content="I live in Berlin")],
            )
        assert fresh(session).extraction_requested_at is None
        with django_assert_num_queries(statements):
            message_append_batch(
                tenant=session.tenant,
                session_id=session.pk,
                messages=[MessageInput(role="assistant", content="Nice")],
            )
        assert fresh(session).extraction_requested_at is not None

    def test_a_session_without_a_person_extracts_nothing(
        self, api, tenant, fake_llm, django_capture_on_commit_callbacks
    ):
        anonymous, _ = session_create_or_get(tenant=tenant, agent_id="chat")

        exchange(api, anonymous, "I love jazz", "Nice!", django_capture_on_commit_callbacks)

        assert fake_llm.requests == []
        assert Fact.objects.count() == 0

    def test_a_reply_without_text_moves_the_cursor_without_asking(self, session, fake_llm):
        message_append_batch(
            tenant=session.tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content=""),
                MessageInput(role="assistant", content="", tool_calls=[{"id": "call_1"}]),
            ],
        )

        result = extraction.session_extract_facts(session_id=session.pk)

        assert result is not None
        assert result.created == []
        assert fresh(session).extracted_seq == 2
        assert fake_llm.requests == []


class TestDuplicatesAndUpdates:
    def test_exact_and_near_duplicates_are_not_stored_twice(
        self, api, session, fake_llm, django_capture_on_commit_callbacks
    ):
        fact_create(
            tenant=session.tenant, end_user=session.end_user, content="User likes green tea"
        )
        fake_llm.reply(
            "The user likes green tea.\nUser likes green tea\nUSER LIKES GREEN TEA!\n"
            "User has 2 cats\nUser has 2 cats."
        )

        exchange(
            api, session, "Green tea, and my 2 cats", "Cute!", django_capture_on_commit_callbacks
        )

        assert current_facts(session) == ["User has 2 cats", "User likes green tea"]
        # The known facts went to the model, so it can skip or replace them.
        assert "User likes green tea" in fake_llm.last_request.content_of("user")

    def test_a_changed_number_is_a_new_fact_not_a_duplicate(self, session, fake_llm):
        fact_create(tenant=session.tenant, end_user=session.end_user, content="User is 30")
        message_append_batch(
            tenant=session.tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content="I turned 31"),
                MessageInput(role="assistant", content="Happy birthday!"),
            ],
        )
        fake_llm.reply("User is 31 || replaces: User is 30")

        extraction.session_extract_facts(session_id=session.pk)

        assert current_facts(session) == ["User is 31"]

    def test_a_replacing_fact_supersedes_the_old_one_instead_of_deleting_it(
        self, api, session, fake_llm, django_capture_on_commit_callbacks
    ):
        old, _ = fact_create(
            tenant=session.tenant, end_user=session.end_user, content="User lives in Paris"
        )
        fake_llm.reply("User lives in Berlin || replaces: User lives in Paris")

        exchange(api, session, "I moved to Berlin", "Welcome!", django_capture_on_commit_callbacks)

        new = Fact.objects.get(content="User lives in Berlin")
        old.refresh_from_db()
        assert old.superseded_by_id == new.pk
        assert old.valid_until is not None
        assert old.valid_until <= timezone.now()
        assert current_facts(session) == ["User lives in Berlin"]
        assert Fact.objects.filter(end_user=session.end_user).count() == 2

    def test_a_superseded_fact_that_holds_again_becomes_current_again(self, session, fake_llm):
        paris, _ = fact_create(
            tenant=session.tenant, end_user=session.end_user, content="User lives in Paris"
        )
        berlin, _ = fact_create(
            tenant=session.tenant,
            end_user=session.end_user,
            content="User lives in Berlin",
            supersedes=paris,
        )
        message_append_batch(
            tenant=session.tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content="I moved back to Paris"),
                MessageInput(role="assistant", content="Welcome home"),
            ],
        )
        fake_llm.reply("User lives in Paris || replaces: User lives in Berlin")

        extraction.session_extract_facts(session_id=session.pk)

        paris.refresh_from_db()
        berlin.refresh_from_db()
        assert (paris.superseded_by_id, paris.valid_until) == (None, None)
        assert berlin.superseded_by_id == paris.pk
        assert current_facts(session) == ["User lives in Paris"]
        assert Fact.objects.count() == 2

    def test_a_replacement_naming_an_unknown_fact_is_just_a_new_fact(
        self, api, session, fake_llm, django_capture_on_commit_callbacks
    ):
        keep, _ = fact_create(
            tenant=session.tenant, end_user=session.end_user, content="User lives in Paris"
        )
        fake_llm.reply("User works at Acme || replaces: User works at Initech")

        exchange(api, session, "I work at Acme", "Cool", django_capture_on_commit_callbacks)

        keep.refresh_from_db()
        assert keep.superseded_by_id is None
        assert current_facts(session) == ["User lives in Paris", "User works at Acme"]

    def test_another_persons_facts_are_neither_shown_nor_touched(
        self, api, session, tenant, fake_llm, django_capture_on_commit_callbacks
    ):
        other, _ = session_create_or_get(tenant=tenant, user_id="someone-else")
        theirs, _ = fact_create(
            tenant=tenant, end_user=other.end_user, content="User lives in Paris"
        )
        fake_llm.reply("User lives in Berlin || replaces: User lives in Paris")

        exchange(api, session, "I live in Berlin", "Nice", django_capture_on_commit_callbacks)

        assert "Paris" not in fake_llm.last_request.content_of("user")
        theirs.refresh_from_db()
        assert theirs.superseded_by_id is None
        assert current_facts(session) == ["User lives in Berlin"]


class TestSwitches:
    def test_without_an_llm_nothing_is_requested(
        self, api, session, settings, django_capture_on_commit_callbacks
    ):
        settings.LLM_BASE_URL = ""

        exchange(api, session, "I live in Berlin", "Nice", django_capture_on_commit_callbacks)

        assert fresh(session).extraction_requested_at is None
        assert Fact.objects.count() == 0

    def test_the_tenant_can_switch_it_off_and_an_agent_back_on(
        self, api, tenant, session, fake_llm, django_capture_on_commit_callbacks
    ):
        MemoryPolicy.objects.create(tenant=tenant, extraction_enabled=False)
        exchange(api, session, "I live in Berlin", "Nice", django_capture_on_commit_callbacks)
        assert fake_llm.requests == []

        MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", extraction_enabled=True)
        fake_llm.reply("User lives in Berlin")
        exchange(api, session, "Really, Berlin", "Got it", django_capture_on_commit_callbacks)

        assert len(fake_llm.requests) == 1
        assert current_facts(session) == ["User lives in Berlin"]
        # Both turns were read: the cursor was never moved while extraction was off.
        assert "I live in Berlin" in fake_llm.last_request.content_of("user")


class TestFaults:
    @pytest.mark.parametrize(
        ("script", "error"),
        [
            (lambda llm: llm.fail(500), LLMTransientError),
            (lambda llm: llm.stall(2.0), LLMTransientError),
            (lambda llm: llm.malformed(), LLMPermanentError),
            (lambda llm: llm.no_choices(), LLMPermanentError),
        ],
        ids=["500", "timeout", "garbage", "no-choices"],
    )
    def test_a_failing_llm_leaves_everything_as_it_was(
        self, session, fake_llm, settings, script, error
    ):
        settings.LLM_TIMEOUT_SECONDS = 0.5
        message_append_batch(
            tenant=session.tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content="I live in Berlin"),
                MessageInput(role="assistant", content="Nice"),
            ],
        )
        before = Session.objects.filter(pk=session.pk).values().get()
        script(fake_llm)

        with pytest.raises(error):
            extraction.session_extract_facts(session_id=session.pk)

        assert Fact.objects.count() == 0
        assert Session.objects.filter(pk=session.pk).values().get() == before
        assert LlmUsage.objects.count() == 0

    def test_an_empty_or_none_answer_stores_nothing_and_moves_on(self, session, fake_llm):
        message_append_batch(
            tenant=session.tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content="Hello"),
                MessageInput(role="assistant", content="Hi"),
            ],
        )
        fake_llm.reply("NONE")

        result = extraction.session_extract_facts(session_id=session.pk)

        assert result is not None
        assert result.created == []
        assert fresh(session).extracted_seq == 2

    def test_the_task_retries_a_transient_error_then_succeeds(self, session, fake_llm):
        message_append_batch(
            tenant=session.tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content="I live in Berlin"),
                MessageInput(role="assistant", content="Nice"),
            ],
        )
        fake_llm.fail(503)
        fake_llm.reply("User lives in Berlin")

        result = tasks.extract_session_facts.apply(args=[str(session.pk)])

        assert result.get() == 1
        assert len(fake_llm.requests) == 2
        task = tasks.extract_session_facts
        assert (task.acks_late, task.reject_on_worker_lost, task.autoretry_for) == (
            True,
            True,
            (LLMTransientError,),
        )

    def test_a_repeated_task_stores_the_facts_once(self, session, fake_llm):
        message_append_batch(
            tenant=session.tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content="I live in Berlin"),
                MessageInput(role="assistant", content="Nice"),
            ],
        )
        fake_llm.reply("User lives in Berlin")

        first = tasks.extract_session_facts.apply(args=[str(session.pk)]).get()
        second = tasks.extract_session_facts.apply(args=[str(session.pk)]).get()

        assert (first, second) == (1, None)
        assert len(fake_llm.requests) == 1
        assert Fact.objects.count() == 1

    def test_racing_runs_store_the_exchange_once(self, session, fake_llm, monkeypatch):
        """Two workers read the same cursor; the second to commit finds it moved and stores
        nothing (the row lock serialises the two stores)."""
        message_append_batch(
            tenant=session.tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content="I live in Berlin"),
                MessageInput(role="assistant", content="Nice"),
            ],
        )
        fake_llm.reply("User lives in Berlin")
        fake_llm.reply("User resides in Berlin now")
        original = extraction._facts_store
        stale = Session.objects.get(pk=session.pk)

        def store_twice(**kwargs):
            first = original(**kwargs)
            again = original(**{**kwargs, "session": stale})
            assert again is None
            return first

        monkeypatch.setattr(extraction, "_facts_store", store_twice)

        extraction.session_extract_facts(session_id=session.pk)

        assert Fact.objects.count() == 1

    def test_a_long_backlog_is_read_in_bounded_runs_until_done(
        self, session, fake_llm, django_capture_on_commit_callbacks
    ):
        turns = 25
        fake_llm.responder = lambda messages: "NONE"
        with django_capture_on_commit_callbacks(execute=True):
            message_append_batch(
                tenant=session.tenant,
                session_id=session.pk,
                messages=[
                    MessageInput(role="user" if i % 2 == 0 else "assistant", content=f"turn {i}")
                    for i in range(turns * 2)
                ],
            )

        assert fresh(session).extracted_seq == turns * 2
        assert fresh(session).extraction_requested_at is None
        assert len(fake_llm.requests) == -(-turns * 2 // extraction.EXTRACT_MAX_MESSAGES)

    def test_the_sweep_re_enqueues_a_lost_request(
        self, session, fake_llm, monkeypatch, django_capture_on_commit_callbacks
    ):
        message_append_batch(
            tenant=session.tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content="I live in Berlin"),
                MessageInput(role="assistant", content="Nice"),
            ],
        )
        long_ago = timezone.now() - extraction.REQUEST_STALE_AFTER - dt.timedelta(seconds=1)
        Session.objects.filter(pk=session.pk).update(extraction_requested_at=long_ago)
        enqueued: list[str] = []
        monkeypatch.setattr(
            extraction, "extraction_enqueue", lambda *, session_id: enqueued.append(str(session_id))
        )

        with django_capture_on_commit_callbacks(execute=True):
            assert extraction.extraction_sweep() == 1
            assert extraction.extraction_sweep() == 0  # claimed now: no longer stale
        assert enqueued == [str(session.pk)]


def test_messages_survive_a_purged_source_without_touching_facts(session, fake_llm):
    """Deleting the session keeps the facts it produced: they are the person's, not the
    session's (their provenance then points at a session that is gone)."""
    message_append_batch(
        tenant=session.tenant,
        session_id=session.pk,
        messages=[
            MessageInput(role="user", content="I live in Berlin"),
            MessageInput(role="assistant", content="Nice"),
        ],
    )
    fake_llm.reply("User lives in Berlin")
    extraction.session_extract_facts(session_id=session.pk)

    Session.objects.filter(pk=session.pk).delete()

    assert Message.objects.count() == 0
    assert Fact.objects.get().source_session_id == session.pk
