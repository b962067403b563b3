"""Deletes in the admin go through the audited services the API uses: a person, a session, a
memory, a fact or a note deleted from its delete page or with "delete selected" leaves one
audit event per object (staff, the username, the rows removed per kind) and takes what cascades.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.db.models import Model
from django.urls import reverse

from facts_app.models import Fact, Note, UserMemory, UserMemoryVersion
from facts_app.services.facts import fact_create
from facts_app.services.memories import memory_save
from facts_app.services.notes import note_long_term_save
from memoryhub.accounts.models import (
    AuditAction,
    AuditEvent,
    EndUser,
    IdempotencyRecord,
    Tenant,
    User,
)
from memoryhub.accounts.services import end_user_get_or_create
from sessions_app import services
from sessions_app.models import Message, Session, StateEntry
from sessions_app.services import MessageInput


@dataclass(frozen=True)
class Person:
    """One person with one of everything, all built through the services."""

    end_user: EndUser
    session: Session
    memory: UserMemory
    fact: Fact
    note: Note


def a_person(tenant: Tenant, user_id: str) -> Person:
    end_user = end_user_get_or_create(tenant=tenant, external_id=user_id)
    session, _ = services.session_create_or_get(tenant=tenant, user_id=user_id)
    services.message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[
            MessageInput(role="user", content="I like tea"),
            MessageInput(role="assistant", content="Noted"),
        ],
    )
    services.state_set(tenant=tenant, session_id=session.pk, key="mood", value="calm", cap=10)
    memory_save(tenant=tenant, end_user=end_user, key="drink", content="tea")
    memory, _ = memory_save(tenant=tenant, end_user=end_user, key="drink", content="green tea")
    fact, _ = fact_create(tenant=tenant, end_user=end_user, content=f"{user_id} likes tea")
    return Person(
        end_user=end_user,
        session=session,
        memory=memory,
        fact=fact,
        note=note_long_term_save(tenant=tenant, end_user=end_user, content="Likes tea."),
    )


@dataclass(frozen=True)
class Case:
    """What deleting one object of a model through the admin must audit."""

    admin_name: str  # app_label_modelname
    pick: str  # the Person attribute deleted
    object_type: str
    action: str
    counts: dict[str, int]

    def object_id(self, obj: Any) -> str:
        if isinstance(obj, EndUser):
            return obj.external_id
        if isinstance(obj, UserMemory):
            return f"{obj.end_user.external_id}:{obj.key}"
        return str(obj.pk)


CASES = [
    Case(
        "accounts_enduser",
        "end_user",
        "end_user",
        AuditAction.ERASE,
        {
            "end_users": 1,
            "facts": 1,
            "messages": 2,
            "notes": 1,
            "sessions": 1,
            "state_entries": 1,
            "user_memories": 1,
            "user_memory_versions": 1,
        },
    ),
    Case(
        "sessions_app_session",
        "session",
        "session",
        AuditAction.DELETE,
        {"messages": 2, "sessions": 1, "state_entries": 1},
    ),
    Case(
        "facts_app_usermemory",
        "memory",
        "user_memory",
        AuditAction.DELETE,
        {"user_memories": 1, "user_memory_versions": 1},
    ),
    Case("facts_app_fact", "fact", "fact", AuditAction.DELETE, {"facts": 1}),
    Case("facts_app_note", "note", "note", AuditAction.DELETE, {"notes": 1}),
]
IDS = [case.admin_name for case in CASES]


@pytest.fixture
def staff_client(client, db):
    client.force_login(User.objects.create_superuser(username="root", password="pw-tests-only"))
    return client


def gone(obj: Model) -> bool:
    return not type(obj).objects.filter(pk=obj.pk).exists()


def assert_audited(case: Case, obj: Any, tenant: Tenant) -> None:
    event = AuditEvent.objects.get(tenant=tenant, object_id=case.object_id(obj))
    assert (event.actor_type, event.actor) == ("staff", "root")
    assert (event.action, event.object_type) == (case.action, case.object_type)
    assert event.counts == case.counts


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_it_audits_a_delete_from_the_objects_delete_page(staff_client, tenant, case):
    person, bystander = a_person(tenant, "u1"), a_person(tenant, "u2")
    obj = getattr(person, case.pick)
    before = AuditEvent.objects.count()

    response = staff_client.post(
        reverse(f"admin:{case.admin_name}_delete", args=[obj.pk]), {"post": "yes"}
    )

    assert response.status_code == 302
    assert AuditEvent.objects.count() == before + 1
    assert_audited(case, obj, tenant)
    assert gone(obj)
    assert not gone(getattr(bystander, case.pick))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_it_audits_each_object_of_a_delete_selected(staff_client, tenant, case):
    people = [a_person(tenant, "u1"), a_person(tenant, "u2")]
    bystander = a_person(tenant, "u3")
    objects = [getattr(person, case.pick) for person in people]
    before = AuditEvent.objects.count()

    response = staff_client.post(
        reverse(f"admin:{case.admin_name}_changelist"),
        {
            "action": "delete_selected",
            "_selected_action": [str(obj.pk) for obj in objects],
            "post": "yes",
        },
    )

    assert response.status_code == 302
    assert AuditEvent.objects.count() == before + len(objects)
    for obj in objects:
        assert_audited(case, obj, tenant)
        assert gone(obj)
    assert not gone(getattr(bystander, case.pick))


def test_erasing_a_person_in_the_admin_takes_everything_of_theirs(staff_client, tenant):
    person, bystander = a_person(tenant, "u1"), a_person(tenant, "u2")

    staff_client.post(
        reverse("admin:accounts_enduser_delete", args=[person.end_user.pk]), {"post": "yes"}
    )

    mine = {"end_user": person.end_user}
    for model in (Session, Fact, Note, UserMemory):
        assert not model.objects.filter(**mine).exists(), model
    assert not Message.objects.filter(session=person.session).exists()
    assert not StateEntry.objects.filter(session=person.session).exists()
    assert not UserMemoryVersion.objects.filter(memory=person.memory).exists()
    assert Message.objects.filter(session=bystander.session).count() == 2


def test_deleting_a_session_in_the_admin_takes_its_messages_and_state(staff_client, tenant):
    person = a_person(tenant, "u1")

    staff_client.post(
        reverse("admin:sessions_app_session_delete", args=[person.session.pk]), {"post": "yes"}
    )

    assert not Message.objects.filter(session_id=person.session.pk).exists()
    assert not StateEntry.objects.filter(session_id=person.session.pk).exists()
    assert not gone(person.end_user)
    assert not gone(person.fact)


def test_a_person_with_stored_idempotent_responses_can_be_erased_in_the_admin(staff_client, tenant):
    # Stored responses have a read-only admin; they are derived from the person's writes and
    # must go with the erasure rather than block it.
    person = a_person(tenant, "u1")
    IdempotencyRecord.objects.create(
        tenant=tenant,
        end_user=person.end_user,
        key="retry-1",
        scope="POST /api/v1/sessions/x/messages/",
        request_hash="0" * 64,
        response_status=201,
        response_body={"content": "I like tea"},
    )

    page = staff_client.get(reverse("admin:accounts_enduser_delete", args=[person.end_user.pk]))
    response = staff_client.post(
        reverse("admin:accounts_enduser_delete", args=[person.end_user.pk]), {"post": "yes"}
    )

    assert page.status_code == 200
    assert response.status_code == 302
    assert gone(person.end_user)
    assert not IdempotencyRecord.objects.filter(tenant=tenant).exists()
