"""A bub tape (append-only JSONL with anchor-delimited memory zones) imported through
`manage.py import_memory --format bub`, from fixtures written after the seed's description."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

from django.core.management import call_command

from facts_app.models import Note
from memoryhub.accounts.models import EndUser, Tenant
from memoryhub.transfer.formats.bub import read, tape_name_for
from memoryhub.transfer.types import ImportedSession
from sessions_app.models import Message, Session, StateEntry, Summary

FIXTURES = Path(__file__).parent / "fixtures" / "bub"
GOOD = FIXTURES / "good"
BROKEN = FIXTURES / "broken"
TELEGRAM_TAPE = "5d41402abc4b2a76b9719d911017c592__telegram%3A4242.jsonl"


def at(clock: str, day: str = "2026-02-10") -> dt.datetime:
    return dt.datetime.fromisoformat(f"{day}T{clock}+00:00")


def import_seed003(path: Path, tenant: Tenant, *flags: str) -> list[str]:
    out = StringIO()
    call_command(
        "import_memory",
        str(path),
        "--tenant",
        tenant.slug,
        "--format",
        "bub",
        "--no-progress",
        *flags,
        stdout=out,
    )
    return out.getvalue().splitlines()


def session_of(tenant: Tenant, user_id: str) -> Session:
    return Session.objects.get(tenant=tenant, end_user__external_id=user_id)


def messages_of(session: Session) -> list[tuple[int, str, str, str, str, dt.datetime]]:
    return [
        (m.seq, m.role, m.content, m.name, m.tool_call_id, m.created_at)
        for m in Message.objects.filter(session=session).order_by("seq")
    ]


def skipped_lines(output: list[str]) -> list[str]:
    return [line for line in output if line.startswith("skipped ")]


def test_the_tape_name_comes_from_bubs_file_name_else_from_the_stem():
    assert tape_name_for(tape_path=Path(TELEGRAM_TAPE)) == "telegram:4242"
    assert tape_name_for(tape_path=Path("cli.jsonl")) == "cli"


def test_a_good_store_lands_whole(tenant):
    output = import_seed003(GOOD, tenant)

    assert output == [
        "events: imported 0, already there 0, skipped 1",
        "notes: imported 4, already there 0, skipped 0",
        "sessions: imported 2, already there 0, skipped 0",
        f"skipped events at {TELEGRAM_TAPE}:4: 2 runtime event entries "
        "(loop.step.start, loop.step.finish) are not memory; not imported.",
        "Imported 6 records; 1 skipped (listed above).",
    ]
    # One end user per tape, named by the tape; the archived backup is not a tape.
    assert sorted(EndUser.objects.filter(tenant=tenant).values_list("external_id", flat=True)) == [
        "cli",
        "telegram:4242",
    ]
    assert not Message.objects.filter(content="an archived message").exists()

    chat = session_of(tenant, "telegram:4242")
    assert chat.agent_id == "bub"
    assert chat.metadata == {"tape": "telegram:4242", "start_state": {"owner": "human"}}
    assert (chat.created_at, chat.last_active_at) == (at("09:00:00"), at("09:13:00"))
    assert (chat.message_count, chat.last_seq) == (13, 13)
    assert messages_of(chat) == [
        (1, "user", "hello", "", "", at("09:01:00")),
        (2, "assistant", "Hi! How can I help?", "", "", at("09:01:05")),
        (3, "user", "remember: I like Python", "", "", at("09:02:00")),
        (4, "assistant", "", "", "", at("09:02:01")),
        (5, "tool", "saved to long-term memory", "memory_save", "call_1", at("09:02:02")),
        (6, "assistant", "Got it, I'll remember that!", "", "", at("09:02:03")),
        (7, "system", "Handoff: phase/intro done.", "", "", at("09:10:01")),
        (8, "user", "What is in this picture?", "", "", at("09:11:00")),
        (9, "assistant", "A cat asleep on a keyboard.", "", "", at("09:11:05")),
        (10, "assistant", "", "", "", at("09:12:00")),
        (11, "tool", "appended to daily notes", "memory_daily", "call_2", at("09:12:01")),
        (
            12,
            "tool",
            '{"long_term": "User likes Python", "days": ["2026-02-09", "2026-02-10"]}',
            "memory_recall",
            "call_3",
            at("09:12:01"),
        ),
        (13, "assistant", "Noted in today's notes. Lisbon it is!", "", "", at("09:12:05")),
    ]
    by_seq = {m.seq: m for m in Message.objects.filter(session=chat)}
    assert by_seq[4].tool_calls == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "memory_save", "arguments": '{"content": "User likes Python"}'},
        }
    ]
    assert [call["id"] for call in by_seq[10].tool_calls] == ["call_2", "call_3"]
    assert by_seq[8].metadata == {"tape_entry_id": 17, "omitted_parts": 1}
    assert by_seq[2].metadata == {"tape_entry_id": 6}  # the entry's meta is not imported
    # The handoff anchor, seen twice: its latest state, and a summary at each handoff.
    assert list(
        StateEntry.objects.filter(session=chat).order_by("position").values_list("key", "value")
    ) == [("anchor:phase/intro", {"summary": "Planned the Lisbon trip; noted it for today."})]
    assert list(
        Summary.objects.filter(session=chat)
        .order_by("through_seq")
        .values_list("through_seq", "text", "model", "created_at")
    ) == [
        (
            6,
            "The user said hello and asked me to remember that they like Python.",
            "bub handoff",
            at("09:10:00"),
        ),
        (13, "Planned the Lisbon trip; noted it for today.", "bub handoff", at("09:13:00")),
    ]
    assert chat.summarized_seq == 13

    # The seed's own format has no times: they come from the memory event's updated_at
    # (naive there, so UTC).
    cli = session_of(tenant, "cli")
    assert (cli.created_at, cli.last_active_at) == (at("07:30:00", "2026-02-09"),) * 2
    assert messages_of(cli) == [
        (1, "user", "Wie spät ist es in Tokio?", "", "", at("07:30:00", "2026-02-09")),
        (2, "assistant", "Dort ist es gerade 16:30 Uhr.", "", "", at("07:30:00", "2026-02-09")),
    ]

    # Every sealed zone is a version of the notes it changed, the winning zone (version 3) last:
    # the long-term note was "User likes Python" before zone 3 (zone 2 left it unchanged).
    notes = Note.objects.filter(tenant=tenant).order_by(
        "end_user__external_id", "kind", "day", "version"
    )
    assert [
        (n.end_user.external_id, n.kind, n.day, n.version, n.content, n.created_at) for n in notes
    ] == [
        ("cli", "long_term", None, 1, "Prefers answers in German.", at("07:30:00", "2026-02-09")),
        (
            "telegram:4242",
            "daily",
            dt.date(2026, 2, 9),
            1,
            "# 2026-02-09\n\n- Designed memory architecture",
            at("09:12:01"),
        ),
        (
            "telegram:4242",
            "daily",
            dt.date(2026, 2, 10),
            1,
            "# 2026-02-10\n\n- Planned the Lisbon trip",
            at("09:12:01"),
        ),
        ("telegram:4242", "long_term", None, 1, "User likes Python", at("09:02:02")),
        (
            "telegram:4242",
            "long_term",
            None,
            2,
            "User likes Python. Always use type hints.",
            at("09:12:01"),
        ),
    ]


def test_running_the_same_import_again_adds_nothing(tenant):
    import_seed003(GOOD, tenant)

    output = import_seed003(GOOD, tenant)

    assert output[:3] == [
        "events: imported 0, already there 0, skipped 1",
        "notes: imported 0, already there 4, skipped 0",
        "sessions: imported 0, already there 2, skipped 0",
    ]
    assert output[-1] == "Imported 0 records; 1 skipped (listed above)."
    assert Session.objects.filter(tenant=tenant).count() == 2
    assert Message.objects.filter(tenant=tenant).count() == 15
    assert Note.objects.filter(tenant=tenant).count() == 5
    assert Summary.objects.filter(tenant=tenant).count() == 2


def test_a_dry_run_keeps_nothing_and_counts_what_the_import_does(tenant):
    dry = import_seed003(GOOD, tenant, "--dry-run")

    assert dry[:3] == [
        "events: would import 0, already there 0, skipped 1",
        "notes: would import 4, already there 0, skipped 0",
        "sessions: would import 2, already there 0, skipped 0",
    ]
    assert dry[-1] == "Dry run: would import 6 records; 1 skipped (listed above)."
    assert not Session.objects.filter(tenant=tenant).exists()
    assert not Note.objects.filter(tenant=tenant).exists()
    assert not EndUser.objects.filter(tenant=tenant).exists()

    real = import_seed003(GOOD, tenant)

    assert [line.replace("would import", "imported") for line in dry[:-1]] == real[:-1]


def test_a_truncated_line_and_entries_of_the_wrong_shape_are_skipped_the_rest_imported(tenant):
    output = import_seed003(BROKEN / "truncated.jsonl", tenant)

    assert skipped_lines(output) == [
        "skipped entries at truncated.jsonl:3: not valid JSON, truncated or damaged: "
        "Unterminated string starting at (column 74).",
        "skipped entries at truncated.jsonl:5: `id` must be an integer, not a string.",
        "skipped entries at truncated.jsonl:6: `payload` must be an object, not an array.",
        "skipped entries at truncated.jsonl:8: `results` must be an array, not a string.",
        "skipped entries at truncated.jsonl:10: not valid JSON, truncated or damaged: "
        "Unterminated string starting at (column 51).",
    ]
    assert "sessions: imported 1, already there 0, skipped 0" in output
    # No time anywhere in this tape: the import time stands in.
    assert [
        (seq, role, content)
        for seq, role, content, *_ in messages_of(session_of(tenant, "truncated"))
    ] == [
        (1, "user", "Can you book a table for two?"),
        (2, "assistant", "Booked for 8 pm at Casa Mia."),
        (3, "assistant", "beep"),  # role 'robot', kept in its metadata and reported
        (4, "user", "Thanks!"),
    ]
    assert [line for line in output if line.startswith("changed ")] == [
        "changed messages at truncated.jsonl:1: message 3: the role 'robot' is stored as "
        "'assistant' (the original is in its metadata as source_role)."
    ]


def test_an_unsealed_zone_is_reported_and_the_last_sealed_one_wins(tenant):
    output = import_seed003(BROKEN / "unsealed.jsonl", tenant)

    assert skipped_lines(output) == [
        "skipped notes at unsealed.jsonl:7: memory zone version 2 opened here is never sealed; "
        "not imported (bub reads sealed zones only)."
    ]
    assert "notes: imported 1, already there 0, skipped 1" in output
    assert list(
        Note.objects.filter(tenant=tenant).values_list("kind", "day", "content", "created_at")
    ) == [("long_term", None, "Prefers tea.", at("08:00:00", "2026-03-01"))]
    session = session_of(tenant, "unsealed")
    assert [content for _, _, content, *_ in messages_of(session)] == [
        "Actually I prefer green tea.",
        "Saving that.",
        "Are you there?",
        "Yes, sorry, I restarted.",
    ]


def test_unknown_kinds_are_skipped_and_unknown_fields_ignored(tenant):
    output = import_seed003(BROKEN / "unknown_kind.jsonl", tenant)

    assert skipped_lines(output) == [
        "skipped entries at unknown_kind.jsonl:3: unknown entry kind 'error'; not imported.",
        "skipped entries at unknown_kind.jsonl:4: unknown entry kind 'frobnicate'; not imported.",
    ]
    session = session_of(tenant, "unknown_kind")
    assert session.metadata["start_state"] == {"owner": "human", "channel": "discord"}
    assert [(role, content) for _, role, content, *_ in messages_of(session)] == [
        ("user", "Summarise my week."),
        ("assistant", "A calm week: two meetings, one trip."),
    ]


def test_memory_anchors_and_events_bub_cannot_read_are_reported(tenant):
    output = import_seed003(BROKEN / "bad_zone.jsonl", tenant)

    assert skipped_lines(output) == [
        "skipped notes at bad_zone.jsonl:2: memory.long_term event outside a memory zone; "
        "not imported.",
        "skipped notes at bad_zone.jsonl:3: memory/seal version 7 has no memory/open of the same "
        "version before it; not imported.",
        "skipped notes at bad_zone.jsonl:4: memory/open anchor has no integer state.version; "
        "its zone cannot be matched.",
        "skipped notes at bad_zone.jsonl:7: memory.daily event: `data.date` '10/02/2026' is not "
        "a YYYY-MM-DD date; not imported.",
        "skipped notes at bad_zone.jsonl:8: memory.daily event: `data.content` must be a string, "
        "not a number; not imported.",
    ]
    assert sorted(
        Note.objects.filter(tenant=tenant).values_list("kind", "day", "content"),
        key=lambda note: note[0],
    ) == [
        ("daily", dt.date(2026, 2, 12), "- Moved the meeting"),
        ("long_term", None, "Lives in Porto."),
    ]
    assert Message.objects.filter(tenant=tenant).count() == 2


def test_a_session_the_database_refuses_is_skipped_and_the_next_one_imported(tenant):
    output = import_seed003(BROKEN / "two_sessions.jsonl", tenant)

    assert skipped_lines(output) == [
        "skipped sessions at two_sessions.jsonl:1: message 1 contains a NUL character."
    ]
    session = Session.objects.get(tenant=tenant)
    assert [content for _, _, content, *_ in messages_of(session)] == [
        "Start over, please.",
        "Fresh start.",
    ]


def test_importing_into_one_tenant_leaves_another_untouched(tenant, other_tenant):
    import_seed003(GOOD, tenant)

    for model in (Session, Message, Note, EndUser, StateEntry, Summary):
        assert not model.objects.filter(tenant=other_tenant).exists(), model.__name__

    # Source ids are per tenant: the same store is new to another tenant.
    output = import_seed003(GOOD, other_tenant)

    assert "sessions: imported 2, already there 0, skipped 0" in output
    assert Session.objects.filter(tenant=tenant).count() == 2
    assert Session.objects.filter(tenant=other_tenant).count() == 2
    assert Message.objects.filter(tenant=tenant).count() == 15


def test_the_reader_streams_a_sessions_messages_from_the_file():
    items = read(GOOD / TELEGRAM_TAPE)

    first = next(items)

    assert isinstance(first, ImportedSession)
    assert isinstance(first.messages, Iterator)  # read while the sink writes, not held
    assert sum(1 for _ in first.messages) == 13
