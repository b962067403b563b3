"""Issue 15, part A: every importer keeps every record, on stores built in each seed's format the
way a bot's owner would have them (awkward but valid data included): oversized tool outputs,
Markdown headings in replies, unknown roles, stores that grew since the first import, a tape's
zone history, a snapshot's tool calls, a kv.json over MemoryHub's cap, sclaw's fact ids. Whatever
is not stored exactly as the source has it is in the report; no conversation is dropped for one
record."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from facts_app.models import Note, UserMemory, UserMemoryVersion
from memoryhub.accounts.models import Tenant
from sessions_app.models import Message, Session, StateEntry
from sessions_app.services import state_set

UTC = dt.UTC
KB = 1024
PICOBOT_FIXTURES = Path(__file__).parent / "fixtures" / "picobot"


def run_import(path: Path, *, tenant: Tenant, fmt: str, dry_run: bool = False) -> list[str]:
    out = io.StringIO()
    options = ["--tenant", tenant.slug, "--format", fmt, "--no-progress"]
    if dry_run:
        options.append("--dry-run")
    call_command("import_memory", str(path), *options, stdout=out)
    return out.getvalue().splitlines()


def at(day: int, hour: int, minute: int = 0, second: int = 0) -> dt.datetime:
    return dt.datetime(2025, 4, day, hour, minute, second, tzinfo=UTC)


def stamp(value: dt.datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


# --- basic-session (seed 000) --------------------------------------------------------------------
S1 = "0196b96c-3a80-7e6e-9a16-4106cf6a6601"
S2 = "0196b96c-3a80-7e6e-9a16-4106cf6a6602"


def transcript_entry(role: str, when: dt.datetime, text: str) -> str:
    """One entry as BasicSessionStore appends it: header, blank line, text, blank line."""
    return f"### {role} — {stamp(when)}\n\n{text}\n\n"


def basic_store(
    root: Path,
    *,
    transcripts: dict[str, list[tuple[str, dt.datetime, str]]],
    kv: dict[str, dict[str, Any]] | None = None,
) -> Path:
    memory = root / "memory"
    (memory / "sessions").mkdir(parents=True, exist_ok=True)
    index = [
        {
            "id": session_id,
            "agent_id": "chat",
            "store_types": ["basic_session"],
            "created_at": stamp(at(1, 9)),
        }
        for session_id in transcripts
    ]
    (memory / "sessions.json").write_text(json.dumps({"sessions": index}, indent=2))
    for session_id, entries in transcripts.items():
        directory = memory / "sessions" / session_id
        directory.mkdir(exist_ok=True)
        (directory / "transcript.md").write_text(
            "".join(transcript_entry(*entry) for entry in entries), encoding="utf-8"
        )
        if kv and session_id in kv:
            (directory / "kv.json").write_text(json.dumps(kv[session_id], indent=2))
    return memory


def messages_of(session: Session) -> list[tuple[int, str, str]]:
    return list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "content")
    )


TOOL_OUTPUT = "".join(f"line {n:06d}: GET /api/items?page={n} -> 200 OK\n" for n in range(2400))


def test_a_120_kb_tool_output_is_kept_whole_and_said_to_be_over_the_api_limit(tenant, tmp_path):
    assert 100 * KB < len(TOOL_OUTPUT.encode()) < 120 * KB
    store = basic_store(
        tmp_path,
        transcripts={
            S1: [
                ("user", at(1, 9, 0, 1), "Fetch every page and show me the log."),
                ("tool", at(1, 9, 0, 5), TOOL_OUTPUT),
                ("assistant", at(1, 9, 0, 9), "All 2400 pages answered 200."),
            ]
        },
    )

    lines = run_import(store, tenant=tenant, fmt="basic-session")

    size = len(TOOL_OUTPUT.strip().encode())
    assert lines == [
        "sessions: imported 1, already there 0, skipped 0",
        f"changed messages at memory/sessions.json:3: message 2: {size} bytes, over the API's "
        f"limit of {64 * KB}; kept whole (the import limit is {256 * KB}).",
        "Imported 1 records; 0 skipped, 1 changed (listed above).",
    ]
    session = Session.objects.get(tenant=tenant)
    assert [m[:2] for m in messages_of(session)] == [(1, "user"), (2, "tool"), (3, "assistant")]
    assert Message.objects.get(session=session, seq=2).content == TOOL_OUTPUT.strip()


def test_over_the_import_limit_a_message_is_cut_with_a_marker_and_its_size(
    tenant, tmp_path, settings
):
    settings.MEMORYHUB_LIMITS = {**settings.MEMORYHUB_LIMITS, "IMPORT_MAX_CONTENT_BYTES": 80 * KB}
    store = basic_store(
        tmp_path,
        transcripts={
            S1: [
                ("user", at(1, 9, 0, 1), "Show me the log."),
                ("tool", at(1, 9, 0, 5), TOOL_OUTPUT),
                ("assistant", at(1, 9, 0, 9), "Done."),
            ]
        },
    )

    lines = run_import(store, tenant=tenant, fmt="basic-session")

    size = len(TOOL_OUTPUT.strip().encode())
    assert lines[1] == (
        f"changed messages at memory/sessions.json:3: message 2: {size} bytes, over the import "
        f"limit of {80 * KB}; stored cut, with a marker (metadata import_truncated)."
    )
    cut = Message.objects.get(seq=2)
    assert len(cut.content.encode()) <= 80 * KB
    assert cut.content.startswith("line 000000: GET /api/items?page=0 -> 200 OK\n")
    marker = re.search(
        r"\n\n\[… cut by the MemoryHub import: (\d+) bytes, the first (\d+) kept\]$", cut.content
    )
    assert marker is not None
    assert int(marker.group(1)) == size == cut.metadata["import_truncated"]["original_bytes"]
    assert int(marker.group(2)) == len(cut.content[: marker.start()].encode())
    assert cut.metadata["import_truncated"]["kept_bytes"] == len(cut.content.encode())
    # The conversation is whole: the messages after the cut one are there.
    assert Message.objects.filter(session=cut.session).count() == 3


def test_markdown_headings_in_a_reply_and_an_unknown_role_keep_the_session(tenant, tmp_path):
    reply = (
        "Here is the plan.\n\n### Step 1 — install\n\ncargo add tokio\n\n"
        "### Results\n\nAll green.\n\n### 2025-04-01 — notes\n\nnone"
    )
    store = basic_store(
        tmp_path,
        transcripts={
            S1: [
                ("user", at(1, 9, 0, 1), "How do I set it up?"),
                ("assistant", at(1, 9, 0, 4), reply),
                ("observation", at(1, 9, 0, 6), "build finished in 3.2s"),
                ("user", at(1, 9, 1), "Thanks!"),
            ]
        },
    )

    lines = run_import(store, tenant=tenant, fmt="basic-session")

    assert lines == [
        "sessions: imported 1, already there 0, skipped 0",
        "changed messages at memory/sessions.json:3: message 3: the role 'observation' is "
        "stored as 'assistant' (the original is in its metadata as source_role).",
        "Imported 1 records; 0 skipped, 1 changed (listed above).",
    ]
    session = Session.objects.get(tenant=tenant)
    assert messages_of(session) == [
        (1, "user", "How do I set it up?"),
        (2, "assistant", reply),
        (3, "assistant", "build finished in 3.2s"),
        (4, "user", "Thanks!"),
    ]
    assert Message.objects.get(session=session, seq=3).metadata == {"source_role": "observation"}


def test_a_grown_transcript_adds_its_new_messages_once_and_a_new_session(tenant, tmp_path):
    first = [
        ("user", at(1, 9, 0, 1), "ping"),
        ("assistant", at(1, 9, 0, 2), "pong"),
        ("user", at(1, 9, 0, 3), "ping"),  # the same text again: a message of its own
        ("assistant", at(1, 9, 0, 4), "pong"),
    ]
    store = basic_store(tmp_path, transcripts={S1: first})
    run_import(store, tenant=tenant, fmt="basic-session")
    session = Session.objects.get(tenant=tenant)
    tokens_before = session.token_count
    # The bot went on: two more messages, and a new session.
    grown = [*first, ("user", at(2, 8), "ping"), ("assistant", at(2, 8, 0, 1), "pong again")]
    basic_store(tmp_path, transcripts={S1: grown, S2: [("user", at(3, 8), "new chat")]})

    dry = run_import(store, tenant=tenant, fmt="basic-session", dry_run=True)
    lines = run_import(store, tenant=tenant, fmt="basic-session")

    assert dry[:2] == [
        "sessions: would import 1, already there 1, skipped 0",
        "messages would add to records imported before: 2",
    ]
    assert lines[:2] == [
        "sessions: imported 1, already there 1, skipped 0",
        "messages added to records imported before: 2",
    ]
    session.refresh_from_db()
    assert [m[1:] for m in messages_of(session)] == [
        ("user", "ping"),
        ("assistant", "pong"),
        ("user", "ping"),
        ("assistant", "pong"),
        ("user", "ping"),
        ("assistant", "pong again"),
    ]
    assert (session.last_seq, session.message_count) == (6, 6)
    assert session.token_count > tokens_before
    assert session.last_active_at == at(2, 8, 0, 1)
    assert session.extracted_seq == 6  # imported history is not mined
    # A third run finds nothing new.
    assert run_import(store, tenant=tenant, fmt="basic-session")[:2] == [
        "sessions: imported 0, already there 2, skipped 0",
        "Imported 0 records; 0 skipped (listed above).",
    ]
    assert Message.objects.filter(session=session).count() == 6


def test_a_store_that_evicted_its_oldest_entries_adds_only_the_new_ones(tenant, tmp_path):
    """The store's transcript cap drops the oldest entries (FIFO): what it dropped is still in
    MemoryHub, and what MemoryHub's retention removed is not brought back."""
    entries = [("user", at(1, 9, 0, n), f"message {n}") for n in range(6)]
    store = basic_store(tmp_path, transcripts={S1: entries})
    run_import(store, tenant=tenant, fmt="basic-session")
    session = Session.objects.get(tenant=tenant)
    Message.objects.filter(session=session, seq=3).delete()  # gone since, as by a purge
    # The store kept its last four and gained one.
    basic_store(tmp_path, transcripts={S1: [*entries[2:], ("user", at(1, 10), "message 6")]})

    lines = run_import(store, tenant=tenant, fmt="basic-session")

    assert lines == [
        "sessions: imported 0, already there 1, skipped 0",
        "messages added to records imported before: 1",
        "changed messages at memory/sessions.json:3: 1 messages older than the last one stored "
        "are no longer in the session (removed since the first import): not added again.",
        "Imported 0 records; 0 skipped, 1 changed (listed above).",
    ]
    assert [content for _, _, content in messages_of(session)] == [
        "message 0",
        "message 1",
        "message 3",
        "message 4",
        "message 5",
        "message 6",
    ]


