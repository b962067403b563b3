"""Issue 15 A2: history from 2025 imported into a tenant with the default policy (90 days of
conversations, 30 of daily notes) would be gone at the next hourly retention run. Every import
says so before it writes anything (the command, its dry run, the web page), and the importer
chooses: extend the policy, pin what is imported, or proceed knowingly. Nothing is lost
silently, and per choice nothing is deleted by a retention run afterwards."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError

from facts_app.models import Note
from memoryhub.accounts.models import AuditEvent, MemoryPolicy, Tenant
from memoryhub.retention.prune import retention_prune_tenant
from memoryhub.transfer.management.commands import import_memory
from sessions_app.models import Message, Session

pytestmark = pytest.mark.usefixtures("real_retention_windows")

S1 = "0196b96c-3a80-7e6e-9a16-4106cf6a6601"
S2 = "0196b96c-3a80-7e6e-9a16-4106cf6a6602"


def store_of_2025(root: Path) -> Path:
    """A basic-session store whose two sessions are from spring 2025: 2 + 3 messages."""
    memory = root / "memory"
    index = []
    for session_id, day, count in ((S1, "2025-04-01", 2), (S2, "2025-05-02", 3)):
        index.append({"id": session_id, "agent_id": "chat", "created_at": f"{day}T09:00:00Z"})
        directory = memory / "sessions" / session_id
        directory.mkdir(parents=True)
        (directory / "transcript.md").write_text(
            "".join(
                f"### {'user' if n % 2 == 0 else 'assistant'} — {day}T09:00:0{n}Z\n\nturn {n}\n\n"
                for n in range(count)
            )
        )
    (memory / "sessions.json").write_text(json.dumps({"sessions": index}))
    return memory


def run_import(path: Path, tenant: Tenant, *options: str, fmt: str = "basic-session") -> list[str]:
    out = io.StringIO()
    call_command(
        "import_memory",
        str(path),
        "--tenant",
        tenant.slug,
        "--format",
        fmt,
        "--no-progress",
        *options,
        stdout=out,
    )
    return out.getvalue().splitlines()


TOLD = [
    "Retention: this input holds items older than the retention windows (conversations "
    "tenant: 90 days; daily notes 30 days) (the oldest from 2025-04-01). The next retention "
    "run (hourly) would remove:",
    "  sessions: 2 (whole, idle for longer than the window)",
    "  messages: 5 (those of these sessions included)",
    "  daily notes: 0",
    "  memories already expired: 0",
]


def test_the_dry_run_tells_and_names_the_choices(tenant, tmp_path):
    lines = run_import(store_of_2025(tmp_path), tenant, "--dry-run")

    assert lines[:5] == TOLD
    assert lines[5].startswith("Choose with --retention when importing (extend: ")
    assert lines[6] == "sessions: would import 2, already there 0, skipped 0"
    assert not Session.objects.filter(tenant=tenant).exists()


def test_without_a_choice_nothing_is_written(tenant, tmp_path):
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"Nothing imported\. Choose with --retention"):
        call_command(
            "import_memory",
            str(store_of_2025(tmp_path)),
            "--tenant",
            tenant.slug,
            "--format",
            "basic-session",
            "--no-progress",
            stdout=out,
        )

    assert out.getvalue().splitlines() == TOLD
    assert not Session.objects.filter(tenant=tenant).exists()
    assert not MemoryPolicy.objects.filter(tenant=tenant).exists()


def test_pin_keeps_the_imported_sessions_through_a_retention_run(tenant, tmp_path):
    lines = run_import(store_of_2025(tmp_path), tenant, "--retention", "pin")

    assert lines[:5] == TOLD
    assert lines[5].startswith("Retention: the imported sessions are pinned")
    assert set(Session.objects.filter(tenant=tenant).values_list("pinned", flat=True)) == {True}

    report = retention_prune_tenant(tenant=tenant)

    assert report.counts["sessions"] == report.counts["messages"] == 0
    assert Session.objects.filter(tenant=tenant).count() == 2
    assert Message.objects.filter(tenant=tenant).count() == 5
    # The tenant's own policy is untouched: its other sessions still expire.
    assert not MemoryPolicy.objects.filter(tenant=tenant).exists()


def test_extend_keeps_conversations_forever_from_now_on_and_audits_it(tenant, tmp_path):
    lines = run_import(store_of_2025(tmp_path), tenant, "--retention", "extend")

    assert lines[5] == (
        "Retention: the tenant's memory policy now keeps conversations (was 90 days) forever."
    )
    policy = MemoryPolicy.objects.get(tenant=tenant, agent_id="")
    assert policy.retention_days is None
    event = AuditEvent.objects.get(tenant=tenant, object_type="memory_policy")
    assert event.detail["changes"] == {"retention_days": [90, None]}
    assert not Session.objects.filter(tenant=tenant, pinned=True).exists()

    retention_prune_tenant(tenant=tenant)

    assert Session.objects.filter(tenant=tenant).count() == 2
    assert Message.objects.filter(tenant=tenant).count() == 5


def test_proceed_imports_as_it_is_and_says_what_retention_will_take(tenant, tmp_path, monkeypatch):
    # Chosen beforehand, `proceed` needs nothing done before the import writes: the survey
    # counts in the import's own pass, and the input is read once, not twice.
    reads: list[Path] = []
    real_reader_for = import_memory.reader_for

    def counting_reader_for(name: str):
        reader = real_reader_for(name)

        def read(path: Path):
            reads.append(path)
            return reader(path)

        return read

    monkeypatch.setattr(import_memory, "reader_for", counting_reader_for)
    lines = run_import(store_of_2025(tmp_path), tenant, "--retention", "proceed")

    assert len(reads) == 1
    assert lines[:5] == TOLD
    assert lines[5] == (
        "Retention: importing as it is, as chosen; the next retention run removes the items "
        "counted above."
    )
    assert Session.objects.filter(tenant=tenant).count() == 2

    report = retention_prune_tenant(tenant=tenant)

    # Knowingly: exactly what the import said.
    assert (report.counts["sessions"], report.counts["messages"]) == (2, 5)


def test_an_agents_own_policy_is_the_one_told_and_extended(tenant, tmp_path):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", retention_days=365)
    lines = run_import(store_of_2025(tmp_path), tenant, "--retention", "extend")

    assert "(conversations tenant: 90 days, agent 'chat': 365 days;" in lines[0]
    assert lines[5] == (
        "Retention: the memory policy of agent 'chat' now keeps conversations (was 365 days) "
        "forever."
    )
    assert MemoryPolicy.objects.get(tenant=tenant, agent_id="chat").retention_days is None


def test_a_recent_store_asks_nothing(tenant, tmp_path):
    memory = store_of_2025(tmp_path)
    MemoryPolicy.objects.create(tenant=tenant, retention_days=None)

    lines = run_import(memory, tenant)

    assert lines[0] == "sessions: imported 2, already there 0, skipped 0"


def old_tape(path: Path) -> Path:
    """A bub tape of 2025 with a daily note of that time."""
    entries = [
        ("anchor", {"name": "session/start", "state": {}}),
        ("message", {"role": "user", "content": "note the trip"}),
        ("anchor", {"name": "memory/open", "state": {"version": 1}}),
        (
            "event",
            {
                "name": "memory.daily",
                "data": {
                    "date": "2025-06-01",
                    "content": "- trip to Lisbon",
                    "updated_at": "2025-06-01T10:00:00+00:00",
                },
            },
        ),
        ("anchor", {"name": "memory/seal", "state": {"version": 1}}),
    ]
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": n,
                    "kind": kind,
                    "payload": payload,
                    "meta": {},
                    "date": "2025-06-01T10:00:00+00:00",
                }
            )
            + "\n"
            for n, (kind, payload) in enumerate(entries, start=1)
        )
    )
    return path


def test_old_daily_notes_are_told_and_pinning_keeps_them_by_the_note_policy(tenant, tmp_path):
    lines = run_import(old_tape(tmp_path / "cli.jsonl"), tenant, "--retention", "pin", fmt="bub")

    assert lines[1:5] == [
        "  sessions: 1 (whole, idle for longer than the window)",
        "  messages: 1 (those of these sessions included)",
        "  daily notes: 1",
        "  memories already expired: 0",
    ]
    # Notes have no pin of their own: the daily-note window is what keeps them.
    assert lines[5] == (
        "Retention: the tenant's memory policy now keeps daily notes (was 30 days) forever."
    )

    retention_prune_tenant(tenant=tenant)

    assert Note.objects.filter(tenant=tenant).count() == 1
    assert Session.objects.filter(tenant=tenant).count() == 1


def test_proceed_counts_in_the_import_pass_what_the_survey_counts_before_it(tenant, tmp_path):
    # The same input told the two ways: read first (a dry run), and counted while importing.
    tape = old_tape(tmp_path / "cli.jsonl")
    before = run_import(tape, tenant, "--dry-run", fmt="bub")

    during = run_import(tape, tenant, "--retention", "proceed", fmt="bub")

    assert during[:5] == before[:5]
    assert during[1:4] == [
        "  sessions: 1 (whole, idle for longer than the window)",
        "  messages: 1 (those of these sessions included)",
        "  daily notes: 1",
    ]
    assert during[5].startswith("Retention: importing as it is, as chosen")


# --- the web page ------------------------------------------------------------------------------
def test_the_import_page_tells_and_asks_then_honours_the_choice(member_client, tenant, tmp_path):
    client = member_client(tenant)
    tape = old_tape(tmp_path / "cli.jsonl").read_bytes()

    checked = client.post(
        "/import/", {"file": SimpleUploadedFile("cli.jsonl", tape), "format": "bub"}
    )

    assert checked.status_code == 200
    survey = checked.context["survey"]
    assert (survey.sessions, survey.messages, survey.daily_notes) == (1, 1, 1)
    page = checked.content.decode()
    assert "The next retention run (hourly) would remove:" in page
    assert 'name="retention" value="pin"' in page
    token = checked.context["token"]

    # Confirming without a choice writes nothing and asks again.
    unchosen = client.post(
        "/import/confirm/", {"token": token, "source": "bub", "name": "cli.jsonl"}
    )
    assert unchosen.status_code == 400
    assert "choose what to do with it" in unchosen.content.decode()
    assert not Session.objects.filter(tenant=tenant).exists()

    done = client.post(
        "/import/confirm/",
        {"token": token, "source": "bub", "name": "cli.jsonl", "retention": "pin"},
    )

    assert done.status_code == 200
    assert "the imported sessions are pinned" in done.content.decode()
    assert Session.objects.get(tenant=tenant).pinned
    event = AuditEvent.objects.get(tenant=tenant, object_type="import")
    assert event.detail["retention"] == {"outside": True, "choice": "pin"}
    retention_prune_tenant(tenant=tenant)
    assert Session.objects.filter(tenant=tenant).count() == 1
    assert Note.objects.filter(tenant=tenant).count() == 1


def test_another_tenants_upload_cannot_be_confirmed(member_client, tenant, other_tenant, tmp_path):
    tape = old_tape(tmp_path / "cli.jsonl").read_bytes()
    checked = member_client(tenant).post(
        "/import/", {"file": SimpleUploadedFile("cli.jsonl", tape), "format": "bub"}
    )

    outsider = member_client(other_tenant).post(
        "/import/confirm/",
        {"token": checked.context["token"], "source": "bub", "retention": "pin"},
        follow=True,
    )

    assert b"upload the file again" in outsider.content
    assert not Session.objects.exists()


def test_a_pinned_session_stays_pinned_through_export_and_import(tenant, other_tenant, tmp_path):
    run_import(store_of_2025(tmp_path), tenant, "--retention", "pin")
    export = tmp_path / "acme.jsonl"
    call_command("export_memory", "--tenant", tenant.slug, "-o", str(export))

    # Pinned sessions are not outside any window that could remove them: nothing to choose.
    lines = run_import(export, other_tenant, fmt="memoryhub")

    assert "sessions: imported 2, already there 0, skipped 0" in lines
    assert set(Session.objects.filter(tenant=other_tenant).values_list("pinned", flat=True)) == {
        True
    }
