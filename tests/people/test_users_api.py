"""A person's data: listed, shown, exported and erased — completely, and only theirs."""

import datetime as dt

import pytest
from django.apps import apps

from facts_app.embedding import (
    fact_vectors_compute,
    memory_vectors_compute,
    note_vectors_compute,
)
from facts_app.models import Fact, Note, UserMemory, UserMemoryVersion
from facts_app.services.facts import fact_create
from facts_app.services.memories import memory_save
from memoryhub.accounts.models import AuditAction, AuditEvent, EndUser, IdempotencyRecord
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.transfer.export import EXPORT_FORMAT, EXPORT_SCHEMA_VERSION
from sessions_app import services as session_services
from sessions_app.embedding import message_vectors_compute
from sessions_app.models import Message, Session, StateEntry
from sessions_app.services import MessageInput
from sessions_app.summaries import summary_set
from sessions_app.task_services import plan_create, task_context_create
from tests.helpers import client_for

SACHI = "whatsapp:+4912345"
BOB = "tui:bob"


def remember_everything(tenant, user_id: str) -> EndUser:
    """Give a person at least one row in every table that can hold their data."""
    session, _ = session_services.session_create_or_get(
        tenant=tenant, user_id=user_id, external_key=f"k:{user_id}"
    )
    session_services.message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[
            MessageInput(role="user", content="I like peanuts"),
            MessageInput(role="assistant", content="Noted"),
        ],
    )
    message_vectors_compute(session_id=session.pk)  # what the worker does after the append
    session_services.state_set(
        tenant=tenant, session_id=session.pk, key="working_memory", value={"a": 1}, cap=200
    )
    summary_set(tenant=tenant, session_id=session.pk, text="The user likes peanuts.")
    end_user = end_user_get_or_create(tenant=tenant, external_id=user_id)
    memory_save(tenant=tenant, end_user=end_user, key="snack", content="peanuts")
    memory_save(tenant=tenant, end_user=end_user, key="snack", content="cashews")
    fact_create(
        tenant=tenant,
        end_user=end_user,
        content=f"{user_id} likes peanuts",
        source_session_id=session.pk,
    )
    Note.objects.create(
        tenant=tenant, end_user=end_user, kind="long_term", version=1, content="Likes nuts"
    )
    Note.objects.create(
        tenant=tenant,
        end_user=end_user,
        kind="daily",
        day=dt.date(2026, 11, 1),
        version=1,
        content="- talked",
    )
    # What the worker does after those writes: every kind of vector exists too.
    fact_vectors_compute(tenant_id=tenant.pk)
    memory_vectors_compute(tenant_id=tenant.pk)
    note_vectors_compute(tenant_id=tenant.pk)
    IdempotencyRecord.objects.create(
        tenant=tenant,
        end_user=end_user,
        scope="test",
        key=f"k-{user_id}",
        request_hash="x",
        response_status=201,
        response_body={"content": "I like peanuts"},
    )
    plan_create(tenant=tenant, plan_id=f"plan:{user_id}", goal_event="g", session_id=session.pk)
    task_context_create(
        tenant=tenant,
        task_id=f"task:{user_id}",
        event_type="e",
        plan_id=f"plan:{user_id}",
        session_id=session.pk,
        sub_tasks=[f"sub:{user_id}"],
    )
    return end_user


def rows_referencing(end_user_pk: int) -> dict[str, int]:
    """Count, in every model of the project, the rows that point at this person (directly or via
    their sessions or memories). New models are picked up automatically."""
    counts = {}
    session_ids = list(Session.objects.filter(end_user_id=end_user_pk).values_list("pk", flat=True))
    memory_ids = list(
        UserMemory.objects.filter(end_user_id=end_user_pk).values_list("pk", flat=True)
    )
    for model in apps.get_models():
        if model._meta.app_label not in {"accounts", "sessions_app", "facts_app"}:
            continue
        fields = {field.name for field in model._meta.get_fields()}
        if model is EndUser:
            counts["end_user"] = EndUser.objects.filter(pk=end_user_pk).count()
        elif "end_user" in fields:
            counts[model.__name__] = model.objects.filter(end_user_id=end_user_pk).count()
        elif "session" in fields:
            counts[model.__name__] = model.objects.filter(session_id__in=session_ids).count()
        elif "memory" in fields:
            counts[model.__name__] = model.objects.filter(memory_id__in=memory_ids).count()
    return counts