def test_kv_times_are_kept_and_a_store_over_the_state_cap_keeps_its_own_cap(tenant, tmp_path):
    entries = [
        {"key": f"k{n:03d}", "value": f"v{n}", "ts": stamp(at(1, 9) + dt.timedelta(seconds=n))}
        for n in range(250)
    ]
    store = basic_store(
        tmp_path,
        transcripts={S1: [("user", at(1, 9), "hi")]},
        kv={S1: {"cap": 250, "entries": entries}},
    )

    lines = run_import(store, tenant=tenant, fmt="basic-session")

    assert lines == [
        "sessions: imported 1, already there 0, skipped 0",
        "changed state at memory/sessions.json:3: 250 state keys; its store's cap was 250, over "
        "the memory policy's cap of 200: this session keeps up to 250 keys, so a new key does "
        "not evict imported ones.",
        "Imported 1 records; 0 skipped, 1 changed (listed above).",
    ]
    session = Session.objects.get(tenant=tenant)
    assert session.state_cap == 250
    first = StateEntry.objects.get(session=session, key="k000")
    assert first.updated_at == at(1, 9)
    assert StateEntry.objects.get(session=session, key="k249").updated_at == at(1, 9, 4, 9)
    assert session.last_active_at == at(1, 9, 4, 9)  # the newest ts

    # The next new key evicts as the store would at its own cap: one, the oldest; not 51.
    _, created, evicted = state_set(tenant=tenant, session_id=session.pk, key="new", value="x")
    assert (created, evicted) == (True, ["k000"])
    assert StateEntry.objects.filter(session=session).count() == 250


