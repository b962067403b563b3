"""Importing PicoBot's store: its sessions.json snapshot, its SQLite database, or both
in its data directory, through `manage.py import_memory --format picobot`."""

from __future__ import annotations

import datetime as dt
import shutil
import sqlite3
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from facts_app.models import UserMemory
from memoryhub.accounts.models import EndUser, Tenant
from memoryhub.core.tokens import count_tokens
from memoryhub.transfer.formats import picobot
from memoryhub.transfer.models import ImportedRecord
from sessions_app.models import Message, Session, StateEntry, Summary

FIXTURES = Path(__file__).parent / "fixtures" / "picobot"
WHATSAPP = "whatsapp:4915112345678@s.whatsapp.net"
# The session both the snapshot and the database hold (the snapshot's copy is older).
SHARED_ID = "4f1e6c1a-2b7d-4c59-9a3e-0d5b8e7f1a21"


def utc(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=dt.UTC)


def make_database(path: Path, *, rows: str) -> Path:
    """A PicoBot database built with the seed's own schema, then the rows of a fixture."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    connection.executescript((FIXTURES / "schema.sql").read_text())
    connection.executescript((FIXTURES / rows).read_text())
    connection.close()
    return path


def run_import(path: Path, *, tenant: str = "acme", dry_run: bool = False) -> list[str]:
    out = StringIO()
    options = ["--dry-run"] if dry_run else []
    call_command(
        "import_memory",
        str(path),
        "--tenant",
        tenant,
        "--format",
        "picobot",
        "--no-progress",
        *options,
        stdout=out,
    )
    return out.getvalue().splitlines()


def session_by_source(tenant: Tenant, source_id: str) -> Session:
    return Session.objects.get(tenant=tenant, metadata__picobot_session_id=source_id)


def transcript(session: Session) -> list[tuple[int, str, str, str, dt.datetime]]:
    return [
        (m.seq, m.role, m.content, m.tool_call_id, m.created_at)
        for m in Message.objects.filter(session=session).order_by("seq")
    ]


@pytest.fixture
def good_database(tmp_path: Path) -> Path:
    return make_database(tmp_path / "store" / "conversations.db", rows="good.sql")


@pytest.fixture
def data_directory(tmp_path: Path) -> Path:
    """PicoBot's data/ before migration finished: a snapshot beside the database."""
    directory = tmp_path / "data"
    make_database(directory / "conversations.db", rows="good.sql")
    shutil.copy(FIXTURES / "good" / "sessions.json", directory / "sessions.json")
    return directory


# --- the good store -----------------------------------------------------------------------------
def test_it_imports_a_snapshot_with_its_conversations_and_user_ids(tenant):
    lines = run_import(FIXTURES / "good" / "sessions.json")

    assert lines == [
        "sessions: imported 3, already there 0, skipped 0",
        "Imported 3 records; 0 skipped (listed above).",
    ]
    assert set(EndUser.objects.filter(tenant=tenant).values_list("external_id", flat=True)) == {
        WHATSAPP,
        "ws:pk_3f9a",
        "tui:local",
    }
    session = session_by_source(tenant, "9c2d7b3e-5a14-4e8f-b6c1-3f0a2e9d8c47")
    assert session.end_user.external_id == "ws:pk_3f9a"
    assert (session.agent_id, session.external_key) == ("", None)
    # chrono's nanoseconds are cut to microseconds; a +01:00 offset is kept as the same instant.
    assert session.created_at == utc(2025, 2, 27, 18, 4, 11, 123456)
    assert session.last_active_at == utc(2025, 2, 27, 17, 6, 40, 500000)
    assert session.metadata == {
        "picobot_session_id": "9c2d7b3e-5a14-4e8f-b6c1-3f0a2e9d8c47",
        "channel_type": "websocket",
        "channel_id": "ws-conn-17",
        "permissions": {"capabilities": ["net:http"]},
        "session_state": {"AwaitingPermission": {"tool": "http_fetch", "request_id": "req-77"}},
    }
    # Snapshot messages have no time of their own: they take the session's.
    at = session.created_at
    assert transcript(session) == [
        (
            1,
            "user",
            'Fetch {the} "status" page for my 5" screen, then list C:\\Users\\me\\ [please] ☀️',
            "",
            at,
        ),
        (2, "assistant", "Fetching it.", "", at),
        (3, "tool", '{"status": "ok", "latency_ms": 42}', "call_http_1", at),
        (4, "assistant", "The status page says ok (42 ms), café open.", "", at),
    ]
    assert (session.last_seq, session.message_count) == (4, 4)
    tui = session_by_source(tenant, "c81f0a55-7e3b-4d2a-8f16-5b9e4c3d2a10")
    assert [role for _, role, *_ in transcript(tui)] == ["system", "user", "assistant"]
    assert tui.metadata["session_state"] == "Idle"
    # PicoBot's session state is a lifecycle flag, not key-value memory; it has no summaries.
    assert not StateEntry.objects.exists()
    assert not Summary.objects.exists()


