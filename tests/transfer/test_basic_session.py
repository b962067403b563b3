"""basic-session's `memory/` directory (sessions.json + sessions/{uuid}/kv.json + transcript.md)
through `manage.py import_memory --format basic-session`: what lands, what a re-run and a dry run
do, and every broken file reported with its file and line while the rest comes in."""

from __future__ import annotations

import datetime as dt
import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command

from facts_app.models import Fact, Note, UserMemory
from memoryhub.accounts.models import Tenant
from memoryhub.transfer.formats import basic_session
from memoryhub.transfer.types import Changed, ImportedSession, Skipped
from sessions_app.models import Message, Session, StateEntry, Summary

FIXTURES = Path(__file__).parent / "fixtures" / "basic_session"
UTC = dt.UTC

A = "019638ff-a440-7c21-a29f-6fbed82c07cd"
B = "01963d2e-cf00-70a5-abaa-9455e3e70682"
C = "0196441e-ee80-782f-b728-b4fa42485e3a"


def run_import(path: Path, *, tenant: Tenant, dry_run: bool = False) -> list[str]:
    out = io.StringIO()
    options = ["--tenant", tenant.slug, "--format", "basic-session", "--no-progress"]
    if dry_run:
        options.append("--dry-run")
    call_command("import_memory", str(path), *options, stdout=out)
    return out.getvalue().splitlines()


def at(*fields: int, hours: int = 0) -> dt.datetime:
    return dt.datetime(*fields, tzinfo=dt.timezone(dt.timedelta(hours=hours)))


def messages_of(session: Session) -> list[tuple[int, str, str, dt.datetime]]:
    return list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "content", "created_at")
    )


def state_of(session: Session) -> list[tuple[str, object]]:
    return list(
        StateEntry.objects.filter(session=session).order_by("position").values_list("key", "value")
    )


def sessions_by_key(tenant: Tenant) -> dict[str | None, Session]:
    return {s.external_key: s for s in Session.objects.filter(tenant=tenant)}


# --- the good store ------------------------------------------------------------------------------
def test_the_good_store_lands_with_its_messages_state_and_times(tenant):
    lines = run_import(FIXTURES / "good", tenant=tenant)

    assert lines == [
        "sessions: imported 3, already there 0, skipped 0",
        "Imported 3 records; 0 skipped (listed above).",
    ]
    sessions = sessions_by_key(tenant)
    assert set(sessions) == {A, B, C}
    first = sessions[A]
    assert (first.agent_id, first.end_user, first.metadata) == (
        "chat",
        None,
        {"store_types": ["basic_session"]},  # the entry's unknown "title" is not kept
    )
    assert first.created_at == at(2025, 4, 15, 10, 30)
    # The newest time the session holds is a state entry's ts, after the last message.
    assert first.last_active_at == at(2025, 4, 15, 10, 31, 30)
    assert messages_of(first) == [
        (1, "user", "Hello, tell me about your memory system.", at(2025, 4, 15, 10, 30, 1)),
        (
            2,
            "assistant",
            "I can store key-value pairs and maintain a conversation transcript.\n\n"
            "Both are capped:\n- k-v entries: 200\n- transcript entries: 500\n\n"
            "#### Why caps\n###\n  ### Old entries go first.",
            at(2025, 4, 15, 10, 30, 5),
        ),
        (3, "user", "And what happens when the cap is reached?", at(2025, 4, 15, 10, 31)),
        (
            4,
            "assistant",
            "The oldest entries are dropped first (FIFO).",
            at(2025, 4, 15, 10, 31, 4),
        ),
    ]
    assert (first.last_seq, first.message_count) == (4, 4)
    assert first.token_count == sum(m.token_count for m in first.messages.all()) > 0
    assert state_of(first) == [
        ("user_name", "sachi"),
        ("topic", "rust memory systems"),
        ("working_memory", "Explaining the capped stores; next: eviction."),
    ]
    assert first.state_clock == 3


def test_offsets_are_kept_and_times_without_one_are_utc(tenant):
    run_import(FIXTURES / "good", tenant=tenant)

    second = sessions_by_key(tenant)[B]
    assert second.created_at == at(2025, 4, 16, 8, hours=2) == at(2025, 4, 16, 6)
    assert messages_of(second) == [
        (1, "system", "You answer in German.", at(2025, 4, 16, 6)),  # written without offset
        (2, "user", "Wie spät ist es in Tokyo?", at(2025, 4, 16, 6, 0, 5)),
        (3, "assistant", "Gleich 15 Uhr.", at(2025, 4, 16, 15, 0, 9, hours=9)),
    ]
    assert second.last_active_at == at(2025, 4, 16, 6, 0, 9)
    assert state_of(second) == []