def test_a_store_within_the_policy_cap_keeps_the_policy_cap(tenant, tmp_path):
    store = basic_store(
        tmp_path,
        transcripts={S1: [("user", at(1, 9), "hi")]},
        kv={S1: {"cap": 50, "entries": [{"key": "a", "value": "1", "ts": stamp(at(1, 9))}]}},
    )

    lines = run_import(store, tenant=tenant, fmt="basic-session")

    assert lines[-1] == "Imported 1 records; 0 skipped (listed above)."
    assert Session.objects.get(tenant=tenant).state_cap is None  # the policy's 200 applies


# --- bub (seed 003) ------------------------------------------------------------------------------
class Tape:
    """Writes a bub tape as bub's Tape does: one entry per line, ids counting up."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.next_id = 1
        self.lines: list[str] = []

    def entry(self, kind: str, payload: dict[str, Any], when: dt.datetime) -> Tape:
        self.lines.append(
            json.dumps(
                {
                    "id": self.next_id,
                    "kind": kind,
                    "payload": payload,
                    "meta": {},
                    "date": when.isoformat(),
                }
            )
        )
        self.next_id += 1
        return self

    def message(self, role: str, content: str, when: dt.datetime) -> Tape:
        return self.entry("message", {"role": role, "content": content}, when)

    def zone(
        self,
        version: int,
        when: dt.datetime,
        *,
        long_term: str | None,
        dailies: dict[str, str],
    ) -> Tape:
        self.entry("anchor", {"name": "memory/open", "state": {"version": version}}, when)
        if long_term is not None:
            data = {"content": long_term, "updated_at": when.isoformat()}
            self.entry("event", {"name": "memory.long_term", "data": data}, when)
        for day, content in dailies.items():
            data = {"date": day, "content": content, "updated_at": when.isoformat()}
            self.entry("event", {"name": "memory.daily", "data": data}, when)
        return self.entry("anchor", {"name": "memory/seal", "state": {"version": version}}, when)

    def save(self) -> Path:
        self.path.write_text("\n".join(self.lines) + "\n")
        return self.path


def note_history(tenant: Tenant) -> dict[str, list[str]]:
    history: dict[str, list[str]] = {}
    for note in Note.objects.filter(tenant=tenant).order_by("kind", "day", "version"):
        name = "long_term" if note.day is None else note.day.isoformat()
        history.setdefault(name, []).append(note.content)
    return history


def test_superseded_zones_become_note_versions_and_a_grown_tape_adds_what_is_new(tenant, tmp_path):
    tape = Tape(tmp_path / "telegram.jsonl")
    tape.entry("anchor", {"name": "session/start", "state": {}}, at(1, 9))
    tape.message("user", "remember I like tea", at(1, 9, 0, 1))
    tape.zone(1, at(1, 9, 0, 2), long_term="Likes tea", dailies={"2025-04-01": "- tea"})
    tape.message("user", "and coffee in the morning", at(1, 9, 5))
    tape.zone(
        2,
        at(1, 9, 5, 1),
        long_term="Likes tea; coffee in the morning",
        dailies={"2025-04-01": "- tea", "2025-04-02": "- coffee"},
    )
    # bub's prune() dropped the first day's note from the newest zone.
    tape.zone(
        3,
        at(2, 9),
        long_term="Likes tea; coffee in the morning",
        dailies={"2025-04-02": "- coffee\n- espresso"},
    )
    run_import(tape.save(), tenant=tenant, fmt="bub")

    assert note_history(tenant) == {
        "long_term": ["Likes tea", "Likes tea; coffee in the morning"],
        "2025-04-01": ["- tea", ""],  # ends cleared, as bub no longer shows it
        "2025-04-02": ["- coffee", "- coffee\n- espresso"],
    }
    session = Session.objects.get(tenant=tenant)
    assert session.message_count == 2

    # The tape grew: a new message and a new zone.
    tape.message("user", "actually, green tea", at(3, 9))
    tape.zone(
        4,
        at(3, 9, 0, 1),
        long_term="Likes green tea; coffee in the morning",
        dailies={"2025-04-02": "- coffee\n- espresso", "2025-04-03": "- green tea"},
    )
    lines = run_import(tape.save(), tenant=tenant, fmt="bub")

    assert lines[:4] == [
        "notes: imported 1, already there 3, skipped 0",
        "sessions: imported 0, already there 1, skipped 0",
        "messages added to records imported before: 1",
        "note versions added to records imported before: 1",
    ]
    assert note_history(tenant) == {
        "long_term": [
            "Likes tea",
            "Likes tea; coffee in the morning",
            "Likes green tea; coffee in the morning",
        ],
        "2025-04-01": ["- tea", ""],
        "2025-04-02": ["- coffee", "- coffee\n- espresso"],
        "2025-04-03": ["- green tea"],
    }
    session.refresh_from_db()
    assert [m[2] for m in messages_of(session)] == [
        "remember I like tea",
        "and coffee in the morning",
        "actually, green tea",
    ]
    # Nothing doubles on a third run.
    again = run_import(tape.save(), tenant=tenant, fmt="bub")
    assert again[:2] == [
        "notes: imported 0, already there 4, skipped 0",
        "sessions: imported 0, already there 1, skipped 0",
    ]
    assert Note.objects.filter(tenant=tenant).count() == 8


# --- PicoBot (seed 001) --------------------------------------------------------------------------
def snapshot(path: Path, conversation: list[dict[str, Any]]) -> Path:
    path.write_text(
        json.dumps(
            {
                "sessions": [
                    {
                        "id": "tg-1",
                        "channel_type": "telegram",
                        "channel_id": "42",
                        "user_id": "telegram:42",
                        "permissions": [],
                        "state": "Active",
                        "created_at": "2025-04-01T09:00:00Z",
                        "last_active": "2025-04-01T09:30:00Z",
                        "conversation": conversation,
                    }
                ]
            },
            indent=2,
        )
    )
    return path


def test_snapshot_tool_calls_are_kept_in_openais_shape(tenant, tmp_path):
    path = snapshot(
        tmp_path / "sessions.json",
        [
            {"User": {"content": "Weather in Lyon and Paris?"}},
            {
                "Assistant": {
                    "content": "",
                    "tool_calls": [
                        {"id": "call_1", "name": "weather", "arguments": {"city": "Lyon"}},
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                        },
                    ],
                }
            },
            {"Tool": {"tool_call_id": "call_1", "content": "14 °C"}},
            {"Tool": {"tool_call_id": "call_2", "content": "17 °C"}},
            {"Assistant": {"content": "Lyon 14 °C, Paris 17 °C."}},
            {"Assistant": {"content": "checking", "tool_calls": [{"tool": "odd", "args": 1}]}},
        ],
    )

    lines = run_import(path, tenant=tenant, fmt="picobot")

    assert lines == [
        "sessions: imported 1, already there 0, skipped 0",
        f"changed messages at {path}:3: session 'tg-1': conversation[5]'s tool_calls are neither "
        "{id, name, arguments} nor OpenAI's shape; kept as they are in the message metadata "
        "(picobot_tool_calls).",
        "Imported 1 records; 0 skipped, 1 changed (listed above).",
    ]
    calls = Message.objects.get(seq=2)
    assert (calls.role, calls.content) == ("assistant", "")
    assert calls.tool_calls == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city":"Lyon"}'},
        },
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
        },
    ]
    assert list(Message.objects.filter(role="tool").values_list("tool_call_id", flat=True)) == [
        "call_1",
        "call_2",
    ]
    odd = Message.objects.get(seq=6)
    assert (odd.tool_calls, odd.metadata) == (
        None,
        {"picobot_tool_calls": [{"tool": "odd", "args": 1}]},
    )


def test_a_grown_snapshot_adds_the_new_turns(tenant, tmp_path):
    turns = [{"User": {"content": "hi"}}, {"Assistant": {"content": "hello"}}]
    path = snapshot(tmp_path / "sessions.json", turns)
    run_import(path, tenant=tenant, fmt="picobot")

    snapshot(path, [*turns, {"User": {"content": "hi"}}, {"Assistant": {"content": "again?"}}])
    lines = run_import(path, tenant=tenant, fmt="picobot")

    assert lines[:2] == [
        "sessions: imported 0, already there 1, skipped 0",
        "messages added to records imported before: 2",
    ]
    assert list(Message.objects.order_by("seq").values_list("content", flat=True)) == [
        "hi",
        "hello",
        "hi",
        "again?",
    ]


def picobot_database(path: Path, *, memory: str) -> Path:
    """A PicoBot database with the seed's schema: one session and one user memory."""
    with sqlite3.connect(path) as connection:
        connection.executescript((PICOBOT_FIXTURES / "schema.sql").read_text())
        connection.execute(
            "INSERT INTO sessions (id, channel_type, channel_id, user_id, permissions_json, "
            "created_at, last_active, state_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ("s1", '"tui"', "local", "tui:local", "[]", *["2025-04-01T09:00:00Z"] * 2, '"Active"'),
        )
        connection.execute(
            "INSERT INTO user_memories (user_id, key, content, source_session_id, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?)",
            ("tui:local", "diet", memory, "s1", *["2025-04-01T09:00:00Z"] * 2),
        )
    connection.close()
    return path


