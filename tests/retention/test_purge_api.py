"""POST /api/v1/purge/: a session, a person, or history older than N days; a dry run counts
exactly what the purge then removes; bad input and foreign ids remove nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from facts_app.models import Fact
from facts_app.services.facts import fact_create
from facts_app.services.memories import memory_save
from memoryhub.accounts.models import AuditEvent, EndUser
from sessions_app.models import Message, Session, StateEntry
from sessions_app.services import (
    MessageInput,
    message_append_batch,
    session_create_or_get,
    state_set,
)
from tests.helpers import client_for, error_code, error_fields

URL = "/api/v1/purge/"
DAY = dt.timedelta(days=1)


@pytest.fixture
def purge_api(tenant, make_key):
    return client_for(make_key(tenant, scopes=["read", "write", "purge"])[1])


def conversation(tenant, *, user: str, days_old: float, messages: int = 3) -> Session:
    session, _ = session_create_or_get(tenant=tenant, user_id=user, agent_id="chat")
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[MessageInput(role="user", content=f"m{i}") for i in range(messages)],
    )
    state_set(tenant=tenant, session_id=session.pk, key="k", value=1)
    moment = timezone.now() - dt.timedelta(days=days_old)
    Message.objects.filter(session=session).update(created_at=moment)
    Session.objects.filter(pk=session.pk).update(last_active_at=moment)
    return session


def snapshot() -> tuple[int, ...]:
    return (
        Session.objects.count(),
        Message.objects.count(),
        StateEntry.objects.count(),
        EndUser.objects.count(),
        Fact.objects.count(),
    )


def purge(client, body):
    return client.post(URL, body, format="json")


class TestScopeSession:
    def test_dry_run_then_purge(self, purge_api, tenant):
        session = conversation(tenant, user="u1", days_old=0)
        body = {"scope": "session", "session_id": str(session.pk)}

        dry = purge(purge_api, {**body, "dry_run": True})
        assert Session.objects.filter(pk=session.pk).exists()
        real = purge(purge_api, body)

        assert dry.status_code == real.status_code == 200
        expected = {"messages": 3, "sessions": 1, "state_entries": 1}
        assert dry.json() == {"scope": "session", "dry_run": True, "counts": expected, "total": 5}
        assert real.json()["counts"] == expected
        assert not Session.objects.filter(pk=session.pk).exists()
        event = AuditEvent.objects.get(action="purge")
        assert (event.object_type, event.object_id, event.counts) == (
            "session",
            str(session.pk),
            expected,
        )

    def test_facts_extracted_from_it_survive(self, purge_api, tenant):
        session = conversation(tenant, user="u1", days_old=0)
        fact_create(
            tenant=tenant,
            end_user=session.end_user,
            content="Likes tea",
            source_session_id=session.pk,
        )

        purge(purge_api, {"scope": "session", "session_id": str(session.pk)})

        assert Fact.objects.get().source_session_id == session.pk


class TestScopeUser:
    def test_dry_run_then_purge_everything_about_the_person(self, purge_api, tenant):
        session = conversation(tenant, user="u1", days_old=0)
        conversation(tenant, user="u2", days_old=0)
        memory_save(tenant=tenant, end_user=session.end_user, key="name", content="Ana")
        fact_create(tenant=tenant, end_user=session.end_user, content="Likes tea")

        dry = purge(purge_api, {"scope": "user", "user_id": "u1", "dry_run": True}).json()
        real = purge(purge_api, {"scope": "user", "user_id": "u1"}).json()

        assert dry["counts"] == real["counts"]
        assert real["counts"] == {
            "end_users": 1,
            "facts": 1,
            "messages": 3,
            "sessions": 1,
            "state_entries": 1,
            "user_memories": 1,
        }
        assert list(EndUser.objects.values_list("external_id", flat=True)) == ["u2"]
        assert Message.objects.count() == 3


class TestScopeOlderThan:
    def test_dry_run_then_purge_for_the_tenant(self, purge_api, tenant):
        old = conversation(tenant, user="u1", days_old=10)
        new = conversation(tenant, user="u2", days_old=1)

        dry = purge(purge_api, {"scope": "older_than", "days": 5, "dry_run": True}).json()
        real = purge(purge_api, {"scope": "older_than", "days": 5}).json()

        assert dry["counts"] == real["counts"] == {"messages": 3, "sessions": 1, "state_entries": 1}
        assert not Session.objects.filter(pk=old.pk).exists()
        assert Session.objects.filter(pk=new.pk).exists()
        event = AuditEvent.objects.get(action="purge")
        assert (event.object_type, event.detail["days"]) == ("older_than", 5)

    def test_only_one_persons_history(self, purge_api, tenant):
        conversation(tenant, user="u1", days_old=10)
        theirs = conversation(tenant, user="u2", days_old=10)

        real = purge(purge_api, {"scope": "older_than", "days": 5, "user_id": "u1"}).json()

        assert real["total"] == 5
        assert Session.objects.filter(pk=theirs.pk).exists()


class TestRefused:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"scope": "everything"}, "scope"),
            ({}, "scope"),
            ({"scope": "older_than", "days": -1}, "days"),
            ({"scope": "older_than", "days": 0}, "days"),
            ({"scope": "older_than", "days": "ten"}, "days"),
            ({"scope": "older_than"}, "days"),
            ({"scope": "session"}, "session_id"),
            ({"scope": "session", "session_id": "not-a-uuid"}, "session_id"),
            ({"scope": "user"}, "user_id"),
            ({"scope": "user", "user_id": ""}, "user_id"),
            ({"scope": "user", "user_id": "u1", "days": 3}, "days"),
            ({"scope": "older_than", "days": 3, "dry_run": "maybe"}, "dry_run"),
        ],
    )
    def test_bad_input_is_a_400_per_field_and_removes_nothing(self, purge_api, tenant, body, field):
        conversation(tenant, user="u1", days_old=10)
        before = snapshot()

        response = purge(purge_api, body)

        assert response.status_code == 400, response.content
        assert field in error_fields(response)
        assert snapshot() == before

    def test_a_key_without_the_purge_scope_is_a_403(self, api, tenant):
        session = conversation(tenant, user="u1", days_old=10)
        before = snapshot()

        response = purge(api, {"scope": "session", "session_id": str(session.pk)})

        assert response.status_code == 403
        assert error_code(response) == "insufficient_scope"
        assert snapshot() == before

    def test_an_outsider_gets_404_for_a_session_or_user_and_removes_nothing(
        self, outsider_api, tenant
    ):
        session = conversation(tenant, user="u1", days_old=10)
        before = snapshot()

        for body in (
            {"scope": "session", "session_id": str(session.pk)},
            {"scope": "user", "user_id": "u1"},
            {"scope": "older_than", "days": 1, "user_id": "u1"},
        ):
            for dry_run in (True, False):
                response = purge(outsider_api, {**body, "dry_run": dry_run})
                assert response.status_code == 404, (body, response.content)
        # The outsider's own tenant-wide purge touches only its own (empty) tenant.
        assert purge(outsider_api, {"scope": "older_than", "days": 1}).json()["total"] == 0
        assert snapshot() == before

    def test_without_a_key_it_is_a_401(self, client, tenant):
        assert client.post(URL, {"scope": "older_than", "days": 1}).status_code == 401