def test_a_session_without_created_at_takes_its_uuid7_time_and_a_repeated_key_the_last_value(
    tenant,
):
    run_import(FIXTURES / "good", tenant=tenant)

    third = sessions_by_key(tenant)[C]
    assert (third.agent_id, third.created_at) == ("research", at(2025, 4, 17, 14, 20))
    assert third.last_active_at == at(2025, 4, 17, 14, 25)  # its last state ts; no messages
    assert messages_of(third) == []
    # "focus" was set twice: the store's kv_get reads the later one, which is also the newest.
    assert state_of(third) == [("sources", '["arxiv", "acm"]'), ("focus", "vector search")]


def test_the_store_has_nothing_else_to_import(tenant):
    run_import(FIXTURES / "good", tenant=tenant)

    assert Summary.objects.count() == UserMemory.objects.count() == 0
    assert Fact.objects.count() == Note.objects.count() == 0


def test_running_the_same_import_again_adds_nothing(tenant):
    run_import(FIXTURES / "good", tenant=tenant)

    lines = run_import(FIXTURES / "good", tenant=tenant)

    assert lines[0] == "sessions: imported 0, already there 3, skipped 0"
    assert Session.objects.count() == 3
    assert Message.objects.count() == 7
    assert StateEntry.objects.count() == 5


def test_a_dry_run_keeps_nothing_and_counts_what_the_import_does(tenant):
    dry = run_import(FIXTURES / "good", tenant=tenant, dry_run=True)

    assert dry == [
        "sessions: would import 3, already there 0, skipped 0",
        "Dry run: would import 3 records; 0 skipped (listed above).",
    ]
    assert Session.objects.count() == Message.objects.count() == StateEntry.objects.count() == 0
    assert run_import(FIXTURES / "good", tenant=tenant)[0] == (
        "sessions: imported 3, already there 0, skipped 0"
    )


def test_importing_into_one_tenant_leaves_another_untouched(tenant, other_tenant):
    run_import(FIXTURES / "good", tenant=tenant)

    assert not Session.objects.filter(tenant=other_tenant).exists()
    assert not Message.objects.filter(tenant=other_tenant).exists()
    assert not StateEntry.objects.filter(tenant=other_tenant).exists()
    # The same store into the other tenant is new there, and gets its own rows.
    lines = run_import(FIXTURES / "good", tenant=other_tenant)
    assert lines[0] == "sessions: imported 3, already there 0, skipped 0"
    assert Session.objects.filter(tenant=tenant).count() == 3
    assert Message.objects.filter(tenant=other_tenant).count() == 7


@pytest.mark.parametrize(
    "where", ["identity directory", "memory directory", "sessions.json"], ids=str
)
def test_the_path_may_name_the_identity_the_memory_directory_or_the_index(tenant, tmp_path, where):
    identity = tmp_path / "bot"
    shutil.copytree(FIXTURES / "good", identity)
    (identity / "memory" / "sessions" / ".DS_Store").write_bytes(b"\x00\x01")  # hidden: ignored
    path = {
        "identity directory": identity,
        "memory directory": identity / "memory",
        "sessions.json": identity / "memory" / "sessions.json",
    }[where]

    lines = run_import(path, tenant=tenant)

    assert lines[0] == "sessions: imported 3, already there 0, skipped 0"


def test_a_directory_that_is_no_store_is_reported(tenant, tmp_path):
    lines = run_import(tmp_path, tenant=tenant)

    assert lines[1] == (
        f"skipped sessions at {tmp_path}: not a seed000 memory directory: no sessions.json or "
        "sessions/ in it or in its memory/."
    )
    assert Session.objects.count() == 0


# --- broken stores: reported with file and line, the rest imported -------------------------------
def test_a_cut_off_index_imports_what_it_lists_before_the_cut_and_names_the_line(tenant):
    lines = run_import(FIXTURES / "truncated_index", tenant=tenant)

    repair = "not in the readable part of sessions.json; repair it at memory/sessions.json:13"
    assert lines == [
        "sessions: imported 1, already there 0, skipped 3",
        "skipped sessions at memory/sessions.json:13: the file ends in the middle of a JSON "
        "value. The sessions listed after this point cannot be read.",
        f"skipped sessions at memory/sessions/01969039-5a80-74db-9471-3d60c8a70639: {repair} "
        "and import again.",
        f"skipped sessions at memory/sessions/0196955f-b680-75b9-ba02-4204f7c1bd87: {repair} "
        "and import again.",
        "Imported 1 records; 3 skipped (listed above).",
    ]
    (session,) = Session.objects.filter(tenant=tenant)
    assert (session.external_key, session.agent_id) == (
        "01968b12-fe80-7eb1-a7a9-c3787c65c1e5",
        "chat",
    )
    assert [(seq, role, content) for seq, role, content, _ in messages_of(session)] == [
        (1, "user", "ping 1"),
        (2, "assistant", "pong 1"),
    ]


