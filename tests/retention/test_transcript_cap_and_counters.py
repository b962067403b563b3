"""Seed 000's transcript cap (FIFO eviction of a session's oldest messages, as policy beside
retention by age) and seed 004's `Len`: a session's message_count and token_count stay exactly
what it stores after retention, a purge by age and an eviction."""

from __future__ import annotations

import datetime as dt
import io
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.management import call_command
from django.db import connections
from django.db.models import Sum
from django.utils import timezone

from memoryhub.accounts.models import AuditEvent, MemoryPolicy
from memoryhub.core.rls import rls_scope
from memoryhub.retention import prune as retention
from sessions_app.models import Message, Session
from sessions_app.prune import session_counters_recount
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get
from sessions_app.summaries import session_summary_due, summary_set
from tests.helpers import client_for

DAY = dt.timedelta(days=1)


def chat(tenant, *, user="u1", agent="chat", texts=("one", "two", "three")):
    session, _ = session_create_or_get(tenant=tenant, user_id=user, agent_id=agent)
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[MessageInput(role="user", content=text) for text in texts],
    )
    return Session.objects.get(pk=session.pk)


def assert_counters_true(session: Session) -> None:
    session.refresh_from_db()
    stored = Message.objects.filter(session=session)
    assert session.message_count == stored.count()
    assert session.token_count == (stored.aggregate(total=Sum("token_count"))["total"] or 0)


class TestCountersStayTrue:
    def test_retention_of_old_messages_3_shown_1_left(self, tenant):
        session = chat(tenant)
        old = timezone.now() - 100 * DAY
        Message.objects.filter(session=session, seq__lte=2).update(created_at=old)

        retention.retention_prune_tenant(tenant=tenant)

        assert Message.objects.filter(session=session).count() == 1
        assert_counters_true(session)
        assert session.message_count == 1

    def test_purge_older_than_keeps_them_true(self, tenant, make_key):
        session = chat(tenant, texts=("a b c d", "e", "f g"))
        Message.objects.filter(session=session, seq=1).update(created_at=timezone.now() - 10 * DAY)
        purge_api = client_for(make_key(tenant, scopes=["read", "write", "purge"])[1])

        response = purge_api.post(
            "/api/v1/purge/", {"scope": "older_than", "days": 5}, format="json"
        )

        assert response.status_code == 200, response.content
        assert_counters_true(session)
        assert purge_api.get(f"/api/v1/sessions/{session.pk}/").json()["message_count"] == 2

    def test_summarized_tokens_lose_what_the_summary_covered(self, tenant):
        session = chat(tenant)
        summary_set(tenant=tenant, session_id=session.pk, text="All of it.")
        Message.objects.filter(session=session, seq__lte=2).update(
            created_at=timezone.now() - 100 * DAY
        )

        retention.retention_prune_tenant(tenant=tenant)

        session.refresh_from_db()
        assert session.summarized_tokens == session.token_count  # all that is left is covered
        session = Session.objects.only(
            "tenant_id",
            "agent_id",
            "token_count",
            "summarized_tokens",
            "last_seq",
            "summarized_seq",
        ).get(pk=session.pk)
        assert not session_summary_due(session=session)


