"""Retention: what a tenant's policy says has expired goes, in batches, counted and audited;
what should stay (pinned memories, facts, live sessions, other tenants' rows) stays."""

from __future__ import annotations

import datetime as dt
import io
import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from facts_app.models import Fact, Note, UserMemory
from facts_app.services.facts import fact_create
from facts_app.services.memories import memory_save
from facts_app.services.notes import note_daily_append, note_long_term_save
from memoryhub.accounts.models import AuditEvent, IdempotencyRecord, MemoryPolicy
from memoryhub.core.locks import exclusive_run
from memoryhub.retention import prune as retention
from memoryhub.retention import tasks
from sessions_app.models import Message, Session, StateEntry, Summary
from sessions_app.services import (
    MessageInput,
    message_append_batch,
    session_create_or_get,
    state_set,
)
from sessions_app.summaries import summary_set

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
SECOND = dt.timedelta(seconds=1)


def conversation(tenant, *, user="u1", agent="chat", last_active: dt.datetime, messages=2):
    session, _ = session_create_or_get(tenant=tenant, user_id=user, agent_id=agent)
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[MessageInput(role="user", content=f"m{i}") for i in range(messages)],
    )
    state_set(tenant=tenant, session_id=session.pk, key="mood", value="ok")
    Message.objects.filter(session=session).update(created_at=last_active)
    Session.objects.filter(pk=session.pk).update(last_active_at=last_active)
    return Session.objects.get(pk=session.pk)


def exists(session: Session) -> bool:
    return Session.objects.filter(pk=session.pk).exists()


class TestTheNinetyDayBoundary:
    def test_one_second_either_side(self, tenant):
        gone = conversation(tenant, user="a", last_active=NOW - 90 * DAY - SECOND)
        kept = conversation(tenant, user="b", last_active=NOW - 90 * DAY + SECOND)

        report = retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert not exists(gone)
        assert exists(kept)
        assert report.as_dict() == {"messages": 2, "sessions": 1, "state_entries": 1}
        assert Message.objects.filter(session=kept).count() == 2

    def test_old_messages_of_a_live_session_go_and_the_session_stays(self, tenant):
        session = conversation(tenant, last_active=NOW - 100 * DAY, messages=3)
        message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[MessageInput(role="user", content="new")],
        )
        Session.objects.filter(pk=session.pk).update(last_active_at=NOW - DAY)

        report = retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert exists(session)
        assert list(Message.objects.filter(session=session).values_list("content", flat=True)) == [
            "new"
        ]
        assert report.as_dict() == {"messages": 3}
        # seqs stay gapless going forward: the counter is on the session, not the rows.
        created = message_append_batch(
            tenant=tenant, session_id=session.pk, messages=[MessageInput(role="user", content="x")]
        )
        assert created[0].seq == 5


class TestPolicies:
    def test_a_tenant_policy_of_one_day(self, tenant):
        MemoryPolicy.objects.create(tenant=tenant, retention_days=1)
        yesterday = conversation(tenant, user="a", last_active=NOW - DAY - SECOND)
        today = conversation(tenant, user="b", last_active=NOW - DAY + SECOND)

        retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert (exists(yesterday), exists(today)) == (False, True)

    def test_keep_forever(self, tenant):
        MemoryPolicy.objects.create(tenant=tenant, retention_days=None)
        ancient = conversation(tenant, last_active=NOW - 3650 * DAY)

        report = retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert exists(ancient)
        assert report.total == 0
        assert AuditEvent.objects.filter(object_type="retention").count() == 0

    def test_an_agent_override_has_its_own_age(self, tenant):
        MemoryPolicy.objects.create(tenant=tenant, retention_days=30)
        MemoryPolicy.objects.create(tenant=tenant, agent_id="audit-bot", retention_days=None)
        MemoryPolicy.objects.create(tenant=tenant, agent_id="kiosk", retention_days=2)
        chat = conversation(tenant, user="a", agent="chat", last_active=NOW - 31 * DAY)
        kept = conversation(tenant, user="b", agent="audit-bot", last_active=NOW - 999 * DAY)
        kiosk = conversation(tenant, user="c", agent="kiosk", last_active=NOW - 3 * DAY)
        fresh_kiosk = conversation(tenant, user="d", agent="kiosk", last_active=NOW - DAY)

        retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert [exists(s) for s in (chat, kept, kiosk, fresh_kiosk)] == [False, True, False, True]

    def test_other_tenants_are_untouched(self, tenant, other_tenant):
        MemoryPolicy.objects.create(tenant=other_tenant, retention_days=None)
        mine = conversation(tenant, last_active=NOW - 100 * DAY)
        theirs = conversation(other_tenant, last_active=NOW - 100 * DAY)

        retention.retention_prune(now=NOW)

        assert (exists(mine), exists(theirs)) == (False, True)