def test_a_broken_kv_json_loses_only_its_bad_entries_never_its_session(tenant):
    lines = run_import(FIXTURES / "bad_kv", tenant=tenant)

    e1 = "memory/sessions/01969a86-1280-7e87-a443-df789558867f/kv.json"
    e2 = "memory/sessions/01969fac-6e80-723a-8133-287637ebdcd9/kv.json"
    assert lines == [
        "sessions: imported 3, already there 0, skipped 0",
        "state: imported 0, already there 0, skipped 2",
        f"skipped state at {e1}:11: the file ends in the middle of a JSON value. The entries "
        "after this point cannot be read; those before it are imported.",
        f"skipped state at {e2}:9: the key is a number, not a non-empty string.",
        f"changed state at {e2}:14: 'mood': ts 'sometime' is not an ISO 8601 time; the entry is "
        "kept, dated at the import.",
        f"changed state at {e2}:14: 'mood': the value is an object, not a string (the store "
        "writes strings); kept as that JSON value.",
        "Imported 3 records; 2 skipped, 2 changed (listed above).",
    ]
    sessions = sessions_by_key(tenant)
    assert state_of(sessions["01969a86-1280-7e87-a443-df789558867f"]) == [("user_name", "sachi")]
    assert state_of(sessions["01969fac-6e80-723a-8133-287637ebdcd9"]) == [
        ("user_name", "sachi"),
        ("mood", {"label": "calm"}),
    ]
    assert Message.objects.count() == 3  # every conversation is in


def test_transcript_lines_are_read_as_the_store_reads_them_and_no_session_is_skipped(tenant):
    lines = run_import(FIXTURES / "bad_transcript", tenant=tenant)

    f1 = "memory/sessions/0196a9f9-2680-7cca-9e4d-6e3c1846d424/transcript.md"
    f2 = "memory/sessions/0196af1f-8280-7e8f-bcbd-04c340212ef7/transcript.md"
    f3 = "memory/sessions/0196b445-de80-7b4b-bb97-d43588561712/transcript.md"
    pattern = "'### {role} — {ISO 8601 time}': read as text of the message it is in, as the store"
    assert lines == [
        "sessions: imported 4, already there 0, skipped 0",
        f"changed messages at {f1}:5: '### assistant 2025-05-07T09:00:04Z' does not match the "
        f"store's header pattern {pattern} reads it.",
        "changed messages at memory/sessions.json:3: message 2: the role 'robot' is stored as "
        "'assistant' (the original is in its metadata as source_role).",
        f"changed messages at {f2}:5: '### assistant — yesterday' does not match the store's "
        f"header pattern {pattern} reads it.",
        f"changed messages at {f3}:1: text before the first '### {{role}} — {{timestamp}}' header "
        "belongs to no message; kept as a system message dated as the first one.",
        "Imported 4 records; 0 skipped, 4 changed (listed above).",
    ]
    sessions = sessions_by_key(tenant)
    assert messages_of(sessions["0196a9f9-2680-7cca-9e4d-6e3c1846d424"]) == [
        (
            1,
            "user",
            "What is on today?\n\n### assistant 2025-05-07T09:00:04Z\n\nTwo meetings.",
            at(2025, 5, 7, 9, 0, 1),
        ),
        (2, "assistant", "beep", at(2025, 5, 7, 9, 1)),
    ]
    robot = Message.objects.get(session=sessions["0196a9f9-2680-7cca-9e4d-6e3c1846d424"], seq=2)
    assert robot.metadata == {"source_role": "robot"}
    assert messages_of(sessions["0196af1f-8280-7e8f-bcbd-04c340212ef7"]) == [
        (
            1,
            "user",
            "Remind me tomorrow.\n\n### assistant — yesterday\n\nDone.",
            at(2025, 5, 8, 9, 0, 1),
        ),
    ]
    pasted = sessions["0196b445-de80-7b4b-bb97-d43588561712"]
    assert messages_of(pasted) == [
        (1, "system", "Conversation pasted by hand", at(2025, 5, 9, 9, 0, 1)),
        (2, "user", "hi", at(2025, 5, 9, 9, 0, 1)),
    ]
    assert messages_of(sessions["0196b96c-3a80-7e6e-9a16-4106cf6a659e"]) == [
        (1, "user", "Is this one fine?", at(2025, 5, 10, 9, 0, 1)),
        (2, "assistant", "It is.", at(2025, 5, 10, 9, 0, 3)),
    ]