def fts_rows(table: str) -> int:
    from django.db import connection

    if connection.vendor != "sqlite":
        return 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 (fixed test table names)
        return cursor.fetchone()[0]


def test_erasure_leaves_nothing_of_the_person_and_everything_of_others(tenant, make_key):
    _, secret = make_key(tenant, scopes=["read", "write", "purge"])
    sachi = remember_everything(tenant, SACHI)
    bob = remember_everything(tenant, BOB)
    assert all(rows_referencing(sachi.pk).values())
    bob_before = rows_referencing(bob.pk)
    fts_before = fts_rows("facts_app_fact_fts"), fts_rows("sessions_app_message_fts")

    response = client_for(secret).delete(f"/api/v1/users/{SACHI}/")

    assert response.status_code == 200
    assert response.json()["erased"] == {
        "end_users": 1,
        "facts": 1,
        "idempotency_records": 1,
        "messages": 2,
        "notes": 2,
        "plans": 1,
        "sessions": 1,
        "state_entries": 1,
        "sub_tasks": 1,
        "summaries": 1,
        "task_contexts": 1,
        "user_memories": 1,
        "user_memory_versions": 1,
    }
    assert set(rows_referencing(sachi.pk).values()) == {0}
    assert rows_referencing(bob.pk) == bob_before
    if fts_before != (0, 0):  # SQLite: the full-text index rows went with the rows
        assert fts_rows("facts_app_fact_fts") == fts_before[0] - 1
        assert fts_rows("sessions_app_message_fts") == fts_before[1] - 2
    event = AuditEvent.objects.get(tenant=tenant, action=AuditAction.ERASE)
    assert event.object_id == SACHI
    assert event.counts["messages"] == 2


def test_erasure_takes_the_stored_idempotent_responses_that_quote_the_person(tenant, make_key):
    _, secret = make_key(tenant, scopes=["read", "write", "purge"])
    client = client_for(secret)
    for user_id in (SACHI, BOB):
        session = client.post(
            "/api/v1/sessions/",
            {"user_id": user_id},
            format="json",
            HTTP_IDEMPOTENCY_KEY=f"s-{user_id}",
        ).json()
        client.post(
            f"/api/v1/sessions/{session['id']}/messages/",
            {"role": "user", "content": f"secret of {user_id}"},
            format="json",
            HTTP_IDEMPOTENCY_KEY=f"m-{user_id}",
        )
        client.post(
            f"/api/v1/users/{user_id}/notes/daily/",
            {"content": f"note of {user_id}"},
            format="json",
            HTTP_IDEMPOTENCY_KEY=f"n-{user_id}",
        )
    assert IdempotencyRecord.objects.count() == 6

    client.delete(f"/api/v1/users/{SACHI}/")

    remaining = list(IdempotencyRecord.objects.values_list("response_body", flat=True))
    assert len(remaining) == 3
    assert SACHI not in str(remaining)
    assert f"secret of {BOB}" in str(remaining)


def test_erasure_needs_the_purge_scope(api, tenant):
    remember_everything(tenant, SACHI)

    response = api.delete(f"/api/v1/users/{SACHI}/")

    assert response.status_code == 403
    assert EndUser.objects.filter(external_id=SACHI).exists()


def records_of(document: dict, kind: str) -> list[dict]:
    return [record for record in document["records"] if record["type"] == kind]