def test_it_imports_a_database_with_summaries_and_memories(tenant, good_database):
    lines = run_import(good_database)

    assert lines == [
        "sessions: imported 3, already there 0, skipped 0",
        "user_memories: imported 2, already there 0, skipped 0",
        "Imported 5 records; 0 skipped (listed above).",
    ]
    session = session_by_source(tenant, SHARED_ID)
    assert session.end_user.external_id == WHATSAPP
    assert (session.created_at, session.last_active_at) == (
        utc(2025, 3, 1, 9, 30),
        utc(2025, 3, 1, 10, 5, 12, 345678),
    )
    assert session.metadata["channel_type"] == "whatsapp"  # decoded from '"whatsapp"'
    assert session.metadata["permissions"] == {
        "capabilities": ["memory:read:user", "memory:write:user"]
    }
    # In seq_order (the rows were written out of order), numbered from 1; the naive time is UTC.
    assert transcript(session) == [
        (1, "system", "You are PicoBot, a concise assistant.", "", utc(2025, 3, 1, 9, 30)),
        (2, "user", "What's the weather in Berlin?", "", utc(2025, 3, 1, 9, 31, 5)),
        (3, "assistant", "Let me check.", "", utc(2025, 3, 1, 9, 31, 6)),
        (4, "tool", '{"temp_c": 21, "sky": "clear"}', "call_weather_1", utc(2025, 3, 1, 9, 31, 7)),
        (5, "assistant", "It is 21 °C and clear in Berlin.", "", utc(2025, 3, 1, 9, 31, 9, 500000)),
    ]
    # PicoBot's token_estimate is not kept: MemoryHub counts with its own tokenizer.
    for message in Message.objects.filter(session=session):
        assert message.token_count == count_tokens(message.content)
    summary = Summary.objects.get(session=session)
    assert summary.text == "- The user asked about the weather in Berlin.\n- PicoBot looked it up."
    assert (summary.through_seq, summary.created_at) == (4, utc(2025, 3, 1, 10))
    session.refresh_from_db()
    assert session.summarized_seq == 4

    groceries = session_by_source(tenant, "b7e0c3d4-1a2b-4c3d-8e9f-0a1b2c3d4e5f")
    assert groceries.metadata["channel_type"] == "tui"  # plain text, kept as it is
    legacy = Summary.objects.get(session=groceries)  # from the inline sessions.summary column
    assert (legacy.text, legacy.through_seq, legacy.created_at) == (
        "Talked about the weekly groceries.",
        2,
        utc(2025, 2, 28, 20, 3),
    )
    silent = session_by_source(tenant, "e5a97c21-3f4d-4b6e-9c8a-7d6e5f4a3b2c")
    assert (silent.end_user.external_id, silent.message_count) == ("api:pk_live_ab12", 0)
    assert not Summary.objects.filter(session=silent).exists()

    city = UserMemory.objects.get(tenant=tenant, key="favourite_city")
    assert (city.end_user.external_id, city.content) == (WHATSAPP, "Berlin")
    assert (city.created_at, city.updated_at) == (utc(2025, 3, 1, 9, 35), utc(2025, 3, 2, 8))
    assert city.source_session_id == session.pk
    day = UserMemory.objects.get(tenant=tenant, key="shopping_day")
    assert (day.end_user.external_id, day.content, day.source_session_id) == (
        "tui:local",
        "Saturdays",
        None,
    )


def test_in_a_directory_the_database_wins_and_a_shared_session_comes_in_once(
    tenant, data_directory
):
    lines = run_import(data_directory)

    assert lines == [
        "sessions: imported 5, already there 0, skipped 0",
        "user_memories: imported 2, already there 0, skipped 0",
        "Imported 7 records; 0 skipped (listed above).",
    ]
    shared = Session.objects.filter(tenant=tenant, metadata__picobot_session_id=SHARED_ID)
    assert shared.count() == 1
    # The database's five messages, not the snapshot's older two.
    assert [content for _, _, content, *_ in transcript(shared.get())][-1] == (
        "It is 21 °C and clear in Berlin."
    )
    assert shared.get().message_count == 5
    assert set(
        Session.objects.filter(tenant=tenant).values_list("metadata__picobot_session_id", flat=True)
    ) == {
        SHARED_ID,
        "b7e0c3d4-1a2b-4c3d-8e9f-0a1b2c3d4e5f",
        "e5a97c21-3f4d-4b6e-9c8a-7d6e5f4a3b2c",
        "9c2d7b3e-5a14-4e8f-b6c1-3f0a2e9d8c47",
        "c81f0a55-7e3b-4d2a-8f16-5b9e4c3d2a10",
    }