def test_index_entries_and_directories_that_do_not_match_up(tenant):
    lines = run_import(FIXTURES / "index_problems", tenant=tenant)

    assert lines == [
        "sessions: imported 2, already there 0, skipped 7",
        "skipped sessions at memory/sessions.json:11: the entry's id 'not-a-uuid' is not a "
        "session UUID.",
        "skipped sessions at memory/sessions.json:18: a session entry is a string, not an object.",
        "skipped sessions at memory/sessions.json:19: session 0196c3b8-f280-7e60-92e0-c8b2bad640fb"
        ": agent_id is a number, not a string; created_at 'yesterday' is not an ISO 8601 time.",
        "skipped sessions at memory/sessions.json:27: sessions/0196c8df-4e80-754a-af19-"
        "922ad9b8a714/ does not exist: the session has no state or transcript to import.",
        "skipped sessions at memory/sessions.json:35: session 0196be92-9680-7195-8f65-"
        "d4d9259f4329 is listed again (first on line 3); this entry is ignored.",
        "skipped sessions at memory/sessions/README.txt: not a session directory: sessions/ "
        "holds one directory per session, named by its UUID.",
        "skipped sessions at memory/sessions/backup: not a session directory: sessions/ holds "
        "one directory per session, named by its UUID.",
        "Imported 2 records; 7 skipped (listed above).",
    ]
    sessions = sessions_by_key(tenant)
    # The directory of the entry with bad fields is not imported as an unlisted one.
    assert set(sessions) == {
        "0196be92-9680-7195-8f65-d4d9259f4329",
        "0196ce05-aa80-719e-8f4f-f31e78de5857",
    }
    unlisted = sessions["0196ce05-aa80-719e-8f4f-f31e78de5857"]
    assert (unlisted.agent_id, unlisted.metadata) == ("", {"in_session_index": False})
    assert unlisted.created_at == at(2025, 5, 14, 9)  # from its UUIDv7
    assert messages_of(unlisted) == [(1, "user", "in 0196ce05", at(2025, 5, 14, 9, 0, 7))]


def test_a_kv_json_repaired_later_adds_nothing_by_itself(tenant, tmp_path):
    """The session came in at the first run (with the entries before the cut); a re-run grows
    transcripts, not state (the bot may have changed it since): the report says already there."""
    store = tmp_path / "bad_kv"
    shutil.copytree(FIXTURES / "bad_kv", store)
    run_import(store, tenant=tenant)
    kv = store / "memory" / "sessions" / "01969a86-1280-7e87-a443-df789558867f" / "kv.json"
    kv.write_text(kv.read_text() + 'ening", "ts": "2025-05-04T09:00:02Z"}]}')

    lines = run_import(store, tenant=tenant)

    assert lines[0] == "sessions: imported 0, already there 3, skipped 0"
    session = sessions_by_key(tenant)["01969a86-1280-7e87-a443-df789558867f"]
    assert state_of(session) == [("user_name", "sachi")]


# --- streaming -----------------------------------------------------------------------------------
def described(items: Iterator[object]) -> list[object]:
    out: list[object] = []
    for item in items:
        if isinstance(item, ImportedSession):
            messages = [(m.role, m.content, m.created_at) for m in item.messages]
            out.append((item.source_id, str(item.origin), item.agent_id, item.state, messages))
        else:
            assert isinstance(item, Skipped | Changed)
            out.append(item)
    return out


@pytest.mark.parametrize("store", ["good", "truncated_index", "bad_kv", "index_problems"])
def test_json_read_a_few_characters_at_a_time_reads_the_same(monkeypatch, store):
    whole = described(basic_session.read(FIXTURES / store))
    monkeypatch.setattr(basic_session, "JSON_CHUNK_CHARS", 3)

    assert described(basic_session.read(FIXTURES / store)) == whole


def test_messages_are_read_from_the_transcript_as_they_are_stored():
    first = next(basic_session.read(FIXTURES / "good"))

    assert isinstance(first, ImportedSession)
    assert isinstance(first.messages, Iterator)  # a generator over the file, not a list
    assert [m.role for m in first.messages] == ["user", "assistant", "user", "assistant"]


def test_without_sessions_json_every_session_directory_is_imported_unlisted(tenant, tmp_path):
    store = tmp_path / "memory"
    shutil.copytree(FIXTURES / "good" / "memory", store)
    (store / "sessions.json").unlink()

    lines = run_import(store, tenant=tenant)

    assert lines[0] == "sessions: imported 3, already there 0, skipped 0"
    sessions = sessions_by_key(tenant)
    assert {key: (s.agent_id, s.created_at) for key, s in sessions.items()} == {
        A: ("", at(2025, 4, 15, 10, 30)),
        B: ("", at(2025, 4, 16, 6)),
        C: ("", at(2025, 4, 17, 14, 20)),
    }
    assert all(s.metadata == {"in_session_index": False} for s in sessions.values())