def test_export_holds_everything_in_a_versioned_document(api, tenant):
    remember_everything(tenant, SACHI)
    remember_everything(tenant, BOB)

    response = api.get(f"/api/v1/users/{SACHI}/export/")

    assert response.status_code == 200
    document = response.json()
    assert document["format"] == EXPORT_FORMAT
    assert document["schema_version"] == EXPORT_SCHEMA_VERSION
    assert document["user_id"] == SACHI
    assert [person["user_id"] for person in records_of(document, "end_user")] == [SACHI]
    assert [m["content"] for m in records_of(document, "message")] == ["I like peanuts", "Noted"]
    assert records_of(document, "state")[0]["key"] == "working_memory"
    assert records_of(document, "summary")[0]["text"] == "The user likes peanuts."
    memory = records_of(document, "memory")[0]
    assert (memory["content"], memory["versions"][0]["content"]) == ("cashews", "peanuts")
    assert [fact["content"] for fact in records_of(document, "fact")] == [f"{SACHI} likes peanuts"]
    assert {note["kind"] for note in records_of(document, "note")} == {"long_term", "daily"}
    assert BOB not in response.content.decode()
    assert AuditEvent.objects.filter(
        tenant=tenant, action=AuditAction.EXPORT, object_id=SACHI
    ).exists()


def test_export_then_erase_round_trip_keeps_the_whole_document(tenant, make_key):
    """The export taken before erasure holds every row, and imports back whole."""
    _, secret = make_key(tenant, scopes=["read", "write", "purge"])
    client = client_for(secret)
    remember_everything(tenant, SACHI)
    counts_before = {
        "sessions": Session.objects.count(),
        "messages": Message.objects.count(),
        "state": StateEntry.objects.count(),
        "memories": UserMemory.objects.count(),
        "versions": UserMemoryVersion.objects.count(),
        "facts": Fact.objects.count(),
        "notes": Note.objects.count(),
    }

    document = client.get(f"/api/v1/users/{SACHI}/export/").json()
    client.delete(f"/api/v1/users/{SACHI}/")

    assert {
        "sessions": len(records_of(document, "session")),
        "messages": len(records_of(document, "message")),
        "state": len(records_of(document, "state")),
        "memories": len(records_of(document, "memory")),
        "versions": sum(len(m["versions"]) for m in records_of(document, "memory")),
        "facts": len(records_of(document, "fact")),
        "notes": sum(len(n["versions"]) for n in records_of(document, "note")),
    } == counts_before
    assert Session.objects.count() == Fact.objects.count() == Note.objects.count() == 0


def test_list_and_show_people(api, tenant):
    remember_everything(tenant, SACHI)

    listed = api.get("/api/v1/users/").json()["results"]
    shown = api.get(f"/api/v1/users/{SACHI}/").json()

    assert [row["user_id"] for row in listed] == [SACHI]
    assert shown["counts"] == {"sessions": 1, "memories": 1, "facts": 1, "notes": 2}


def test_an_unknown_person_is_a_404_everywhere(api, tenant, make_key):
    _, secret = make_key(tenant, scopes=["read", "write", "purge"])
    for path in ("/api/v1/users/nobody/", "/api/v1/users/nobody/export/"):
        assert api.get(path).status_code == 404
    assert client_for(secret).delete("/api/v1/users/nobody/").status_code == 404


class TestOutsider:
    @pytest.fixture(autouse=True)
    def _sachi(self, tenant):
        remember_everything(tenant, SACHI)

    def test_show_export_and_erase_are_404(self, outsider_api):
        assert outsider_api.get(f"/api/v1/users/{SACHI}/").status_code == 404
        assert outsider_api.get(f"/api/v1/users/{SACHI}/export/").status_code == 404
        assert outsider_api.delete(f"/api/v1/users/{SACHI}/").status_code == 404
        assert EndUser.objects.filter(external_id=SACHI).exists()

    def test_list_shows_only_their_own_people(self, outsider_api):
        assert outsider_api.get("/api/v1/users/").json()["results"] == []
