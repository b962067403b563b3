import datetime as dt
import uuid

import pytest
from django.utils import timezone

from memoryhub.accounts.models import AuditAction, AuditEvent, EndUser
from sessions_app.models import Message, Session, StateEntry
from tests.factories import EndUserFactory, SessionFactory
from tests.helpers import error_code, error_fields

SESSIONS = "/api/v1/sessions/"


def detail(session_id: object) -> str:
    return f"{SESSIONS}{session_id}/"


class TestCreate:
    def test_it_creates_a_session_with_a_uuidv7_id(self, api, tenant):
        response = api.post(
            SESSIONS,
            {"user_id": "tui:local", "agent_id": "chat", "metadata": {"channel": "tui"}},
            format="json",
        )

        assert response.status_code == 201
        body = response.json()
        assert uuid.UUID(body["id"]).version == 7
        assert body["user_id"] == "tui:local"
        assert body["agent_id"] == "chat"
        assert body["metadata"] == {"channel": "tui"}
        assert body["message_count"] == 0
        assert EndUser.objects.get(tenant=tenant, external_id="tui:local")

    def test_it_creates_a_session_without_a_user(self, api):
        response = api.post(SESSIONS, {}, format="json")

        assert response.status_code == 201
        assert response.json()["user_id"] is None

    def test_it_returns_the_existing_session_for_a_known_external_key(self, api):
        payload = {"user_id": "u1", "external_key": "whatsapp:chat-1:thread-9"}
        first = api.post(SESSIONS, payload, format="json")
        again = api.post(SESSIONS, payload, format="json")

        assert first.status_code == 201
        assert again.status_code == 200
        assert again.json()["id"] == first.json()["id"]
        assert Session.objects.count() == 1

    def test_a_retried_create_with_an_idempotency_key_makes_one_session(self, api):
        first = api.post(SESSIONS, {"user_id": "u"}, format="json", HTTP_IDEMPOTENCY_KEY="c-1")
        retry = api.post(SESSIONS, {"user_id": "u"}, format="json", HTTP_IDEMPOTENCY_KEY="c-1")

        assert first.status_code == retry.status_code == 201
        assert retry.json()["id"] == first.json()["id"]
        assert retry["Idempotent-Replayed"] == "true"
        assert Session.objects.count() == 1

    def test_it_refuses_an_external_key_held_by_another_users_session(self, api):
        api.post(SESSIONS, {"user_id": "alice", "external_key": "k"}, format="json")

        response = api.post(SESSIONS, {"user_id": "bob", "external_key": "k"}, format="json")

        assert response.status_code == 409
        assert error_code(response) == "external_key_conflict"

    def test_external_keys_are_per_tenant(self, api, outsider_api):
        mine = api.post(SESSIONS, {"external_key": "shared"}, format="json")
        theirs = outsider_api.post(SESSIONS, {"external_key": "shared"}, format="json")

        assert mine.status_code == theirs.status_code == 201
        assert mine.json()["id"] != theirs.json()["id"]

    @pytest.mark.parametrize(
        ("payload", "field", "code"),
        [
            ({"metadata": "not an object"}, "metadata", "not_a_dict"),
            ({"metadata": {"x": "a" * 20_000}}, "metadata", "too_large"),
            ({"metadata": {"x": "nul\x00"}}, "metadata", "null_characters_not_allowed"),
            ({"agent_id": "a" * 129}, "agent_id", "max_length"),
            ({"user_id": "u" * 256}, "user_id", "max_length"),
            ({"user_id": 5.5}, "user_id", "invalid"),
        ],
    )
    def test_it_explains_each_bad_field(self, api, payload, field, code):
        response = api.post(SESSIONS, payload, format="json")

        assert response.status_code == 400
        assert error_code(response) == "validation_error"
        assert error_fields(response)[field][0]["code"] == code
        assert Session.objects.count() == 0