class TestWhatElseGoesAndWhatStays:
    def test_memories_notes_facts_summaries_and_idempotency_records(self, tenant):
        session = conversation(tenant, last_active=NOW - DAY, messages=30)
        end_user = session.end_user
        memory_save(
            tenant=tenant, end_user=end_user, key="old", content="x", expires_at=NOW - SECOND
        )
        memory_save(tenant=tenant, end_user=end_user, key="old", content="y")  # a version
        memory_save(
            tenant=tenant,
            end_user=end_user,
            key="pinned",
            content="x",
            pinned=True,
            expires_at=NOW - DAY,
        )
        memory_save(
            tenant=tenant, end_user=end_user, key="later", content="x", expires_at=NOW + DAY
        )
        UserMemory.objects.filter(key="old").update(expires_at=NOW - SECOND)
        fact_create(tenant=tenant, end_user=end_user, content="An old fact")
        Fact.objects.update(created_at=NOW - 999 * DAY)
        note_daily_append(
            tenant=tenant, end_user=end_user, content="old", day=(NOW - 31 * DAY).date()
        )
        note_daily_append(
            tenant=tenant, end_user=end_user, content="new", day=(NOW - 29 * DAY).date()
        )
        note_long_term_save(tenant=tenant, end_user=end_user, content="forever")
        Note.objects.update(created_at=NOW - 999 * DAY)
        old_summary = summary_set(tenant=tenant, session_id=session.pk, text="first")
        message_append_batch(
            tenant=tenant, session_id=session.pk, messages=[MessageInput(role="user", content="m")]
        )
        current = summary_set(tenant=tenant, session_id=session.pk, text="second")
        Summary.objects.update(created_at=NOW - 100 * DAY)
        IdempotencyRecord.objects.create(
            tenant=tenant,
            key="k1",
            scope="s",
            request_hash="h",
            response_status=201,
            response_body={},
        )
        IdempotencyRecord.objects.create(
            tenant=tenant,
            key="k2",
            scope="s",
            request_hash="h",
            response_status=201,
            response_body={},
        )
        IdempotencyRecord.objects.filter(key="k1").update(
            created_at=NOW - 25 * dt.timedelta(hours=1)
        )
        IdempotencyRecord.objects.filter(key="k2").update(
            created_at=NOW - 23 * dt.timedelta(hours=1)
        )

        dry = retention.retention_prune_tenant(tenant=tenant, now=NOW, dry_run=True)
        report = retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert report.as_dict() == {
            "daily_notes": 1,
            "idempotency_records": 1,
            "summaries": 1,
            "user_memories": 1,
            "user_memory_versions": 1,
        }
        assert dry.as_dict() == report.as_dict()
        assert set(UserMemory.objects.values_list("key", flat=True)) == {"pinned", "later"}
        assert Fact.objects.count() == 1
        assert sorted(Note.objects.values_list("content", flat=True)) == ["forever", "new"]
        assert list(Summary.objects.values_list("pk", flat=True)) == [current.pk]
        assert not Summary.objects.filter(pk=old_summary.pk).exists()
        assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["k2"]


class TestRuns:
    def test_a_run_is_audited_and_a_second_run_finds_nothing(self, tenant):
        conversation(tenant, last_active=NOW - 100 * DAY)

        first = retention.retention_prune(now=NOW)
        second = retention.retention_prune(now=NOW)

        assert first[0].total == 4
        assert second[0].total == 0
        event = AuditEvent.objects.get(object_type="retention")
        assert (event.action, event.actor_type, event.actor) == ("purge", "system", "retention")
        assert event.counts == {"messages": 2, "sessions": 1, "state_entries": 1}
        assert "sessions" in event.detail["cutoffs"]

    def test_the_dry_run_counts_exactly_what_the_run_deletes_and_deletes_nothing(self, tenant):
        for user in ("a", "b", "c"):
            conversation(tenant, user=user, last_active=NOW - 100 * DAY, messages=7)
        live = conversation(tenant, user="d", last_active=NOW - 100 * DAY, messages=5)
        Session.objects.filter(pk=live.pk).update(last_active_at=NOW)

        dry = retention.retention_prune_tenant(tenant=tenant, now=NOW, dry_run=True)
        assert Message.objects.count() == 26
        assert AuditEvent.objects.count() == 0
        report = retention.retention_prune_tenant(tenant=tenant, now=NOW, batch_size=4)

        assert (
            dry.as_dict()
            == report.as_dict()
            == {
                "messages": 26,
                "sessions": 3,
                "state_entries": 3,
            }
        )

    def test_small_batches_delete_everything(self, tenant):
        for user in range(5):
            conversation(tenant, user=str(user), last_active=NOW - 100 * DAY, messages=3)

        report = retention.retention_prune_tenant(tenant=tenant, now=NOW, batch_size=2)

        assert report.as_dict() == {"messages": 15, "sessions": 5, "state_entries": 5}
        assert Session.objects.count() == Message.objects.count() == StateEntry.objects.count() == 0

    def test_an_interrupted_run_audits_what_it_deleted(self, tenant, monkeypatch):
        conversation(tenant, last_active=NOW - 100 * DAY)
        original = retention._prune_simple

        def fail(**kwargs):
            raise RuntimeError("connection lost")

        monkeypatch.setattr(retention, "_prune_simple", fail)

        with pytest.raises(RuntimeError):
            retention.retention_prune_tenant(tenant=tenant, now=NOW)

        event = AuditEvent.objects.get(object_type="retention")
        assert event.counts == {"messages": 2, "sessions": 1, "state_entries": 1}
        monkeypatch.setattr(retention, "_prune_simple", original)


