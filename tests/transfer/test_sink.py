"""The writer every importer shares: per-item transactions, idempotent re-runs, exact dry runs,
kept timestamps, and every rejected record reported with where it came from."""

from __future__ import annotations

import dataclasses
import datetime as dt

from facts_app.models import Fact, Note, UserMemory
from memoryhub.transfer.runner import import_items
from memoryhub.transfer.types import (
    ImportedFact,
    ImportedMemory,
    ImportedMemoryVersion,
    ImportedMessage,
    ImportedNote,
    ImportedNoteVersion,
    ImportedSession,
    ImportedStateEntry,
    ImportedSummary,
    Origin,
    Skipped,
)
from sessions_app.models import Message, Session, StateEntry, Summary

T0 = dt.datetime(2025, 3, 1, 9, 30, tzinfo=dt.UTC)


def a_session(source_id="s1", *, messages=3, **overrides) -> ImportedSession:
    fields = {
        "source_id": source_id,
        "origin": Origin("sessions.json", 2),
        "user_id": "telegram:42",
        "agent_id": "chat",
        "external_key": f"tg:{source_id}",
        "metadata": {"channel": "telegram"},
        "created_at": T0,
        "last_active_at": T0 + dt.timedelta(hours=1),
        "state": [ImportedStateEntry("mood", "curious"), ImportedStateEntry("step", 2)],
        "summaries": [ImportedSummary("They met.", through_seq=2, model="gpt", created_at=T0)],
        "messages": [
            ImportedMessage(
                role="user" if i % 2 == 0 else "assistant",
                content=f"hello {i}",
                created_at=T0 + dt.timedelta(minutes=i),
            )
            for i in range(messages)
        ],
    }
    return ImportedSession(**{**fields, **overrides})


def test_a_session_comes_in_whole_with_its_timestamps(tenant):
    report = import_items(tenant=tenant, source="test", items=[a_session()])

    assert dict(report.imported) == {"sessions": 1}
    session = Session.objects.get(tenant=tenant)
    assert (session.created_at, session.last_active_at) == (T0, T0 + dt.timedelta(hours=1))
    assert (session.last_seq, session.message_count, session.state_clock) == (3, 3, 2)
    assert session.end_user.external_id == "telegram:42"
    assert session.external_key == "tg:s1"
    messages = list(Message.objects.filter(session=session).order_by("seq"))
    assert [(m.seq, m.content, m.created_at) for m in messages] == [
        (1, "hello 0", T0),
        (2, "hello 1", T0 + dt.timedelta(minutes=1)),
        (3, "hello 2", T0 + dt.timedelta(minutes=2)),
    ]
    assert session.token_count == sum(m.token_count for m in messages) > 0
    assert list(StateEntry.objects.order_by("position").values_list("key", "value")) == [
        ("mood", "curious"),
        ("step", 2),
    ]
    summary = Summary.objects.get()
    assert (summary.through_seq, summary.created_at, summary.model) == (2, T0, "gpt")
    assert session.summarized_seq == 2
    assert session.extracted_seq == 3  # imported history is not mined again


def test_running_the_same_import_again_adds_nothing(tenant):
    first = import_items(tenant=tenant, source="test", items=[a_session()])
    second = import_items(tenant=tenant, source="test", items=[a_session()])

    assert (dict(first.imported), dict(second.already_there)) == ({"sessions": 1}, {"sessions": 1})
    assert Session.objects.count() == 1
    assert Message.objects.count() == 3


def test_a_purged_session_is_imported_again(tenant):
    import_items(tenant=tenant, source="test", items=[a_session()])
    Session.objects.all().delete()

    report = import_items(tenant=tenant, source="test", items=[a_session()])

    assert dict(report.imported) == {"sessions": 1}


def test_a_dry_run_counts_and_keeps_nothing(tenant):
    report = import_items(
        tenant=tenant,
        source="test",
        items=[a_session("a"), a_session("b", messages=0, summaries=[])],
        dry_run=True,
    )

    assert dict(report.imported) == {"sessions": 2}
    assert Session.objects.count() == Message.objects.count() == 0
    assert "sessions: would import 2, already there 0, skipped 0" in report.lines()


def test_a_bad_session_is_skipped_with_its_origin_and_the_rest_go_on(tenant):
    bad = a_session("bad", origin=Origin("sessions.json", 7), summaries=[])
    bad.messages = [
        ImportedMessage(role="user", content="beep", created_at=T0.replace(tzinfo=None))
    ]
    nul = a_session("nul", origin=Origin("x.jsonl", 9))
    nul.messages = [ImportedMessage(role="user", content="a\x00b")]
    early = a_session("early", summaries=[ImportedSummary("?", through_seq=99)])

    report = import_items(
        tenant=tenant,
        source="test",
        items=[
            bad,
            a_session("good"),
            nul,
            early,
            Skipped(kind="sessions", origin=Origin("t.md", 3), reason="bad header"),
        ],
    )

    assert dict(report.imported) == {"sessions": 1}
    reasons = {str(s.origin): s.reason for s in report.skipped}
    assert reasons["sessions.json:7"] == "message 1 time has no UTC offset."
    assert reasons["x.jsonl:9"] == "message 1 contains a NUL character."
    assert "outside 1-3" in reasons["sessions.json:2"]
    assert reasons["t.md:3"] == "bad header"
    assert Session.objects.count() == 1
    assert Message.objects.count() == 3  # nothing of the rejected sessions is left


