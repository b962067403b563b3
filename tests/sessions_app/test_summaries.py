"""Session summaries: requested when unsummarized history passes the threshold (once per pending
task), written incrementally by a Celery task (eager in tests), with the LLM or offline, and
never half-written when the LLM fails."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from memoryhub.accounts.models import MemoryPolicy
from memoryhub.llm import LLMPermanentError, LLMTransientError
from memoryhub.llm.models import LlmUsage
from memoryhub.llm.prompts import DATA_NOT_INSTRUCTIONS
from sessions_app import summaries, tasks
from sessions_app.models import Message, Session, Summary
from sessions_app.services import MessageInput, message_append_batch

THRESHOLD = 100
KEEP = 10
TOKENS_PER_MESSAGE = 10


@pytest.fixture(autouse=True)
def _no_embeddings(settings):
    # These tests count the summary's enqueues after commit; an append's embedding request is
    # another one (tested in test_message_recall.py).
    settings.EMBEDDINGS_BACKEND = "off"


@pytest.fixture(autouse=True)
def small_threshold(settings):
    settings.SUMMARY_THRESHOLD_TOKENS = THRESHOLD
    settings.SUMMARY_KEEP_RECENT = KEEP


@pytest.fixture
def enqueued(monkeypatch):
    """The session ids handed to the task queue (the task still runs, eagerly)."""
    calls: list[str] = []
    original = summaries.summary_enqueue

    def spy(*, session_id):
        calls.append(str(session_id))
        original(session_id=session_id)

    monkeypatch.setattr(summaries, "summary_enqueue", spy)
    return calls


def append(session, count, *, start=0, tokens=TOKENS_PER_MESSAGE):
    roles = ("user", "assistant")
    return message_append_batch(
        tenant=session.tenant,
        session_id=session.pk,
        messages=[
            MessageInput(
                role=roles[i % 2],
                content=f"Message {i}: we talked about the garden. More words follow here.",
                token_count=tokens,
            )
            for i in range(start, start + count)
        ],
    )


def fresh(session) -> Session:
    return Session.objects.get(pk=session.pk)


def messages_url(session) -> str:
    return f"/api/v1/sessions/{session.id}/messages/"


class TestTheThreshold:
    def test_it_enqueues_once_while_a_task_is_pending(
        self, api, session, enqueued, django_capture_on_commit_callbacks
    ):
        pending = []
        for turn in range(30):
            with django_capture_on_commit_callbacks() as callbacks:
                response = api.post(
                    messages_url(session),
                    {"role": "user", "content": f"Turn {turn}: a few words about tomatoes."},
                    format="json",
                )
            assert response.status_code == 201
            pending += callbacks
        total = sum(Message.objects.filter(session=session).values_list("token_count", flat=True))

        assert total > THRESHOLD
        assert len(pending) == 1  # every later append saw the pending request
        assert fresh(session).summary_requested_at is not None
        assert Summary.objects.count() == 0

        pending[0]()  # the commit happens: enqueue, and (eagerly) summarize

        assert enqueued == [str(session.pk)]
        summary = Summary.objects.get(session=session)
        assert summary.through_seq == 30 - KEEP
        assert summary.model == Summary.OFFLINE_MODEL
        assert "Turn 0:" in summary.text
        assert "Turn 19:" in summary.text
        assert "Turn 20:" not in summary.text
        after = fresh(session)
        assert after.summary_requested_at is None
        assert after.summarized_tokens == sum(
            Message.objects.filter(session=session, seq__lte=20).values_list(
                "token_count", flat=True
            )
        )

    def test_it_does_not_ask_under_the_threshold(self, session, enqueued):
        append(session, THRESHOLD // TOKENS_PER_MESSAGE)  # exactly the threshold: not past it

        assert fresh(session).summary_requested_at is None
        assert summaries.session_summarize(session_id=session.pk) is None
        assert enqueued == []

    def test_an_append_past_the_threshold_requests_it_in_its_own_claim(
        self, session, django_assert_num_queries
    ):
        # savepoint, the claim and the insert (one statement on PostgreSQL), release
        append_statements = 3 if connection.vendor == "postgresql" else 4
        append(session, 1)
        with django_assert_num_queries(append_statements):
            append(session, 1, start=1)
        # The policy is every agent's: the claim's UPDATE sets the request, no statement more.
        with django_assert_num_queries(append_statements):
            append(session, 20, start=2)
        requested = fresh(session).summary_requested_at
        assert requested is not None
        with django_assert_num_queries(append_statements):  # still pending: nothing more
            append(session, 5, start=22)
        assert fresh(session).summary_requested_at == requested

    def test_under_an_agents_own_policy_it_costs_one_update_once(
        self, session, django_assert_num_queries
    ):
        MemoryPolicy.objects.create(
            tenant=session.tenant,
            agent_id=session.agent_id,
            summary_threshold_tokens=THRESHOLD,
            summary_keep_recent=KEEP,
        )
        append_statements = 3 if connection.vendor == "postgresql" else 4
        append(session, 2)
        # + the conditional UPDATE that requests a summary (the agent is known after the claim)
        with django_assert_num_queries(append_statements + 1):
            append(session, 20, start=2)
        assert fresh(session).summary_requested_at is not None
        with django_assert_num_queries(append_statements):  # still pending: nothing more
            append(session, 5, start=22)

    def test_below_the_threshold_or_with_summaries_off_the_claim_requests_nothing(
        self, session, tenant
    ):
        append(session, 5)  # 5 x TOKENS_PER_MESSAGE, under the threshold
        assert fresh(session).summary_requested_at is None
        MemoryPolicy.objects.create(tenant=tenant, agent_id="", enable_summarization=False)
        append(session, 30, start=5)
        assert fresh(session).summary_requested_at is None


class TestSummarizing:
    def test_it_folds_all_but_the_newest_messages_offline(self, session):
        append(session, 25)

        summary = summaries.session_summarize(session_id=session.pk)

        assert summary is not None
        assert (summary.through_seq, summary.model) == (25 - KEEP, "offline")
        assert summary.text.startswith("- User: Message 0:")
        assert summary.token_count > 0
        assert fresh(session).summarized_tokens == 15 * TOKENS_PER_MESSAGE
        assert LlmUsage.objects.count() == 0

    def test_the_next_summary_builds_on_the_previous_one(self, session, fake_llm):
        fake_llm.reply("First summary: the garden.")
        fake_llm.reply("Second summary: the garden, then tomatoes.")
        append(session, 25)
        first = summaries.session_summarize(session_id=session.pk)
        append(session, 15, start=25)

        second = summaries.session_summarize(session_id=session.pk)

        assert first is not None
        assert second is not None
        assert (first.through_seq, second.through_seq) == (15, 30)
        assert second.text == "Second summary: the garden, then tomatoes."
        prompt = fake_llm.last_request.content_of("user")
        assert "First summary: the garden." in prompt
        assert "Message 15:" in prompt
        assert "Message 14:" not in prompt
        assert "Message 30:" not in prompt  # among the newest ten
        assert fresh(session).summarized_tokens == 30 * TOKENS_PER_MESSAGE

    def test_it_is_idempotent(self, session):
        append(session, 25)
        first = summaries.session_summarize(session_id=session.pk)

        again = summaries.session_summarize(session_id=session.pk, force=True)

        assert first is not None
        assert again is None  # nothing new to fold
        assert Summary.objects.filter(session=session).count() == 1
        with pytest.raises(IntegrityError), transaction.atomic():
            Summary.objects.create(
                tenant=session.tenant, session=session, through_seq=first.through_seq, model="x"
            )

    def test_a_range_another_worker_wrote_meanwhile_is_returned_not_rewritten(
        self, session, monkeypatch
    ):
        append(session, 25)
        real_offline = summaries.offline_summary

        def slow_offline(**kwargs):
            # Another worker finishes the same range while this one is "calling the LLM".
            Summary.objects.create(
                tenant=session.tenant, session=session, through_seq=15, text="theirs", model="m"
            )
            return real_offline(**kwargs)

        monkeypatch.setattr(summaries, "offline_summary", slow_offline)

        summary = summaries.session_summarize(session_id=session.pk)

        assert summary is not None
        assert summary.text == "theirs"
        assert Summary.objects.filter(session=session).count() == 1

    def test_force_ignores_the_threshold_but_keeps_the_newest_messages(self, session):
        append(session, 12, tokens=1)

        summary = summaries.session_summarize(session_id=session.pk, force=True)

        assert summary is not None
        assert summary.through_seq == 2

    def test_a_gone_session_is_nothing_to_do(self, session):
        append(session, 25)
        pk = session.pk
        Session.objects.filter(pk=pk).delete()

        assert summaries.session_summarize(session_id=pk) is None
        assert tasks.summarize_session.apply(args=[str(pk)]).get() is None


class TestWithTheLLM:
    def test_the_text_comes_from_the_llm_and_the_conversation_is_data(self, session, fake_llm):
        fake_llm.reply("The user tends a garden.", prompt_tokens=300, completion_tokens=7)
        append(session, 25)

        summary = summaries.session_summarize(session_id=session.pk)

        assert summary is not None
        assert (summary.text, summary.model) == ("The user tends a garden.", fake_llm.model)
        request = fake_llm.last_request
        assert DATA_NOT_INSTRUCTIONS in request.content_of("system")
        assert "<conversation>" in request.content_of("user")
        assert "Message 0:" in request.content_of("user")
        usage = LlmUsage.objects.get(tenant=session.tenant)
        assert (usage.purpose, usage.calls, usage.prompt_tokens) == ("summary", 1, 300)

    @pytest.mark.parametrize(
        ("script", "error"),
        [
            (lambda llm: llm.fail(500), LLMTransientError),
            (lambda llm: llm.stall(2.0), LLMTransientError),
            (lambda llm: llm.empty(), LLMPermanentError),
            (lambda llm: llm.malformed(), LLMPermanentError),
            (lambda llm: llm.no_choices(), LLMPermanentError),
        ],
        ids=["500", "timeout", "empty", "garbage", "no-choices"],
    )
    def test_a_failing_llm_leaves_the_session_as_it_was(
        self, session, fake_llm, settings, script, error
    ):
        settings.LLM_TIMEOUT_SECONDS = 0.5
        append(session, 25)
        before = Session.objects.filter(pk=session.pk).values().get()
        script(fake_llm)

        with pytest.raises(error):
            summaries.session_summarize(session_id=session.pk)

        assert Summary.objects.count() == 0
        assert Session.objects.filter(pk=session.pk).values().get() == before
        assert LlmUsage.objects.count() == 0


class TestTheTask:
    def test_it_retries_transient_errors_with_backoff(self):
        task = tasks.summarize_session
        assert task.autoretry_for == (LLMTransientError,)
        assert task.acks_late
        assert task.reject_on_worker_lost
        assert task.retry_backoff
        assert task.retry_backoff_max == 600
        assert task.max_retries == tasks.SUMMARIZE_MAX_RETRIES
        assert task.soft_time_limit < task.time_limit

    def test_a_transient_error_is_retried_then_succeeds(self, session, fake_llm):
        append(session, 25)
        fake_llm.fail(503)
        fake_llm.fail(500)
        fake_llm.reply("Third time lucky.")

        result = tasks.summarize_session.apply(args=[str(session.pk)])

        assert result.get() == 15
        assert len(fake_llm.requests) == 3
        assert Summary.objects.get(session=session).text == "Third time lucky."

    def test_it_gives_up_after_max_retries_and_leaves_it_to_the_sweep(self, session, fake_llm):
        append(session, 25)
        for _ in range(tasks.SUMMARIZE_MAX_RETRIES + 1):
            fake_llm.fail(500)

        result = tasks.summarize_session.apply(args=[str(session.pk)])

        assert result.failed()
        assert isinstance(result.result, LLMTransientError)
        assert len(fake_llm.requests) == tasks.SUMMARIZE_MAX_RETRIES + 1
        assert Summary.objects.count() == 0
        assert fresh(session).summary_requested_at is not None  # pending: the sweep's to redo

    def test_a_permanent_error_is_not_retried(self, session, fake_llm):
        append(session, 25)
        Session.objects.filter(pk=session.pk).update(summary_requested_at=None)
        fake_llm.empty()

        result = tasks.summarize_session.apply(args=[str(session.pk)])

        assert result.failed()
        assert isinstance(result.result, LLMPermanentError)
        assert len(fake_llm.requests) == 1
        # Stamped, not cleared: the next try is the sweep's, not every following append's.
        assert fresh(session).summary_requested_at is not None


class TestTheSweep:
    def test_it_picks_up_a_session_whose_task_was_lost(
        self, session, enqueued, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks():  # the commit hook (the enqueue) is lost
            append(session, 25)
        assert fresh(session).summary_requested_at is not None
        assert enqueued == []

        assert summaries.summaries_sweep() == 0  # requested just now: the task may be running

        later = timezone.now() + summaries.REQUEST_STALE_AFTER + dt.timedelta(seconds=1)
        with django_capture_on_commit_callbacks(execute=True):
            assert summaries.summaries_sweep(now=later) == 1

        assert enqueued == [str(session.pk)]
        assert Summary.objects.get(session=session).through_seq == 15
        assert fresh(session).summary_requested_at is None

    def test_it_picks_up_a_session_never_enqueued(self, session, enqueued):
        append(session, 25)
        Session.objects.filter(pk=session.pk).update(summary_requested_at=None)

        assert tasks.summaries_sweep.apply().get() == 1
        assert summaries.summaries_sweep() == 0  # now requested: not twice
        assert fresh(session).summary_requested_at is not None

    def test_it_is_scheduled_in_code(self, settings):
        entry = settings.CELERY_BEAT_SCHEDULE["summaries-sweep"]
        assert entry["task"] == tasks.summaries_sweep.name
        assert entry["options"]["expire_seconds"] < entry["schedule"]


class TestTheEndpoints:
    def url(self, session, what="summary"):
        return f"/api/v1/sessions/{session.id}/{what}/"

    def test_there_is_no_summary_at_first(self, api, session):
        assert api.get(self.url(session)).status_code == 404

    def test_summarize_forces_one(self, api, session, django_capture_on_commit_callbacks):
        append(session, 12, tokens=1)

        with django_capture_on_commit_callbacks(execute=True):
            response = api.post(self.url(session, "summarize"))

        assert response.status_code == 202
        assert response.json()["task_id"]
        body = api.get(self.url(session)).json()
        assert body["through_seq"] == 2
        assert body["model"] == "offline"
        assert set(body) == {"text", "through_seq", "token_count", "model", "created_at"}

    def test_put_sets_it_through_the_last_message_and_replaces_on_repeat(self, api, session):
        append(session, 3)

        first = api.put(self.url(session), {"text": "Hand-written."}, format="json")
        second = api.put(self.url(session), {"text": "Better."}, format="json")

        assert (first.status_code, second.status_code) == (200, 200)
        assert second.json()["through_seq"] == 3
        assert second.json()["model"] == "manual"
        assert api.get(self.url(session)).json()["text"] == "Better."
        assert Summary.objects.filter(session=session).count() == 1
        assert fresh(session).summarized_tokens == 3 * TOKENS_PER_MESSAGE

    def test_put_validates_the_text(self, api, session):
        assert api.put(self.url(session), {}, format="json").status_code == 400
        assert api.put(self.url(session), {"text": ""}, format="json").status_code == 400

    def test_a_read_only_key_cannot_write(self, read_only_api, session):
        assert read_only_api.post(self.url(session, "summarize")).status_code == 403
        assert read_only_api.put(self.url(session), {"text": "x"}, format="json").status_code == 403

    def test_an_outsider_gets_404_everywhere(self, api, outsider_api, session):
        api.put(self.url(session), {"text": "Private."}, format="json")

        assert outsider_api.get(self.url(session)).status_code == 404
        assert outsider_api.put(self.url(session), {"text": "x"}, format="json").status_code == 404
        assert outsider_api.post(self.url(session, "summarize")).status_code == 404
        assert Summary.objects.get(session=session).text == "Private."

    def test_the_context_includes_the_summary_when_history_is_cut(self, api, session):
        append(session, 30)
        summaries.session_summarize(session_id=session.pk)

        cut = api.get(f"/api/v1/sessions/{session.id}/context/", {"max_messages": 5}).json()
        whole = api.get(f"/api/v1/sessions/{session.id}/context/", {"max_messages": 100}).json()

        assert "Earlier Conversation (summary)" in cut["content"]
        assert "- User: Message 0:" in cut["content"]
        assert "Earlier Conversation (summary)" not in whole["content"]


class TestRecentMessagesOverTheThreshold:
    def test_no_summary_is_requested_when_only_kept_messages_are_left(
        self, session, enqueued, django_capture_on_commit_callbacks
    ):
        """Ten kept messages of 50 tokens each are over the threshold (100) on their own, but
        a run could fold nothing: no request, so no run that folds nothing and asks again."""
        with django_capture_on_commit_callbacks(execute=True):
            append(session, 5)  # 50 tokens: under
            append(session, 10, start=5, tokens=50)  # 550: over, and seqs 1-5 can be folded

        assert len(enqueued) == 1
        assert Summary.objects.get(session=session).through_seq == 5
        assert fresh(session).summarized_seq == 5
        assert fresh(session).summary_requested_at is None
        assert summaries.summaries_sweep() == 0  # the kept ten alone: nothing to fold
        assert len(enqueued) == 1

    def test_the_next_message_makes_one_more_foldable(
        self, session, enqueued, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True):
            append(session, 5)
            append(session, 10, start=5, tokens=50)
        with django_capture_on_commit_callbacks(execute=True):
            append(session, 1, start=15, tokens=50)

        assert len(enqueued) == 2
        assert Summary.objects.filter(session=session).latest("through_seq").through_seq == 6
