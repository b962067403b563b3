"""Importing an sclaw `memory.db` through `manage.py import_memory --format sclaw`.

Each store is built in tmp_path from sclaw's own schema (fixtures/sclaw/schema.sql) and one
data file of that directory, so what a test reads is plain SQL next to it.
"""

from __future__ import annotations

import datetime as dt
import io
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command

from facts_app.models import Fact
from memoryhub.accounts.models import EndUser, Tenant
from memoryhub.transfer.formats.sclaw import read
from memoryhub.transfer.models import ImportedRecord
from memoryhub.transfer.types import ImportedSession
from sessions_app.models import Message, Session, StateEntry, Summary

FIXTURES = Path(__file__).parent / "fixtures" / "sclaw"
UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def build_store(*, path: Path, data_file: str) -> Path:
    """A memory.db as sclaw leaves it (WAL mode, schema version 1) holding `data_file`'s rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.executescript((FIXTURES / "schema.sql").read_text())
        connection.executescript((FIXTURES / data_file).read_text())
        connection.commit()
    finally:
        connection.close()
    return path


def import_memory(*, path: Path, tenant: Tenant, dry_run: bool = False) -> list[str]:
    out = io.StringIO()
    options = ["--dry-run"] if dry_run else []
    call_command(
        "import_memory",
        str(path),
        "--tenant",
        tenant.slug,
        "--format",
        "sclaw",
        "--no-progress",
        *options,
        stdout=out,
    )
    return out.getvalue().splitlines()


@pytest.fixture
def good_store(tmp_path: Path) -> Path:
    return build_store(path=tmp_path / "memory.db", data_file="good.sql")


def messages_of(session: Session) -> list[tuple[int, str, str, dt.datetime]]:
    return [
        (m.seq, m.role, m.content, m.created_at)
        for m in Message.objects.filter(session=session).order_by("seq")
    ]


# --- the good store ---------------------------------------------------------------------------


def test_the_good_store_lands_whole(tenant: Tenant, good_store: Path) -> None:
    lines = import_memory(path=good_store, tenant=tenant)

    assert lines == [
        "facts: imported 5, already there 0, skipped 0",
        "sessions: imported 3, already there 0, skipped 0",
        "Imported 8 records; 0 skipped (listed above).",
    ]
    sessions = {s.external_key: s for s in Session.objects.for_tenant(tenant)}
    assert set(sessions) == {
        "telegram:123456789:",
        "discord:998877665544:1122334455",
        "slack:C024BE91L:1709370000.000100",
    }

    telegram = sessions["telegram:123456789:"]
    assert telegram.end_user.external_id == "telegram:123456789"
    assert telegram.agent_id == ""
    assert telegram.metadata == {"channel": "telegram", "chat_id": "123456789", "thread_id": ""}
    assert telegram.created_at == at("2025-03-01T09:30:00+00:00")
    assert telegram.last_active_at == at("2025-03-01T10:15:02+00:00")
    assert (telegram.message_count, telegram.last_seq, telegram.summarized_seq) == (6, 6, 4)
    assert messages_of(telegram) == [
        (1, "user", "Hi, I'm Alice. What's the weather in Lyon?", at("2025-03-01T09:30:00Z")),
        (2, "assistant", "", at("2025-03-01T09:30:01.250Z")),
        (3, "tool", '{"temp_c": 14, "sky": "cloudy"}', at("2025-03-01T09:30:02Z")),
        (4, "assistant", "It is 14 °C and cloudy in Lyon.", at("2025-03-01T09:30:03.500Z")),
        (5, "user", "And tomorrow?", at("2025-03-01T10:15:00Z")),
        (6, "assistant", "Tomorrow: sunny, 17 °C.", at("2025-03-01T10:15:02Z")),
    ]
    call, result = Message.objects.filter(session=telegram, seq__in=[2, 3]).order_by("seq")
    assert call.tool_calls == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city":"Lyon"}'},
        }
    ]
    assert (result.name, result.tool_call_id, result.tool_calls) == ("weather", "call_1", None)
    summary = Summary.objects.get(session=telegram)
    assert (summary.text, summary.through_seq, summary.model, summary.created_at) == (
        "Alice asked for the weather in Lyon: 14 °C and cloudy.",
        4,
        "sclaw",
        at("2025-03-01T09:45:00Z"),
    )

    discord = sessions["discord:998877665544:1122334455"]
    assert discord.end_user.external_id == "discord:998877665544"
    assert discord.metadata["thread_id"] == "1122334455"
    assert [m[:2] for m in messages_of(discord)] == [(1, "user"), (2, "assistant"), (3, "tool")]
    assert Message.objects.get(session=discord, seq=3).metadata == {"is_error": True}
    assert Message.objects.get(session=discord, seq=2).metadata == {}
    assert not Summary.objects.filter(session=discord).exists()
    assert sessions["slack:C024BE91L:1709370000.000100"].end_user.external_id == "slack:C024BE91L"
    assert not StateEntry.objects.exists()  # sclaw keeps no per-session state

    facts = {f.content: f for f in Fact.objects.for_tenant(tenant)}
    alice = facts["User's name is Alice"]
    assert alice.end_user == telegram.end_user
    assert (alice.tags, alice.source_session_id) == (["personal"], telegram.pk)
    assert alice.metadata == {
        "category": "personal",
        "confidence": "high",
        "sclaw_source": "telegram:123456789:",
        "sclaw_fact_id": "20250301T093004-0",  # sclaw's own id stays visible
    }
    assert alice.external_id == "sclaw:20250301T093004-0"  # ...and is the API's fact id
    assert alice.created_at == dt.datetime(2025, 3, 1, 9, 30, 4, 123456, tzinfo=UTC)
    lyon = facts["User lives in Lyon"]
    assert (lyon.tags, lyon.metadata) == (
        [],
        {"sclaw_source": "telegram:123456789:", "sclaw_fact_id": "20250301T093004-1"},
    )
    standup = facts["Team standup is at 10:00"]
    assert (standup.end_user, standup.source_session_id) == (discord.end_user, discord.pk)
    assert standup.created_at == at("2025-03-02T08:00:04Z")  # +01:00 kept as the same instant
    falcon = facts["The product is called Falcon"]
    assert (falcon.end_user, falcon.source_session_id, falcon.metadata) == (
        None,
        None,
        # What sclaw's extractor writes (an empty source): tenant-wide, sclaw's id kept.
        {"category": "project", "sclaw_fact_id": "20250303T120000-0"},
    )
    # An old session UUID as the source names no person: tenant-wide, its source kept.
    french = facts["Prefers answers in French"]
    assert (french.end_user, french.source_session_id) == (None, None)
    assert french.metadata == {
        "sclaw_source": "0195f1c2-7b7e-7c4a-9d1e-3f0a1b2c3d4e",
        "sclaw_fact_id": "20250304T120000-0",
    }
    assert set(EndUser.objects.filter(tenant=tenant).values_list("external_id", flat=True)) == {
        "telegram:123456789",
        "discord:998877665544",
        "slack:C024BE91L",
    }


def test_running_the_same_import_again_adds_nothing(tenant: Tenant, good_store: Path) -> None:
    import_memory(path=good_store, tenant=tenant)

    lines = import_memory(path=good_store, tenant=tenant)

    assert lines == [
        "facts: imported 0, already there 5, skipped 0",
        "sessions: imported 0, already there 3, skipped 0",
        "Imported 0 records; 0 skipped (listed above).",
    ]
    assert (Session.objects.count(), Message.objects.count(), Summary.objects.count()) == (3, 11, 1)
    assert Fact.objects.count() == 5


def test_a_dry_run_counts_the_same_and_keeps_nothing(tenant: Tenant, good_store: Path) -> None:
    lines = import_memory(path=good_store, tenant=tenant, dry_run=True)

    assert lines == [
        "facts: would import 5, already there 0, skipped 0",
        "sessions: would import 3, already there 0, skipped 0",
        "Dry run: would import 8 records; 0 skipped (listed above).",
    ]
    assert Session.objects.count() == Message.objects.count() == Summary.objects.count() == 0
    assert Fact.objects.count() == EndUser.objects.count() == ImportedRecord.objects.count() == 0
    # ...and the real import that follows finds everything still to do.
    assert import_memory(path=good_store, tenant=tenant)[:2] == [
        "facts: imported 5, already there 0, skipped 0",
        "sessions: imported 3, already there 0, skipped 0",
    ]


def test_importing_into_one_tenant_leaves_another_untouched(
    tenant: Tenant, other_tenant: Tenant, good_store: Path
) -> None:
    import_memory(path=good_store, tenant=tenant)

    assert not Session.objects.filter(tenant=other_tenant).exists()
    assert not Fact.objects.filter(tenant=other_tenant).exists()
    assert not EndUser.objects.filter(tenant=other_tenant).exists()
    # The same store into the other tenant is a first import there, not "already there".
    lines = import_memory(path=good_store, tenant=other_tenant)
    assert lines[:2] == [
        "facts: imported 5, already there 0, skipped 0",
        "sessions: imported 3, already there 0, skipped 0",
    ]
    assert Session.objects.filter(tenant=tenant).count() == 3
    assert Message.objects.filter(tenant=tenant).count() == 11
    assert {s.tenant_id for s in Session.objects.filter(external_key="telegram:123456789:")} == {
        tenant.pk,
        other_tenant.pk,
    }


def test_the_reader_streams(good_store: Path) -> None:
    items = read(good_store)

    assert isinstance(items, Iterator)
    session = next(items)
    assert isinstance(session, ImportedSession)
    # Messages are read from the store as they are consumed, not held in a list.
    assert isinstance(session.messages, Iterator)


# --- broken stores ------------------------------------------------------------------------------


def test_a_fact_with_broken_metadata_is_skipped_and_the_rest_imported(
    tenant: Tenant, tmp_path: Path
) -> None:
    store = build_store(path=tmp_path / "memory.db", data_file="broken_fact_metadata.sql")

    lines = import_memory(path=store, tenant=tenant)

    assert lines == [
        "facts: imported 1, already there 0, skipped 2",
        "sessions: imported 1, already there 0, skipped 0",
        "skipped facts at memory.db:facts:1: fact 20250401T120002-0: metadata is not valid JSON: "
        "Unterminated string starting at: line 1 column 14 (char 13).",
        "skipped facts at memory.db:facts:2: fact 20250401T120002-1: tags is not a JSON array "
        "of texts.",
        "Imported 2 records; 2 skipped (listed above).",
    ]
    assert list(Fact.objects.values_list("content", "metadata")) == [
        (
            "User likes lentils",
            {
                "category": "preference",
                "sclaw_source": "telegram:42:",
                "sclaw_fact_id": "20250401T120002-2",
            },
        )
    ]
    assert Message.objects.count() == 2


def test_a_message_with_an_unknown_role_is_kept_under_a_known_one_and_reported(
    tenant: Tenant, tmp_path: Path
) -> None:
    store = build_store(path=tmp_path / "memory.db", data_file="unknown_role.sql")

    lines = import_memory(path=store, tenant=tenant)

    assert lines == [
        "sessions: imported 1, already there 0, skipped 0",
        "changed messages at memory.db:messages:1: message 2: the role 'developer' is stored as "
        "'system' (the original is in its metadata as source_role).",
        "Imported 1 records; 0 skipped, 1 changed (listed above).",
    ]
    session = Session.objects.get()
    assert [m[:3] for m in messages_of(session)] == [
        (1, "user", "Plan my week."),
        (2, "system", "Be terse."),
        (3, "assistant", "Mon: gym. Tue: read."),
        (4, "user", "Add swimming on Wednesday."),
        (5, "assistant", "Done: Wed: swimming."),
    ]
    assert Message.objects.get(session=session, seq=2).metadata == {"source_role": "developer"}
    # The summary covers what it covered (sclaw's messages 1 to 3).
    assert Summary.objects.get().through_seq == 3
    assert session.summarized_seq == 3


def test_a_summary_for_a_session_without_messages_is_skipped(
    tenant: Tenant, tmp_path: Path
) -> None:
    store = build_store(path=tmp_path / "memory.db", data_file="orphan_summary.sql")

    lines = import_memory(path=store, tenant=tenant)

    assert lines == [
        "sessions: imported 1, already there 0, skipped 0",
        "summaries: imported 0, already there 0, skipped 1",
        "skipped summaries at memory.db:summaries:2: the store has no messages for "
        "'telegram:77:'; a summary comes only with its session.",
        "Imported 1 records; 1 skipped (listed above).",
    ]
    summary = Summary.objects.get()
    assert (summary.session.external_key, summary.text, summary.through_seq) == (
        "telegram:42:",
        "They greeted each other.",
        2,
    )
    assert not Session.objects.filter(external_key="telegram:77:").exists()
    # The summary was written after the last message: that was the session's last activity.
    assert summary.session.last_active_at == at("2025-04-01T12:01:00Z")


def test_unknown_columns_and_tables_are_ignored(tenant: Tenant, tmp_path: Path) -> None:
    store = build_store(path=tmp_path / "memory.db", data_file="unknown_columns.sql")

    lines = import_memory(path=store, tenant=tenant)

    assert lines == [
        "facts: imported 1, already there 0, skipped 0",
        "sessions: imported 1, already there 0, skipped 0",
        "Imported 2 records; 0 skipped (listed above).",
    ]
    session = Session.objects.get()
    assert [m[2] for m in messages_of(session)] == [
        "Remind me to call mum.",
        "I will remind you at 18:00.",
    ]
    assert Message.objects.get(seq=2).metadata == {}  # the `reaction` column is not carried
    assert Summary.objects.get().model == "sclaw"  # nor the summaries' new `model` column
    assert Fact.objects.get().source_session_id == session.pk


def test_values_of_the_wrong_shape_are_skipped_row_by_row(tenant: Tenant, tmp_path: Path) -> None:
    store = build_store(path=tmp_path / "memory.db", data_file="bad_values.sql")

    lines = import_memory(path=store, tenant=tenant)

    assert lines == [
        "facts: imported 1, already there 0, skipped 2",
        "messages: imported 0, already there 0, skipped 4",
        "sessions: imported 2, already there 0, skipped 0",
        "skipped messages at memory.db:messages:2: message 2: tool_calls is not valid JSON: "
        "Expecting ':' delimiter: line 1 column 48 (char 47).",
        "skipped messages at memory.db:messages:3: message 3: created_at 'yesterday evening' "
        "is not an ISO-8601 timestamp.",
        "skipped messages at memory.db:messages:4: message 4: content is a blob, not text.",
        "skipped messages at memory.db:messages:5: seq 'five' is not an integer.",
        "skipped facts at memory.db:facts:1: fact 20250402T190005-0: content is a blob, not text.",
        "skipped facts at memory.db:facts:2: fact 20250402T190005-1: created_at 'last tuesday' "
        "is not an ISO-8601 timestamp.",
        # A role sclaw does not write is stored under one MemoryHub knows, never skipped.
        "changed messages at memory.db:messages:7: message 1: the role 'robot' is stored as "
        "'assistant' (the original is in its metadata as source_role).",
        "Imported 3 records; 6 skipped, 1 changed (listed above).",
    ]
    robot = Session.objects.get(external_key="cli:local:")
    assert [(m.role, m.metadata) for m in robot.messages.all()] == [
        ("assistant", {"source_role": "robot"})
    ]
    session = Session.objects.get(external_key="whatsapp:+4912345:")
    assert [m[:3] for m in messages_of(session)] == [
        (1, "user", "Book a table for two."),
        (2, "assistant", "Booked for two at 20:00."),
    ]
    assert Fact.objects.get().content == "User books tables for two"


def test_a_table_without_a_needed_column_is_reported_once(tenant: Tenant, tmp_path: Path) -> None:
    store = build_store(path=tmp_path / "memory.db", data_file="missing_column.sql")

    lines = import_memory(path=store, tenant=tenant)

    assert lines == [
        "facts: imported 1, already there 0, skipped 0",
        "messages: imported 0, already there 0, skipped 1",
        "summaries: imported 0, already there 0, skipped 1",
        "skipped messages at memory.db:messages: the `messages` table has no column role.",
        "skipped summaries at memory.db:summaries:1: the messages table cannot be read; "
        "a summary comes only with its session.",
        "Imported 1 records; 2 skipped (listed above).",
    ]
    assert not Session.objects.exists()
    fact = Fact.objects.get()
    assert (fact.end_user.external_id, fact.source_session_id) == ("telegram:42", None)


def test_a_file_that_is_not_a_database_is_reported(tenant: Tenant, tmp_path: Path) -> None:
    store = tmp_path / "memory.db"
    store.write_text("session_id,seq,role\ntelegram:1:,1,user\n")

    lines = import_memory(path=store, tenant=tenant)

    assert lines == [
        "stores: imported 0, already there 0, skipped 1",
        "skipped stores at memory.db: not a readable SQLite database: file is not a database",
        "Imported 0 records; 1 skipped (listed above).",
    ]


def test_a_directory_without_a_store_is_reported(tenant: Tenant, tmp_path: Path) -> None:
    lines = import_memory(path=tmp_path, tenant=tenant)

    assert lines[1] == (
        f"skipped stores at {tmp_path}: no memory.db here, nor under agents/<name>/memory.db."
    )


# --- sclaw's per-agent layout -------------------------------------------------------------------


def test_a_data_directory_imports_every_agents_store(tenant: Tenant, tmp_path: Path) -> None:
    build_store(path=tmp_path / "agents" / "assistant" / "memory.db", data_file="good.sql")
    build_store(path=tmp_path / "agents" / "support" / "memory.db", data_file="second_agent.sql")

    lines = import_memory(path=tmp_path, tenant=tenant)

    assert lines == [
        "facts: imported 6, already there 0, skipped 0",
        "sessions: imported 4, already there 0, skipped 1",
        "skipped sessions at agents/support/memory.db:messages:3: external key "
        "'telegram:123456789:' already belongs to a session of this tenant.",
        "Imported 10 records; 1 skipped (listed above).",
    ]
    agents = dict(Session.objects.values_list("external_key", "agent_id"))
    assert agents["telegram:123456789:"] == "assistant"
    assert agents["telegram:555:"] == "support"
    # The two stores share a fact id: the agent keeps them apart.
    late = Fact.objects.get(content="Order 1234 is late")
    assert late.source_session_id == Session.objects.get(external_key="telegram:555:").pk
    assert late.external_id.startswith("sclaw:support/")
    assert import_memory(path=tmp_path, tenant=tenant)[:2] == [
        "facts: imported 0, already there 6, skipped 0",
        "sessions: imported 0, already there 4, skipped 1",
    ]


def test_one_agents_store_named_directly_keeps_its_agent(tenant: Tenant, tmp_path: Path) -> None:
    store = build_store(
        path=tmp_path / "agents" / "support" / "memory.db", data_file="second_agent.sql"
    )

    import_memory(path=store, tenant=tenant)

    assert set(Session.objects.values_list("agent_id", flat=True)) == {"support"}