class TestTranscriptCap:
    def test_off_by_default(self, tenant):
        assert MemoryPolicy(tenant=tenant).transcript_cap is None
        MemoryPolicy.objects.create(tenant=tenant, transcript_max_messages=0)
        session = chat(tenant, texts=[f"m{i}" for i in range(5)])

        report = retention.retention_prune_tenant(tenant=tenant)

        assert report.transcript_evicted == 0
        assert Message.objects.filter(session=session).count() == 5

    def test_the_oldest_go_first_counted_and_audited(self, tenant):
        MemoryPolicy.objects.create(tenant=tenant, transcript_max_messages=3)
        capped = chat(tenant, texts=[f"m{i}" for i in range(7)])
        under = chat(tenant, user="u2", texts=["x", "y"])

        dry = retention.retention_prune_tenant(tenant=tenant, dry_run=True)
        report = retention.retention_prune_tenant(tenant=tenant, batch_size=2)

        assert dry.transcript_evicted == report.transcript_evicted == 4
        kept = Message.objects.filter(session=capped).order_by("seq")
        assert list(kept.values_list("content", flat=True)) == ["m4", "m5", "m6"]
        assert_counters_true(capped)
        assert_counters_true(under)
        assert Message.objects.filter(session=under).count() == 2
        event = AuditEvent.objects.get(tenant=tenant, object_type="retention")
        assert event.counts == {"messages": 4}
        assert event.detail["transcript_evicted"] == 4
        assert event.detail["cutoffs"]["transcript_cap"] == "3 messages"
        # Appends go on after the last seq, and a second run finds nothing to do.
        message_append_batch(
            tenant=tenant, session_id=capped.pk, messages=[MessageInput(role="user", content="m7")]
        )
        assert retention.retention_prune_tenant(tenant=tenant).transcript_evicted == 1
        assert list(kept.values_list("seq", flat=True)) == [6, 7, 8]
        assert retention.retention_prune_tenant(tenant=tenant).transcript_evicted == 0

    def test_a_pinned_session_keeps_its_whole_transcript(self, tenant):
        MemoryPolicy.objects.create(tenant=tenant, transcript_max_messages=2)
        pinned = chat(tenant, texts=[f"m{i}" for i in range(5)])
        Session.objects.filter(pk=pinned.pk).update(pinned=True)
        capped = chat(tenant, user="u2", texts=[f"m{i}" for i in range(5)])

        report = retention.retention_prune_tenant(tenant=tenant)

        assert report.transcript_evicted == 3
        assert Message.objects.filter(session=pinned).count() == 5
        assert Message.objects.filter(session=capped).count() == 2

    def test_an_agent_override_caps_its_own_sessions_only(self, tenant, other_tenant):
        MemoryPolicy.objects.create(tenant=tenant, agent_id="bot", transcript_max_messages=1)
        capped = chat(tenant, agent="bot")
        free = chat(tenant, agent="chat", user="u2")
        elsewhere = chat(other_tenant, agent="bot")

        retention.retention_prune_tenant(tenant=tenant)

        assert Message.objects.filter(session=capped).count() == 1
        assert Message.objects.filter(session=free).count() == 3
        assert Message.objects.filter(session=elsewhere).count() == 3


def test_recount_repairs_counters_that_drifted(tenant, other_tenant):
    session = chat(tenant)
    untouched = chat(other_tenant)
    # As retention used to leave them: messages gone, counters not told.
    Message.objects.filter(session=session, seq__lte=2).delete()
    out = io.StringIO()

    call_command("recount_sessions", "--tenant", tenant.slug, stdout=out)

    assert "acme: 1 session(s) corrected" in out.getvalue()
    assert_counters_true(session)
    assert_counters_true(untouched)
    assert session_counters_recount(tenant=tenant) == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_counters_stay_true_while_the_bot_appends_during_evictions(tenant):
    """Appends (which lock the session first) race the cap's batched deletes (which lock the
    session before its messages): no deadlock error escapes, and the counters end exact."""
    MemoryPolicy.objects.create(tenant=tenant, transcript_max_messages=5)
    session = chat(tenant, texts=[f"m{i}" for i in range(40)])
    stop = threading.Event()

    def append(index: int) -> int:
        try:
            # A thread's connection starts unscoped (row-level security, core.rls): as a request.
            with rls_scope(tenant_id=tenant.pk):
                for j in range(15):
                    message_append_batch(
                        tenant=tenant,
                        session_id=session.pk,
                        messages=[MessageInput(role="user", content=f"t{index}-{j}")],
                    )
            return 0
        finally:
            connections.close_all()

    def evict() -> int:
        evicted = 0
        try:
            with rls_scope(tenant_id=tenant.pk):
                while not stop.is_set():
                    evicted += retention.retention_prune_tenant(
                        tenant=tenant, batch_size=3
                    ).transcript_evicted
            return evicted
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=3) as pool:
        evictor = pool.submit(evict)
        appenders = [pool.submit(append, index) for index in range(2)]
        for future in appenders:
            future.result()
        stop.set()
        evictor.result()

    retention.retention_prune_tenant(tenant=tenant)
    assert_counters_true(session)
    assert session.message_count == 5
    assert session.last_seq == 70