class TestTheTask:
    def test_it_applies_every_tenants_policy(self, tenant, other_tenant):
        conversation(tenant, last_active=timezone.now() - 91 * DAY)
        conversation(other_tenant, last_active=timezone.now() - 89 * DAY)

        result = tasks.retention_cleanup.apply().get()

        assert result == {tenant.slug: {"messages": 2, "sessions": 1, "state_entries": 1}}
        assert Session.objects.filter(tenant=other_tenant).count() == 1

    def test_a_second_run_while_one_holds_the_lock_does_nothing(self, tenant):
        conversation(tenant, last_active=timezone.now() - 91 * DAY)
        holding, release = threading.Event(), threading.Event()

        def hold_the_lock() -> None:
            # Another thread has its own database connection: a lock held elsewhere, as by a
            # run in another worker (PostgreSQL advisory locks are re-entrant per connection).
            try:
                with exclusive_run(tasks.RETENTION_LOCK) as acquired:
                    assert acquired
                    holding.set()
                    release.wait(timeout=30)
            finally:
                connection.close()

        holder = threading.Thread(target=hold_the_lock)
        holder.start()
        try:
            assert holding.wait(timeout=30)
            assert tasks.retention_cleanup.apply().get() is None
        finally:
            release.set()
            holder.join(timeout=30)

        assert Session.objects.count() == 1
        assert tasks.retention_cleanup.apply().get() is not None

    def test_it_is_on_the_beat_schedule_hourly_and_expires_before_the_next_run(self, settings):
        entry = settings.CELERY_BEAT_SCHEDULE["retention-cleanup"]
        assert entry["task"] == "sessions_app.tasks.retention_cleanup"
        assert entry["schedule"] == 3600
        assert entry["options"]["expire_seconds"] < entry["schedule"]
        assert tasks.retention_cleanup.acks_late


class TestTheCommand:
    def test_dry_run_then_run(self, tenant):
        conversation(tenant, last_active=timezone.now() - 91 * DAY)
        out = io.StringIO()

        call_command(
            "prune_memory", "--tenant", tenant.slug, "--dry-run", "--no-progress", stdout=out
        )
        assert "acme: would delete messages=2, sessions=1, state_entries=1" in out.getvalue()
        assert Session.objects.count() == 1

        call_command("prune_memory", "--tenant", tenant.slug, "--no-progress", stdout=out)
        assert "acme: deleted messages=2, sessions=1, state_entries=1" in out.getvalue()
        assert Session.objects.count() == 0
        event = AuditEvent.objects.get(object_type="retention")
        assert (event.actor_type, event.actor) == ("staff", "manage.py prune_memory")

    def test_an_unknown_tenant_is_an_error(self, tenant):
        with pytest.raises(CommandError, match="No such tenant: nope"):
            call_command("prune_memory", "--tenant", "nope")

    def test_it_shows_a_progress_bar(self, tenant, capsys):
        conversation(tenant, last_active=timezone.now() - 91 * DAY)

        call_command("prune_memory", stdout=io.StringIO())

        assert "deleting" in capsys.readouterr().err


def test_the_dry_run_counts_the_plans_and_tasks_that_go_with_a_session(tenant):
    from sessions_app.task_services import plan_create, task_context_create

    session = conversation(tenant, last_active=NOW - 100 * DAY)
    plan_create(tenant=tenant, plan_id="p1", goal_event="g", session_id=session.pk)
    task_context_create(
        tenant=tenant, task_id="t1", event_type="e", plan_id="p1", sub_tasks=["s1", "s2"]
    )
    task_context_create(tenant=tenant, task_id="t2", event_type="e", session_id=session.pk)

    dry = retention.retention_prune_tenant(tenant=tenant, now=NOW, dry_run=True)
    real = retention.retention_prune_tenant(tenant=tenant, now=NOW)

    assert dry.as_dict() == real.as_dict()
    assert real.counts["plans"] == 1
    assert real.counts["task_contexts"] == 2
    assert real.counts["sub_tasks"] == 2