def test_running_it_again_adds_nothing(tenant, data_directory):
    run_import(data_directory)
    counts = (Session.objects.count(), Message.objects.count(), Summary.objects.count())

    lines = run_import(data_directory)

    assert lines == [
        "sessions: imported 0, already there 5, skipped 0",
        "user_memories: imported 0, already there 2, skipped 0",
        "Imported 0 records; 0 skipped (listed above).",
    ]
    assert (Session.objects.count(), Message.objects.count(), Summary.objects.count()) == counts
    assert UserMemory.objects.count() == 2


def test_a_dry_run_keeps_nothing_and_counts_what_the_import_does(tenant, data_directory):
    dry = run_import(data_directory, dry_run=True)

    assert dry == [
        "sessions: would import 5, already there 0, skipped 0",
        "user_memories: would import 2, already there 0, skipped 0",
        "Dry run: would import 7 records; 0 skipped (listed above).",
    ]
    assert not Session.objects.exists()
    assert not Message.objects.exists()
    assert not UserMemory.objects.exists()
    assert not EndUser.objects.exists()
    assert not ImportedRecord.objects.exists()
    real = run_import(data_directory)
    assert real == [line.replace("would import", "imported") for line in dry[:2]] + [
        "Imported 7 records; 0 skipped (listed above)."
    ]


def test_it_keeps_to_its_tenant(tenant, other_tenant, data_directory):
    run_import(data_directory, tenant="acme")

    assert not Session.objects.filter(tenant=other_tenant).exists()
    assert not UserMemory.objects.filter(tenant=other_tenant).exists()
    assert not EndUser.objects.filter(tenant=other_tenant).exists()
    # Another tenant importing the same store gets its own copy; the first one's is untouched.
    acme_messages = Message.objects.filter(tenant=tenant).count()
    lines = run_import(data_directory, tenant="outsider")
    assert lines[0] == "sessions: imported 5, already there 0, skipped 0"
    assert Session.objects.filter(tenant=tenant).count() == 5
    assert Message.objects.filter(tenant=tenant).count() == acme_messages
    assert Session.objects.filter(tenant=other_tenant).count() == 5


# --- broken stores ------------------------------------------------------------------------------
def test_a_truncated_snapshot_keeps_the_sessions_before_the_cut(tenant):
    path = FIXTURES / "truncated.json"

    lines = run_import(path)

    assert lines == [
        "sessions: imported 1, already there 0, skipped 1",
        f"skipped sessions at {path}:30: the file ends inside this session: the snapshot is "
        "truncated.",
        "Imported 1 records; 1 skipped (listed above).",
    ]
    assert [content for _, _, content, *_ in transcript(session_by_source(tenant, SHARED_ID))] == [
        "What's the weather in Berlin?",
        "Let me check.",
    ]


def test_a_broken_snapshot_reports_each_bad_record_and_imports_the_rest(tenant):
    path = FIXTURES / "broken.json"

    lines = run_import(path)

    assert lines == [
        "messages: imported 0, already there 0, skipped 2",
        "sessions: imported 3, already there 0, skipped 4",
        f"skipped messages at {path}:17: session 'json-bad-messages': conversation[1] content "
        "is null, not text.",
        f"skipped messages at {path}:17: session 'json-bad-messages': conversation[3] "
        "tool_call_id is null, not text.",
        f"skipped sessions at {path}:34: user_id is a number, not text.",
        f"skipped sessions at {path}:49: not valid JSON: Expecting ',' delimiter.",
        f"skipped sessions at {path}:56: this session is text, not an object.",
        f"skipped sessions at {path}:57: created_at 'yesterday' is not an ISO 8601 time.",
        f"changed messages at {path}:17: message 2: the role 'Robot' is stored as 'assistant' "
        "(the original is in its metadata as source_role).",
        "Imported 3 records; 6 skipped, 1 changed (listed above).",
    ]
    assert set(
        Session.objects.filter(tenant=tenant).values_list("metadata__picobot_session_id", flat=True)
    ) == {"json-fine-1", "json-bad-messages", "json-fine-2"}
    kept = session_by_source(tenant, "json-bad-messages")
    assert [(seq, content) for seq, _, content, *_ in transcript(kept)] == [
        (1, "Keep me."),
        (2, "Beep."),
        (3, "Kept too."),
    ]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        (
            "not_a_snapshot.json",
            "1: not a PicoBot sessions.json snapshot: it must be a JSON object with a "
            "\"sessions\" list, not start with '['.",
        ),
        ("no_sessions.json", '1: no "sessions" list in this snapshot.'),
    ],
)
def test_a_file_that_is_not_a_snapshot_is_reported(tenant, name, reason):
    path = FIXTURES / name

    lines = run_import(path)

    assert lines == [
        "sessions: imported 0, already there 0, skipped 1",
        f"skipped sessions at {path}:{reason}",
        "Imported 0 records; 1 skipped (listed above).",
    ]
    assert not Session.objects.exists()