def test_memories_facts_and_notes(tenant):
    items = [
        a_session("s1"),
        ImportedMemory(
            source_id="m1",
            origin=Origin("db", 1),
            key="favourite_tea",
            content="green",
            user_id="telegram:42",
            version=3,
            versions=[
                ImportedMemoryVersion(1, "black", T0),
                ImportedMemoryVersion(2, "oolong", T0),
            ],
            source_session_id="s1",
            created_at=T0,
        ),
        ImportedMemory(source_id="m2", origin=Origin("db", 2), key="Bad Key!", content="x"),
        ImportedFact(
            source_id="f-old",
            origin=Origin("db", 3),
            content="Lives in Paris",
            user_id="telegram:42",
            superseded_by_source_id="f-new",
            created_at=T0,
        ),
        ImportedFact(
            source_id="f-new",
            origin=Origin("db", 4),
            content="Lives in Berlin",
            user_id="telegram:42",
            source_session_id="s1",
            source_message_seqs=[1, 2],
            tags=["home"],
        ),
        ImportedNote(
            source_id="n1",
            origin=Origin("tape", 5),
            user_id="telegram:42",
            day=None,
            versions=[ImportedNoteVersion("v1", T0), ImportedNoteVersion("v2", T0)],
        ),
        ImportedNote(
            source_id="n2",
            origin=Origin("tape", 6),
            user_id="telegram:42",
            day=dt.date(2025, 3, 1),
            versions=[ImportedNoteVersion("did things")],
        ),
    ]

    report = import_items(tenant=tenant, source="test", items=items)

    assert dict(report.imported) == {"sessions": 1, "user_memories": 1, "facts": 2, "notes": 2}
    assert [str(s.origin) for s in report.skipped] == ["db:2"]
    memory = UserMemory.objects.get()
    assert (memory.content, memory.version, memory.created_at) == ("green", 3, T0)
    assert list(memory.versions.order_by("version").values_list("content", flat=True)) == [
        "black",
        "oolong",
    ]
    session = Session.objects.get()
    assert memory.source_session_id == session.pk
    old, new = (
        Fact.objects.get(content="Lives in Paris"),
        Fact.objects.get(content="Lives in Berlin"),
    )
    assert old.superseded_by_id == new.pk
    assert new.source_session_id == session.pk
    assert new.source_message_ids == list(
        Message.objects.filter(session=session, seq__in=[1, 2])
        .order_by("seq")
        .values_list("pk", flat=True)
    )
    long_term = Note.objects.filter(kind="long_term").order_by("version")
    assert list(long_term.values_list("version", "content")) == [(1, "v1"), (2, "v2")]
    assert list(Note.objects.filter(kind="daily").values_list("day", "content")) == [
        (dt.date(2025, 3, 1), "did things")
    ]


def test_an_import_masks_what_the_redaction_policy_asks_even_under_refuse(tenant):
    from memoryhub.accounts.models import AuditAction, AuditEvent, MemoryPolicy, RedactionMode

    # Refusing would drop the record, and an import loses nothing unsaid: it masks and reports.
    MemoryPolicy.objects.create(
        tenant=tenant, redaction_mode=RedactionMode.REFUSE, redact_email=True
    )
    secret = "write to jane@example.org"
    call = {"id": "c1", "type": "function", "function": {"name": "mail", "arguments": secret}}
    session = dataclasses.replace(
        a_session(messages=0, summaries=[], state=[]),
        messages=[
            ImportedMessage(role="user", content=secret, created_at=T0),
            ImportedMessage(role="assistant", content="ok", tool_calls=[call], created_at=T0),
        ],
    )
    fact = ImportedFact(
        source_id="f1", origin=Origin("facts.json", 1), content=secret, user_id="telegram:42"
    )

    report = import_items(tenant=tenant, source="test", items=[session, fact])

    assert dict(report.imported) == {"sessions": 1, "facts": 1}
    stored = list(Message.objects.order_by("seq"))
    assert stored[0].content == "write to [redacted:email]"
    assert stored[1].tool_calls[0]["function"]["arguments"] == "write to [redacted:email]"
    assert Fact.objects.get().content == "write to [redacted:email]"
    assert len([c for c in report.changed if "redaction policy" in c.change]) == 3
    assert AuditEvent.objects.filter(tenant=tenant, action=AuditAction.REDACT).count() == 3
    assert "jane@example.org" not in str(list(AuditEvent.objects.values("detail", "counts")))
