"""Seed 004's fact ids and times owned by the caller (imports, backfills: accepted, never
silently ignored), and seed 003's zone-wide note calls: show and an on-demand prune."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from facts_app.models import Fact, Note, NoteKind
from facts_app.services.notes import note_daily_append, note_long_term_save, today_utc
from memoryhub.accounts.models import AuditEvent, EndUser, MemoryPolicy
from memoryhub.accounts.services import end_user_get_or_create
from tests.helpers import error_code, error_fields

USER = "sclaw:chat-1"
FACTS = "/api/v1/facts/"
DAY = dt.timedelta(days=1)


def post(api, **body):
    return api.post(FACTS, {"user_id": USER, **body}, format="json")


class TestClientFactIds:
    def test_an_id_and_a_time_are_kept(self, api, tenant):
        when = "2025-03-01T10:00:00Z"

        response = post(api, content="Likes Go", external_id="1700-0-1", created_at=when)

        assert response.status_code == 201, response.content
        body = response.json()
        assert body["external_id"] == "1700-0-1"
        assert body["created_at"].startswith("2025-03-01T10:00:00")
        fact = Fact.objects.get(pk=body["id"])
        assert fact.created_at == dt.datetime(2025, 3, 1, 10, tzinfo=dt.UTC)
        assert fact.metadata == {"external_id": "1700-0-1"}

    def test_a_retry_does_not_duplicate(self, api, tenant):
        first = post(api, content="Likes Go", external_id="f1")
        again = post(api, content="Likes Go", external_id="f1")

        assert (first.status_code, again.status_code) == (201, 200)
        assert again.json()["id"] == first.json()["id"]
        assert Fact.objects.filter(tenant=tenant).count() == 1

    def test_the_id_on_another_fact_is_a_409(self, api, tenant):
        post(api, content="Likes Go", external_id="f1")

        response = post(api, content="Likes Rust", external_id="f1")

        assert response.status_code == 409
        assert error_code(response) == "fact_id_conflict"
        assert Fact.objects.filter(tenant=tenant).count() == 1

    def test_the_id_is_unique_per_tenant_not_across_tenants(self, api, outsider_api):
        assert post(api, content="Likes Go", external_id="f1").status_code == 201
        assert post(outsider_api, content="Likes Go", external_id="f1").status_code == 201

    def test_a_text_stored_without_an_id_takes_it(self, api, tenant):
        plain = post(api, content="Likes Go").json()

        response = post(api, content="Likes Go", external_id="f9")

        assert (response.status_code, response.json()["id"]) == (200, plain["id"])
        assert response.json()["external_id"] == "f9"

    def test_a_future_time_is_a_400(self, api, tenant):
        later = (timezone.now() + DAY).isoformat()

        response = post(api, content="Likes Go", external_id="f1", created_at=later)

        assert response.status_code == 400
        assert error_fields(response)["created_at"][0]["code"] == "created_at_in_future"
        assert not Fact.objects.filter(tenant=tenant).exists()

    def test_the_id_in_metadata_is_the_id(self, api, tenant):
        response = post(api, content="Likes Go", metadata={"external_id": "m1"})
        assert response.json()["external_id"] == "m1"
        mismatch = post(api, content="Likes C", external_id="x", metadata={"external_id": "y"})
        assert mismatch.status_code == 400
        assert "external_id" in error_fields(mismatch)

    def test_a_patch_keeps_the_id_and_refuses_another(self, api, tenant):
        fact = post(api, content="Likes Go", external_id="f1").json()
        detail = f"{FACTS}{fact['id']}/"

        kept = api.patch(detail, {"metadata": {"source": "import"}}, format="json")
        changed = api.patch(detail, {"metadata": {"external_id": "f2"}}, format="json")

        assert kept.json()["metadata"] == {"source": "import", "external_id": "f1"}
        assert changed.status_code == 400
        assert error_fields(changed)["metadata"][0]["code"] == "external_id_immutable"


def notes(user: str, tail: str) -> str:
    return f"/api/v1/users/{user}/notes/{tail}"


@pytest.fixture
def person(tenant) -> EndUser:
    return end_user_get_or_create(tenant=tenant, external_id=USER)


class TestNotesShow:
    def test_long_term_today_recent_counts_and_latest_change(self, api, tenant, person):
        today = today_utc()
        note_long_term_save(tenant=tenant, end_user=person, content="Prefers Python.")
        note_long_term_save(tenant=tenant, end_user=person, content="Prefers Python 3.12.")
        note_daily_append(tenant=tenant, end_user=person, content="shipped", day=today)
        note_daily_append(tenant=tenant, end_user=person, content="designed", day=today - DAY)
        note_daily_append(tenant=tenant, end_user=person, content="old", day=today - 20 * DAY)

        response = api.get(notes(USER, "show/"))

        assert response.status_code == 200
        body = response.json()
        assert body["long_term"]["content"] == "Prefers Python 3.12."
        assert (body["today"]["day"], body["today"]["content"]) == (str(today), "shipped")
        assert [note["content"] for note in body["recent"]] == ["designed"]
        assert body["counts"] == {"long_term_versions": 2, "daily_notes": 3, "daily_versions": 3}
        latest = Note.objects.filter(end_user=person).order_by("-created_at")[0].created_at
        assert dt.datetime.fromisoformat(body["latest_change_at"]) == latest

    def test_a_person_without_notes_gets_an_empty_answer(self, api, person):
        body = api.get(notes(USER, "show/")).json()

        assert body == {
            "long_term": None,
            "today": None,
            "recent": [],
            "counts": {"long_term_versions": 0, "daily_notes": 0, "daily_versions": 0},
            "latest_change_at": None,
        }

    def test_the_query_count_does_not_grow(
        self, api, tenant, person, django_assert_max_num_queries
    ):
        today = today_utc()
        note_daily_append(tenant=tenant, end_user=person, content="a", day=today)
        with django_assert_max_num_queries(8) as small:
            api.get(notes(USER, "show/"))
        for back in range(1, 30):
            note_daily_append(tenant=tenant, end_user=person, content="x", day=today - back * DAY)
        with django_assert_max_num_queries(len(small.captured_queries)):
            assert len(api.get(notes(USER, "show/")).json()["recent"]) == 7

    def test_an_outsider_gets_404(self, outsider_api, person):
        assert outsider_api.get(notes(USER, "show/")).status_code == 404


class TestNotesPrune:
    def test_prunes_past_the_policy_days_audited(self, api, tenant, person):
        today = today_utc()
        other = end_user_get_or_create(tenant=tenant, external_id="someone-else")
        for owner in (person, other):
            note_daily_append(tenant=tenant, end_user=owner, content="old", day=today - 31 * DAY)
        note_daily_append(tenant=tenant, end_user=person, content="kept", day=today - 29 * DAY)
        note_long_term_save(tenant=tenant, end_user=person, content="Long-term stays.")

        dry = api.post(notes(USER, "prune/"), {"dry_run": True}, format="json").json()
        real = api.post(notes(USER, "prune/"), {}, format="json").json()
        again = api.post(notes(USER, "prune/"), {}, format="json").json()

        assert (dry["pruned"], dry["dry_run"], real["pruned"], again["pruned"]) == (1, True, 1, 0)
        assert real["retention_days"] == 30
        assert real["cutoff"] == str(today - 30 * DAY)
        left = Note.objects.filter(tenant=tenant, kind=NoteKind.DAILY)
        assert sorted(left.values_list("end_user__external_id", "content")) == [
            ("sclaw:chat-1", "kept"),
            ("someone-else", "old"),
        ]
        assert Note.objects.filter(end_user=person, kind=NoteKind.LONG_TERM).count() == 1
        event = AuditEvent.objects.get(tenant=tenant, object_type="daily_notes")
        assert (event.action, event.object_id, event.counts) == (
            "purge",
            USER,
            {"daily_notes": 1},
        )

    def test_the_policy_decides_and_forever_prunes_nothing(self, api, tenant, person):
        note_daily_append(tenant=tenant, end_user=person, content="old", day=today_utc() - 10 * DAY)
        MemoryPolicy.objects.create(tenant=tenant, daily_note_retention_days=None)

        body = api.post(notes(USER, "prune/"), {}, format="json").json()

        assert (body["pruned"], body["retention_days"], body["cutoff"]) == (0, None, None)

    def test_unknown_fields_are_refused(self, api, person):
        response = api.post(notes(USER, "prune/"), {"days": 3}, format="json")

        assert response.status_code == 400

    def test_an_outsider_gets_404_and_prunes_nothing(self, outsider_api, tenant, person):
        note_daily_append(tenant=tenant, end_user=person, content="old", day=today_utc() - 40 * DAY)

        assert outsider_api.post(notes(USER, "prune/"), {}, format="json").status_code == 404
        assert Note.objects.filter(end_user=person).count() == 1

    def test_a_read_only_key_gets_403(self, read_only_api, person):
        assert read_only_api.post(notes(USER, "prune/"), {}, format="json").status_code == 403