class TestList:
    def test_it_lists_newest_activity_first(self, api, tenant):
        now = timezone.now()
        old = SessionFactory(tenant=tenant, last_active_at=now - dt.timedelta(hours=2))
        new = SessionFactory(tenant=tenant, last_active_at=now)

        response = api.get(SESSIONS)

        assert response.status_code == 200
        assert [row["id"] for row in response.json()["results"]] == [str(new.id), str(old.id)]

    def test_it_filters_by_user_agent_and_activity(self, api, tenant):
        now = timezone.now()
        alice_user = EndUserFactory(tenant=tenant, external_id="alice")
        alice = SessionFactory(tenant=tenant, end_user=alice_user, agent_id="chat")
        SessionFactory(tenant=tenant, end_user__external_id="bob", agent_id="chat")
        SessionFactory(tenant=tenant, end_user=alice_user, agent_id="planner")
        stale = SessionFactory(
            tenant=tenant,
            end_user=alice.end_user,
            agent_id="chat",
            last_active_at=now - dt.timedelta(days=10),
        )

        by_user_agent = api.get(SESSIONS, {"user_id": "alice", "agent_id": "chat"}).json()
        recent = api.get(
            SESSIONS,
            {
                "user_id": "alice",
                "agent_id": "chat",
                "active_since": (now - dt.timedelta(days=1)).isoformat(),
            },
        ).json()
        old = api.get(SESSIONS, {"active_before": (now - dt.timedelta(days=1)).isoformat()}).json()

        assert {row["id"] for row in by_user_agent["results"]} == {str(alice.id), str(stale.id)}
        assert [row["id"] for row in recent["results"]] == [str(alice.id)]
        assert [row["id"] for row in old["results"]] == [str(stale.id)]

    def test_it_pages_with_a_cursor_through_every_session_once(self, api, tenant):
        now = timezone.now()
        created = {
            str(SessionFactory(tenant=tenant, last_active_at=now - dt.timedelta(minutes=i)).id)
            for i in range(7)
        }

        seen: list[str] = []
        page = api.get(SESSIONS, {"limit": 3}).json()
        while True:
            seen += [row["id"] for row in page["results"]]
            if not page["next"]:
                break
            page = api.get(page["next"]).json()

        assert len(seen) == 7
        assert set(seen) == created

    @pytest.mark.parametrize(
        "moment",
        ["2882-12-28T21:06:31-19:29", "9999-12-31T23:59:59-10:00", "2026-01-01T00:00:00+14:00"],
    )
    def test_odd_utc_offsets_are_normalised_or_refused_never_a_500(self, api, moment):
        response = api.get(SESSIONS, {"active_since": moment})

        assert response.status_code in (200, 400)

    def test_it_refuses_a_bad_filter_or_cursor_with_400(self, api):
        assert api.get(SESSIONS, {"active_since": "yesterday"}).status_code == 400
        assert api.get(SESSIONS, {"cursor": "garbage"}).status_code == 400
        assert api.get(SESSIONS, {"limit": "0"}).status_code == 400

    def test_it_caps_the_page_size(self, api, tenant, limits):
        limits["PAGE_SIZE_MAX"] = 2
        SessionFactory.create_batch(3, tenant=tenant)

        assert len(api.get(SESSIONS, {"limit": 1000}).json()["results"]) == 2

    def test_it_never_lists_another_tenants_sessions(self, api, other_tenant):
        SessionFactory(tenant=other_tenant)

        assert api.get(SESSIONS).json()["results"] == []

    def test_it_uses_a_fixed_number_of_queries(self, api, tenant, django_assert_max_num_queries):
        api.get(SESSIONS)  # first use writes the key's last_used_at
        SessionFactory.create_batch(25, tenant=tenant)

        # key lookup + page of sessions with their end users
        with django_assert_max_num_queries(2):
            response = api.get(SESSIONS)
        assert len(response.json()["results"]) == 25


class TestDetail:
    def test_it_gets_a_session(self, api, session):
        response = api.get(detail(session.id))

        assert response.status_code == 200
        assert response.json()["user_id"] == "whatsapp:+4912345"

    def test_it_patches_metadata_agent_and_external_key_and_touches_activity(self, api, session):
        before = session.last_active_at

        response = api.patch(
            detail(session.id),
            {"metadata": {"topic": "rust"}, "agent_id": "planner", "external_key": "tg:1:2"},
            format="json",
        )

        assert response.status_code == 200
        session.refresh_from_db()
        assert session.metadata == {"topic": "rust"}
        assert session.agent_id == "planner"
        assert session.external_key == "tg:1:2"
        assert session.last_active_at > before

    def test_it_clears_an_external_key_with_null(self, api, tenant):
        created = api.post(SESSIONS, {"external_key": "k"}, format="json").json()

        api.patch(detail(created["id"]), {"external_key": None}, format="json")

        assert Session.objects.get(pk=created["id"]).external_key is None

    def test_it_refuses_an_external_key_taken_by_another_session(self, api, tenant):
        api.post(SESSIONS, {"external_key": "taken"}, format="json")
        other = api.post(SESSIONS, {}, format="json").json()

        response = api.patch(detail(other["id"]), {"external_key": "taken"}, format="json")

        assert response.status_code == 409

    def test_it_deletes_a_session_with_its_memory_and_audits_it(self, api, session, tenant):
        api.post(f"{detail(session.id)}messages/", {"role": "user", "content": "hi"}, format="json")
        api.put(f"{detail(session.id)}state/k/", {"value": 1}, format="json")

        response = api.delete(detail(session.id))

        assert response.status_code == 204
        assert not Session.objects.filter(pk=session.pk).exists()
        assert not Message.objects.filter(session_id=session.pk).exists()
        assert not StateEntry.objects.filter(session_id=session.pk).exists()
        event = AuditEvent.objects.get(tenant=tenant, action=AuditAction.DELETE)
        assert event.counts == {"sessions": 1, "messages": 1, "state_entries": 1}
        assert event.object_id == str(session.pk)
        assert event.actor.startswith("api_key:")

    @pytest.mark.parametrize("bad_id", ["not-a-uuid", "12345", str(uuid.uuid4())])
    def test_a_bad_or_unknown_id_is_a_404(self, api, bad_id):
        response = api.get(detail(bad_id))

        assert response.status_code == 404
        assert error_code(response) == "not_found"


class TestOutsider:
    """Another tenant's session id is a 404 on every method, and nothing changes."""

    def test_get_is_404(self, outsider_api, session):
        assert outsider_api.get(detail(session.id)).status_code == 404

    def test_patch_is_404(self, outsider_api, session):
        response = outsider_api.patch(detail(session.id), {"agent_id": "x"}, format="json")

        assert response.status_code == 404
        session.refresh_from_db()
        assert session.agent_id == "chat"

    def test_delete_is_404(self, outsider_api, session):
        assert outsider_api.delete(detail(session.id)).status_code == 404
        assert Session.objects.filter(pk=session.pk).exists()

    def test_external_key_lookup_does_not_cross_tenants(self, api, outsider_api):
        mine = api.post(SESSIONS, {"external_key": "secret-thread"}, format="json").json()

        theirs = outsider_api.post(SESSIONS, {"external_key": "secret-thread"}, format="json")

        assert theirs.status_code == 201
        assert theirs.json()["id"] != mine["id"]