def test_a_damaged_database_reports_each_bad_row_and_imports_the_rest(tenant, tmp_path):
    db = make_database(tmp_path / "conversations.db", rows="broken.sql")

    lines = run_import(db)

    assert lines == [
        "messages: imported 0, already there 0, skipped 3",
        "sessions: imported 3, already there 0, skipped 2",
        "summaries: imported 0, already there 0, skipped 1",
        "user_memories: imported 1, already there 0, skipped 3",
        f"skipped messages at {db}:messages:3: content is a blob, not text.",
        f"skipped messages at {db}:messages:4: created_at 'yesterday' is not an ISO 8601 time.",
        f"skipped sessions at {db}:sessions:2: state_json is not JSON: Expecting value.",
        f"skipped sessions at {db}:sessions:3: created_at '01/03/2025 09:00' is not an ISO 8601 "
        "time.",
        f"skipped summaries at {db}:session_summaries:2: the session has no messages for this "
        "summary to cover.",
        f"skipped user_memories at {db}:user_memories:1: memory key 'Favourite Color' is not "
        "^[a-z][a-z0-9_]*$ of at most 64 characters.",
        f"skipped user_memories at {db}:user_memories:2: memory key 'system_prompt' starts with a "
        "reserved prefix (system_, internal_).",
        f"skipped user_memories at {db}:user_memories:3: content is a blob, not text.",
        f"skipped messages at {db}:messages:7: 2 row(s) of session 'gone', which is not in the "
        "sessions table.",
        f"changed messages at {db}:sessions:1: message 2: the role 'robot' is stored as "
        "'assistant' (the original is in its metadata as source_role).",
        "Imported 4 records; 9 skipped, 1 changed (listed above).",
    ]
    mixed = session_by_source(tenant, "mixed-1")
    assert [(seq, content) for seq, _, content, *_ in transcript(mixed)] == [
        (1, "Hello there."),
        (2, "Beep."),
        (3, "Hi! How can I help?"),
    ]
    # It covered ten messages; three are left, so it covers those.
    assert Summary.objects.get(session=mixed).through_seq == 3
    empty = session_by_source(tenant, "no-messages")
    assert not Summary.objects.filter(session=empty).exists()
    assert session_by_source(tenant, "fine-2").message_count == 1
    memory = UserMemory.objects.get(tenant=tenant)
    assert (memory.key, memory.content, memory.source_session_id) == ("pet_name", "Miso", mixed.pk)


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, user_id TEXT NOT NULL);",
            "table sessions lacks the seed's column(s) channel_type, channel_id, "
            "permissions_json, created_at, last_active, state_json, summary.",
        ),
        (
            "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT);",
            "not a PicoBot database: it has no sessions table.",
        ),
    ],
)
def test_a_database_without_the_seeds_schema_is_refused(tenant, tmp_path, schema, reason):
    db = tmp_path / "other.sqlite"
    connection = sqlite3.connect(db)
    connection.executescript(schema)
    connection.close()

    lines = run_import(db)

    assert lines[1] == f"skipped sessions at {db}: {reason}"
    assert not Session.objects.exists()


def test_a_directory_without_a_store_is_reported(tenant, tmp_path):
    (tmp_path / "notes.txt").write_text("not PicoBot")

    lines = run_import(tmp_path)

    assert lines[1] == (
        f"skipped sessions at {tmp_path}: no sessions.json and no SQLite database "
        "(conversations.db, *.db, *.sqlite, *.sqlite3) in this directory."
    )


# --- streaming ----------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk_chars", [1, 2, 3, 7, 64])
@pytest.mark.parametrize("name", ["good/sessions.json", "broken.json", "truncated.json"])
def test_the_snapshot_reads_the_same_in_chunks_of_any_size(db, monkeypatch, name, chunk_chars):
    # Escapes, quotes and brackets split across chunk boundaries must not change what is read.
    whole = list(picobot.read(FIXTURES / name))
    monkeypatch.setattr(picobot, "SNAPSHOT_CHUNK_CHARS", chunk_chars)

    assert list(picobot.read(FIXTURES / name)) == whole