BIG_MEMORY = "Allergies and diet, as told over the months:\n" + "- no peanuts\n" * 1000


def test_a_memory_over_8_kib_is_kept_and_a_changed_one_becomes_a_version(tenant, tmp_path):
    assert len(BIG_MEMORY.encode()) > 8 * KB
    db = picobot_database(tmp_path / "conversations.db", memory=BIG_MEMORY)

    lines = run_import(db, tenant=tenant, fmt="picobot")

    assert f"over the API's limit of {8 * KB}; kept whole" in "\n".join(lines)
    memory = UserMemory.objects.get(tenant=tenant, key="diet")
    assert memory.content == BIG_MEMORY

    with sqlite3.connect(db) as connection:
        connection.execute(
            "UPDATE user_memories SET content = 'Vegetarian now.', "
            "updated_at = '2025-04-05T09:00:00Z'"
        )
    connection.close()
    lines = run_import(db, tenant=tenant, fmt="picobot")

    assert "memory versions added to records imported before: 1" in lines
    memory.refresh_from_db()
    assert (memory.content, memory.version) == ("Vegetarian now.", 2)
    assert list(UserMemoryVersion.objects.filter(memory=memory).values_list("content")) == [
        (BIG_MEMORY,)
    ]


@pytest.mark.parametrize("fmt", ["basic-session", "bub"])
def test_no_importer_skips_a_conversation_for_one_odd_record(tenant, tmp_path, fmt):
    """The same awkward conversation in two formats: a huge tool output, a heading, an unknown
    role, a non-UTF-8 byte: it comes in whole, and each oddity is in the report."""
    odd = [
        ("user", at(1, 9, 0, 1), "Run it"),
        ("tool", at(1, 9, 0, 2), TOOL_OUTPUT),
        ("assistant", at(1, 9, 0, 3), "### Summary\n\nIt ran."),
        ("critic", at(1, 9, 0, 4), "Could be shorter."),
    ]
    if fmt == "basic-session":
        path = basic_store(tmp_path, transcripts={S1: odd})
    else:
        tape = Tape(tmp_path / "odd.jsonl")
        for role, when, text in odd:
            tape.message(role, text, when)
        path = tape.save()

    lines = run_import(path, tenant=tenant, fmt=fmt)

    assert lines[0] == "sessions: imported 1, already there 0, skipped 0"
    assert not [line for line in lines if line.startswith("skipped ")]
    changed = [line for line in lines if line.startswith("changed ")]
    assert len(changed) == 2  # the size and the role
    assert Message.objects.filter(tenant=tenant).count() == 4
