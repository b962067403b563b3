"""MemoryHub's own export: export -> import into a fresh tenant -> export gives the same records
(ids remapped, followed by every reference); re-imports add nothing; broken files are reported
line by line; the per-person API export imports the same way."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from facts_app.models import Fact
from facts_app.services.facts import fact_create
from facts_app.services.memories import memory_save
from facts_app.services.notes import note_daily_append, note_long_term_save
from memoryhub.accounts.models import AuditEvent, EndUser, MemoryPolicy
from memoryhub.transfer.export import export_records
from sessions_app.models import Message, Session
from sessions_app.services import (
    MessageInput,
    message_append_batch,
    session_create_or_get,
    state_set,
)
from sessions_app.summaries import summary_set
from sessions_app.task_services import plan_create, task_context_create
from tests.factories import TenantFactory
from tests.helpers import client_for

T0 = dt.datetime(2025, 6, 1, 8, 0, tzinfo=dt.UTC)


@pytest.fixture
def rich_tenant(tenant):
    MemoryPolicy.objects.create(tenant=tenant, retention_days=None, context_max_tokens=3000)
    MemoryPolicy.objects.create(tenant=tenant, agent_id="kiosk", memory_enabled=False)
    for user, name in (("telegram:1", "Ana"), ("telegram:2", "Bo")):
        session, _ = session_create_or_get(
            tenant=tenant,
            user_id=user,
            agent_id="chat",
            external_key=f"tg:{user}",
            metadata={"lang": "pt"},
        )
        EndUser.objects.filter(external_id=user).update(display_name=name, metadata={"vip": True})
        message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content="Plan my trip", created_at=T0),
                MessageInput(
                    role="assistant",
                    content="",
                    tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f"}}],
                    created_at=T0 + dt.timedelta(seconds=1),
                ),
                MessageInput(role="tool", content="{}", tool_call_id="c1", name="f"),
                MessageInput(role="assistant", content="Done.", metadata={"model": "x"}),
            ],
        )
        state_set(tenant=tenant, session_id=session.pk, key="step", value={"n": 1})
        state_set(tenant=tenant, session_id=session.pk, key="mood", value="ok")
        summary_set(tenant=tenant, session_id=session.pk, text=f"{name} planned a trip.")
        end_user = session.end_user
        memory_save(tenant=tenant, end_user=end_user, key="city", content="Lisbon")
        memory_save(tenant=tenant, end_user=end_user, key="city", content="Porto", pinned=True)
        old, _ = fact_create(tenant=tenant, end_user=end_user, content=f"{name} likes trains")
        fact_create(
            tenant=tenant,
            end_user=end_user,
            content=f"{name} likes planes",
            external_id=f"{name}-planes",
            tags=["travel"],
            source_session_id=session.pk,
            source_message_ids=list(
                Message.objects.filter(session=session, seq__lte=2).values_list("pk", flat=True)
            ),
            supersedes=old,
        )
        note_long_term_save(tenant=tenant, end_user=end_user, content="v1")
        note_long_term_save(tenant=tenant, end_user=end_user, content="v2")
        note_daily_append(tenant=tenant, end_user=end_user, content="a", day=T0.date())
        note_daily_append(tenant=tenant, end_user=end_user, content="b", day=T0.date())
        plan = plan_create(
            tenant=tenant,
            plan_id=f"trip-{user}",
            goal_event="trip.planned",
            goal_data={"to": "Porto"},
            state={"step": 2},
            session_id=session.pk,
        )
        task_context_create(
            tenant=tenant,
            task_id=f"research-{user}",
            event_type="research.requested",
            response_event="research.completed",
            data={"q": "trains"},
            sub_tasks=[f"sub-a-{user}", f"sub-b-{user}"],
            plan_id=plan.plan_id,
            session_id=session.pk,
        )
    memory_save(tenant=tenant, end_user=None, key="house_rules", content="Be kind")
    # A session without a person.
    anonymous, _ = session_create_or_get(tenant=tenant, agent_id="kiosk")
    message_append_batch(
        tenant=tenant, session_id=anonymous.pk, messages=[MessageInput(role="user", content="hi")]
    )
    return tenant


def export_to(tmp_path: Path, tenant, name: str = "export.jsonl") -> Path:
    path = tmp_path / name
    call_command("export_memory", "--tenant", tenant.slug, "-o", str(path), "--no-progress")
    return path


def import_from(path: Path, tenant, *extra: str) -> str:
    out = io.StringIO()
    call_command(
        "import_memory", str(path), "--tenant", tenant.slug, "--no-progress", *extra, stdout=out
    )
    return out.getvalue()


def normalised(records: list[dict]) -> list[dict]:
    """The records with ids replaced by their order of appearance, and every reference to an
    id replaced the same way, so two exports of equal memory compare equal."""
    ids: dict[tuple[str, str], int] = {}

    def ref(kind: str, value):
        if value is None:
            return None
        return ids.setdefault((kind, str(value)), len([k for k in ids if k[0] == kind]))

    out = []
    for record in records:
        record = dict(record)
        kind = record["type"]
        if kind == "header":
            record.pop("exported_at")
            record.pop("tenant")
        if kind == "session":
            record["id"] = ref("session", record["id"])
        if "session_id" in record:
            record["session_id"] = ref("session", record["session_id"])
        if "source_session_id" in record:
            record["source_session_id"] = ref("session", record["source_session_id"])
        if kind in ("memory", "fact"):
            record["id"] = ref(kind, record["id"])
        if kind == "fact":
            record["superseded_by"] = ref("fact", record["superseded_by"])
        out.append(record)
    return out


def test_export_import_export_is_identical(rich_tenant, tmp_path):
    first = export_to(tmp_path, rich_tenant, "first.jsonl.gz")
    fresh = TenantFactory(slug="fresh")

    report = import_from(first, fresh)
    second = export_to(tmp_path, fresh, "second.jsonl")

    with gzip.open(first, "rt") as handle:
        before = [json.loads(line) for line in handle]
    after = [json.loads(line) for line in second.read_text().splitlines()]
    assert normalised(after) == normalised(before)
    assert "sessions: imported 3, already there 0, skipped 0" in report
    assert "facts: imported 4, already there 0, skipped 0" in report
    assert set(Fact.objects.filter(tenant=fresh).values_list("external_id", flat=True)) == {
        None,
        "Ana-planes",
        "Bo-planes",
    }
    kinds = {record["type"] for record in before}
    assert kinds == {
        "header",
        "memory_policy",
        "end_user",
        "session",
        "state",
        "summary",
        "message",
        "memory",
        "fact",
        "note",
        "plan",
        "task_context",
    }
    # The new rows are the fresh tenant's own, with new ids.
    assert not set(Session.objects.filter(tenant=fresh).values_list("pk", flat=True)) & set(
        Session.objects.filter(tenant=rich_tenant).values_list("pk", flat=True)
    )
    assert AuditEvent.objects.filter(tenant=rich_tenant, action="export").count() == 1


def test_an_export_from_before_the_column_brings_the_id_from_metadata(rich_tenant, tmp_path):
    path = export_to(tmp_path, rich_tenant)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        if record["type"] == "fact":
            external_id = record.pop("external_id")
            record["metadata"] = {"external_id": external_id} if external_id else {}
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    fresh = TenantFactory(slug="fresh")

    import_from(path, fresh)

    assert set(Fact.objects.filter(tenant=fresh).values_list("external_id", flat=True)) == {
        None,
        "Ana-planes",
        "Bo-planes",
    }


def test_importing_the_same_file_again_adds_nothing(rich_tenant, tmp_path):
    path = export_to(tmp_path, rich_tenant)
    fresh = TenantFactory(slug="fresh")
    import_from(path, fresh)
    counts = (Session.objects.count(), Message.objects.count(), Fact.objects.count())

    again = import_from(path, fresh)

    assert (Session.objects.count(), Message.objects.count(), Fact.objects.count()) == counts
    assert "sessions: imported 0, already there 3, skipped 0" in again


def test_a_dry_run_keeps_nothing_and_counts_the_same(rich_tenant, tmp_path):
    path = export_to(tmp_path, rich_tenant)
    fresh = TenantFactory(slug="fresh")

    dry = import_from(path, fresh, "--dry-run")

    assert Session.objects.filter(tenant=fresh).count() == 0
    assert "sessions: would import 3, already there 0, skipped 0" in dry
    real = import_from(path, fresh)
    assert real.replace("imported", "would import").splitlines()[:-1] == dry.splitlines()[:-1]


def test_a_broken_line_rejects_its_session_only_and_says_where(rich_tenant, tmp_path):
    lines = export_to(tmp_path, rich_tenant).read_text().splitlines()
    first_message = next(i for i, line in enumerate(lines) if '"type":"message"' in line)
    lines[first_message] = lines[first_message][:25]  # truncated JSON
    lines.insert(3, json.dumps({"type": "hologram", "id": 1}))
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines) + "\n")
    fresh = TenantFactory(slug="fresh")

    report = import_from(broken, fresh)

    assert "sessions: imported 2, already there 0, skipped 1" in report
    # The session's own line is the origin; the reason names the broken line.
    assert f"line {first_message + 2}: not JSON" in report
    assert "skipped sessions at " in report
    assert "records at" in report
    assert "unknown record type 'hologram'" in report
    assert Session.objects.filter(tenant=fresh).count() == 2


def test_an_integer_over_64_bits_is_kept_exactly_and_a_broken_line_named(tenant, tmp_path):
    # A faster JSON parser (orjson) would turn this integer into a float: lines are read by
    # the standard library, which keeps it, and names a broken line's error as the report does.
    session_id = "00000000-0000-0000-0000-000000000001"
    records = [
        {"type": "header", "format": "memoryhub.export", "schema_version": 1, "tenant": "x"},
        {"type": "session", "id": session_id, "user_id": "u1", "agent_id": "chat"},
        {
            "type": "message",
            "session_id": session_id,
            "seq": 1,
            "role": "user",
            "content": "hi",
            "metadata": {"big": 2**70},
            "created_at": "2026-01-01T00:30:00+00:00",
        },
    ]
    path = tmp_path / "big.jsonl"
    lines = [json.dumps(record) for record in records]
    lines.insert(1, "{broken")  # before the session: a record of its own
    path.write_text("\n".join(lines) + "\n")

    report = import_from(path, tenant, "--retention", "proceed")

    assert "sessions: imported 1" in report
    assert "not JSON (Expecting property name enclosed in double quotes at column 2)" in report
    assert Message.objects.get(session__tenant=tenant).metadata == {"big": 2**70}


def test_a_file_that_is_not_an_export_is_refused_whole(tenant, tmp_path):
    path = tmp_path / "other.jsonl"
    path.write_text('{"type": "header", "format": "somebody-else"}\n{"type": "session"}\n')

    report = import_from(path, tenant)

    assert "the first line must be a memoryhub.export header record" in report
    assert Session.objects.count() == 0


def test_the_api_export_of_a_person_imports_back(rich_tenant, make_key, tmp_path):
    client = client_for(make_key(rich_tenant)[1])
    document = client.get("/api/v1/users/telegram:1/export/").json()
    path = tmp_path / "ana.json"
    path.write_text(json.dumps(document))
    fresh = TenantFactory(slug="fresh")

    report = import_from(path, fresh)

    assert "sessions: imported 1, already there 0, skipped 0" in report
    person = EndUser.objects.get(tenant=fresh)
    assert (person.external_id, person.display_name) == ("telegram:1", "Ana")
    fresh_records = list(export_records(tenant=fresh, end_user=person))
    assert (
        normalised(fresh_records)[1:]
        == normalised([{"type": "header", **document, "records": None}, *document["records"]])[1:]
    )
