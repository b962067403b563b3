"""Notes (seed 003) through the API: append-only versions, daily appends, recall, clear, and the
three actors (owner, read-only key, outsider)."""

import datetime as dt

import pytest

from facts_app.models import Note, NoteKind
from facts_app.services.notes import today_utc
from memoryhub.accounts.models import EndUser
from tests.helpers import error_code, error_fields

USER = "whatsapp:+4912345"


def notes_url(user_id: str = USER, tail: str = "") -> str:
    return f"/api/v1/users/{user_id}/notes/{tail}"


def save(api, content, user_id=USER):
    return api.put(notes_url(user_id, "long-term/"), {"content": content}, format="json")


def append(api, content, day=None, user_id=USER, **extra):
    payload = {"content": content}
    if day is not None:
        payload["day"] = str(day)
    return api.post(notes_url(user_id, "daily/"), payload, format="json", **extra)


def rows(tenant) -> list[tuple]:
    """Every note version of a tenant, as plain values: what "unchanged" is checked against."""
    return list(
        Note.objects.filter(tenant=tenant)
        .order_by("end_user__external_id", "kind", "day", "version")
        .values_list("end_user__external_id", "kind", "day", "version", "content", "created_at")
    )


TODAY = today_utc()


class TestLongTerm:
    def test_it_saves_and_reads_the_long_term_note(self, api):
        saved = save(api, "Prefers Python 3.12. Always use type hints.")
        fetched = api.get(notes_url(tail="long-term/"))

        assert saved.status_code == 200
        assert saved.json()["version"] == 1
        assert fetched.json()["content"] == "Prefers Python 3.12. Always use type hints."
        assert set(fetched.json()) == {"content", "version", "updated_at"}

    def test_every_save_is_a_new_row_and_nothing_is_updated_in_place(self, api, tenant):
        save(api, "likes tea")
        first = rows(tenant)

        response = save(api, "likes coffee")

        assert response.json()["version"] == 2
        assert rows(tenant)[:1] == first
        assert [row[3:5] for row in rows(tenant)] == [(1, "likes tea"), (2, "likes coffee")]
        assert api.get(notes_url(tail="long-term/")).json()["content"] == "likes coffee"

    def test_saving_the_current_text_again_writes_no_new_version(self, api, tenant):
        save(api, "likes tea")

        again = save(api, "likes tea")

        assert again.status_code == 200
        assert again.json()["version"] == 1
        assert Note.objects.filter(tenant=tenant).count() == 1

    def test_an_empty_document_is_allowed_and_whitespace_is_kept_exactly(self, api):
        save(api, "  indented\n\ttabbed\n")
        kept = api.get(notes_url(tail="long-term/")).json()["content"]

        emptied = save(api, "")

        assert kept == "  indented\n\ttabbed\n"
        assert emptied.status_code == 200
        assert emptied.json() | {"updated_at": None} == {
            "content": "",
            "version": 2,
            "updated_at": None,
        }

    def test_it_creates_the_person_on_first_write(self, api, tenant):
        save(api, "hello", user_id="tui:local")

        assert EndUser.objects.filter(tenant=tenant, external_id="tui:local").exists()

    def test_a_person_without_a_long_term_note_is_a_404(self, api):
        append(api, "only a daily note")

        response = api.get(notes_url(tail="long-term/"))

        assert response.status_code == 404
        assert error_code(response) == "not_found"

    def test_history_lists_every_version_newest_first_in_pages(self, api):
        for text in ("one", "two", "three"):
            save(api, text)

        first = api.get(notes_url(tail="long-term/history/"), {"limit": 2}).json()
        second = api.get(first["next"]).json()

        assert [item["version"] for item in first["results"]] == [3, 2]
        assert [item["content"] for item in second["results"]] == ["one"]
        assert second["next"] is None

    @pytest.mark.parametrize("limit", ["0", "-1", "abc"])
    def test_a_bad_history_page_size_is_a_400(self, api, limit):
        save(api, "x")

        response = api.get(notes_url(tail="long-term/history/"), {"limit": limit})

        assert response.status_code == 400
        assert "limit" in error_fields(response)

    def test_a_malformed_history_cursor_is_a_400(self, api):
        save(api, "x")

        response = api.get(notes_url(tail="long-term/history/"), {"cursor": "not-a-cursor"})

        assert response.status_code == 400
        assert "cursor" in error_fields(response)


class TestDaily:
    def test_it_appends_to_today_by_default(self, api):
        response = append(api, "- Implemented tape memory zone")

        assert response.status_code == 201
        assert response.json()["day"] == str(TODAY)
        assert response.json()["version"] == 1

    def test_appends_to_one_day_join_with_a_newline_as_new_versions(self, api, tenant):
        day = TODAY - dt.timedelta(days=1)
        append(api, "# notes", day=day)
        append(api, "- fixed the tests", day=day)

        detail = api.get(notes_url(tail=f"daily/{day}/")).json()

        assert detail["content"] == "# notes\n- fixed the tests"
        assert detail["version"] == 2
        assert [(v["version"], v["content"]) for v in detail["history"]] == [
            (2, "# notes\n- fixed the tests"),
            (1, "# notes"),
        ]
        assert detail["has_more_history"] is False
        assert Note.objects.filter(tenant=tenant, day=day).count() == 2

    def test_each_day_has_its_own_note(self, api):
        append(api, "monday", day="2026-02-09")

        response = append(api, "tuesday", day="2026-02-10")

        assert response.json() | {"updated_at": None} == {
            "day": "2026-02-10",
            "content": "tuesday",
            "version": 1,
            "updated_at": None,
        }

    def test_an_append_after_a_clear_starts_the_day_afresh(self, api):
        append(api, "before")
        api.post(notes_url(tail="clear/"))

        response = append(api, "after")

        assert response.json()["content"] == "after"
        assert response.json()["version"] == 3

    def test_history_is_capped_by_history_limit(self, api):
        for i in range(4):
            append(api, f"line {i}", day="2026-02-10")

        detail = api.get(notes_url(tail="daily/2026-02-10/"), {"history_limit": 2}).json()

        assert detail["version"] == 4
        assert [v["version"] for v in detail["history"]] == [4, 3]
        assert detail["has_more_history"] is True

    def test_a_day_without_a_note_is_a_404(self, api):
        append(api, "today")

        response = api.get(notes_url(tail="daily/2020-01-01/"))

        assert response.status_code == 404

    def test_a_retried_append_with_an_idempotency_key_is_written_once(self, api, tenant):
        first = append(api, "once", day="2026-02-10", HTTP_IDEMPOTENCY_KEY="note-1")
        replay = append(api, "once", day="2026-02-10", HTTP_IDEMPOTENCY_KEY="note-1")

        assert replay.status_code == 201
        assert replay.json() == first.json()
        assert replay["Idempotent-Replayed"] == "true"
        assert Note.objects.filter(tenant=tenant).count() == 1


class TestRecall:
    def test_it_returns_the_long_term_note_and_recent_days_newest_first(self, api):
        save(api, "likes tea")
        for offset in (0, 6, 7):
            append(api, f"{offset} days ago", day=TODAY - dt.timedelta(days=offset))

        body = api.get(notes_url()).json()

        assert body["long_term"]["content"] == "likes tea"
        assert [note["content"] for note in body["daily"]] == ["0 days ago", "6 days ago"]
        assert set(body["daily"][0]) == {"day", "content", "version", "updated_at"}

    def test_days_widens_the_window(self, api):
        for offset in (0, 6, 7):
            append(api, f"{offset} days ago", day=TODAY - dt.timedelta(days=offset))

        one = api.get(notes_url(), {"days": 1}).json()["daily"]
        eight = api.get(notes_url(), {"days": 8}).json()["daily"]

        assert [note["content"] for note in one] == ["0 days ago"]
        assert len(eight) == 3

    def test_cleared_notes_recall_as_nothing(self, api):
        save(api, "likes tea")
        append(api, "today")
        api.post(notes_url(tail="clear/"))

        body = api.get(notes_url()).json()

        assert (body["long_term"]["content"], body["long_term"]["version"]) == ("", 2)
        assert body["daily"] == []

    def test_q_keeps_notes_containing_any_of_its_words(self, api):
        save(api, "Prefers PYTHON and dark mode")
        append(api, "Booked a table in Berlin", day=TODAY)
        append(api, "Went hiking", day=TODAY - dt.timedelta(days=1))
        append(api, "Nothing relevant", day=TODAY - dt.timedelta(days=2))

        body = api.get(notes_url(), {"q": "python, berlin!"}).json()

        assert body["long_term"]["content"] == "Prefers PYTHON and dark mode"
        assert [note["content"] for note in body["daily"]] == ["Booked a table in Berlin"]

    def test_q_ignores_one_letter_words_and_drops_a_long_term_note_that_does_not_match(self, api):
        save(api, "likes tea")
        append(api, "a hike")

        body = api.get(notes_url(), {"q": "a hike"}).json()

        assert body["long_term"] is None
        assert [note["content"] for note in body["daily"]] == ["a hike"]

    def test_q_matches_only_the_current_text_of_a_note(self, api):
        save(api, "lives in Berlin")
        save(api, "lives in Lisbon")

        body = api.get(notes_url(), {"q": "berlin"}).json()

        assert body["long_term"] is None

    def test_q_matches_underscores_literally_not_as_wildcards(self, api):
        append(api, "uses snake_case names")
        append(api, "snakeXcase is not it", day=TODAY - dt.timedelta(days=1))

        body = api.get(notes_url(), {"q": "snake_case"}).json()
        underscores = api.get(notes_url(), {"q": "__"}).json()

        assert [note["content"] for note in body["daily"]] == ["uses snake_case names"]
        assert underscores["daily"] == []

    def test_a_q_without_any_usable_word_does_not_filter(self, api):
        append(api, "progress")

        body = api.get(notes_url(), {"q": "a % !"}).json()

        assert [note["content"] for note in body["daily"]] == ["progress"]

    @pytest.mark.parametrize("days", ["0", "366", "-3", "seven", "1.5"])
    def test_days_out_of_range_is_a_400(self, api, days):
        save(api, "x")

        response = api.get(notes_url(), {"days": days})

        assert response.status_code == 400
        assert "days" in error_fields(response)

    def test_a_nul_in_q_is_a_400(self, api):
        save(api, "x")

        response = api.get(notes_url(), {"q": "tea\x00"})

        assert response.status_code == 400
        assert "q" in error_fields(response)

    def test_an_unknown_user_is_a_404(self, api):
        response = api.get(notes_url("nobody"))

        assert response.status_code == 404
        assert error_code(response) == "not_found"

    def test_recall_takes_a_bounded_number_of_queries(self, api, django_assert_max_num_queries):
        save(api, "likes tea")
        for offset in range(7):
            for line in range(3):
                append(api, f"line {line}", day=TODAY - dt.timedelta(days=offset))
        api.get(notes_url())  # the key's last_used_at is written once, on the first request

        # API key, person, long-term note, daily notes: whatever the number of days or versions.
        with django_assert_max_num_queries(4):
            body = api.get(notes_url(), {"days": 7, "q": "line"}).json()

        assert len(body["daily"]) == 7
        assert body["daily"][0]["version"] == 3


class TestClear:
    def test_it_writes_an_empty_version_of_every_note_and_keeps_history(self, api, tenant):
        save(api, "likes tea")
        append(api, "monday", day="2026-02-09")
        append(api, "tuesday", day="2026-02-10")
        append(api, "x", day="2026-02-08")
        api.post(notes_url(tail="clear/"))
        append(api, "after the first clear", day="2026-02-08")
        before = rows(tenant)

        response = api.post(notes_url(tail="clear/"))

        assert response.status_code == 200
        assert response.json() == {"cleared": 1}
        assert set(before) <= set(rows(tenant))
        assert len(rows(tenant)) == len(before) + 1
        long_term = api.get(notes_url(tail="long-term/")).json()
        history = api.get(notes_url(tail="long-term/history/")).json()["results"]
        assert long_term["content"] == ""
        assert [v["content"] for v in history] == ["", "likes tea"]
        assert api.get(notes_url(), {"days": 365}).json()["daily"] == []

    def test_it_counts_the_long_term_note_and_each_non_empty_day(self, api):
        save(api, "likes tea")
        append(api, "monday", day="2026-02-09")
        append(api, "tuesday", day="2026-02-10")

        first = api.post(notes_url(tail="clear/"))
        second = api.post(notes_url(tail="clear/"))

        assert first.json() == {"cleared": 3}
        assert second.json() == {"cleared": 0}
        day = api.get(notes_url(tail="daily/2026-02-10/")).json()
        assert (day["content"], day["version"]) == ("", 2)
        assert day["history"][1]["content"] == "tuesday"

    def test_clearing_an_unknown_person_clears_nothing_and_creates_no_one(self, api, tenant):
        response = api.post(notes_url("nobody", "clear/"))

        assert response.json() == {"cleared": 0}
        assert not EndUser.objects.filter(tenant=tenant, external_id="nobody").exists()


class TestBadInput:
    @pytest.mark.parametrize(
        "payload",
        [{}, {"content": ""}, {"content": "  \n "}, {"content": None}, {"content": 5}],
    )
    def test_a_daily_append_needs_content(self, api, payload):
        response = api.post(notes_url(tail="daily/"), payload, format="json")

        assert response.status_code == 400
        assert "content" in error_fields(response)

    @pytest.mark.parametrize("payload", [{}, {"content": None}, {"content": ["a"]}])
    def test_a_long_term_save_needs_content(self, api, payload):
        response = api.put(notes_url(tail="long-term/"), payload, format="json")

        assert response.status_code == 400
        assert "content" in error_fields(response)

    @pytest.mark.parametrize(
        "day", ["2026-13-01", "yesterday", "2026-02-30", "0000-01-01", 20260210]
    )
    def test_a_malformed_day_is_a_400(self, api, day):
        response = api.post(notes_url(tail="daily/"), {"content": "x", "day": day}, format="json")

        assert response.status_code == 400
        assert "day" in error_fields(response)

    @pytest.mark.parametrize("day", ["2026-13-01", "yesterday", "2026-2-30"])
    def test_a_malformed_day_in_the_url_is_a_400(self, api, day):
        append(api, "x")

        response = api.get(notes_url(tail=f"daily/{day}/"))

        assert response.status_code == 400
        assert "day" in error_fields(response)

    def test_tomorrow_is_accepted_but_later_days_are_not(self, api):
        tomorrow = append(api, "ahead of UTC", day=TODAY + dt.timedelta(days=1))
        later = append(api, "next week", day=TODAY + dt.timedelta(days=2))

        assert tomorrow.status_code == 201
        assert later.status_code == 400
        assert error_fields(later)["day"][0]["code"] == "future"

    def test_nul_characters_are_refused(self, api, tenant):
        saved = save(api, "a\x00b")
        appended = append(api, "a\x00b")

        assert saved.status_code == appended.status_code == 400
        assert "content" in error_fields(saved)
        assert not Note.objects.filter(tenant=tenant).exists()

    def test_a_body_that_is_not_an_object_is_a_400(self, api):
        response = api.post(notes_url(tail="daily/"), ["x"], format="json")

        assert response.status_code == 400

    def test_a_user_id_too_long_to_store_is_a_400_on_write_and_a_404_on_read(self, api):
        long_id = "u" * 256

        written = save(api, "x", user_id=long_id)
        read = api.get(notes_url(long_id))

        assert written.status_code == 400
        assert "user_id" in error_fields(written)
        assert read.status_code == 404

    def test_a_nul_in_the_user_id_never_reaches_the_database(self, api):
        # PostgreSQL cannot compare text with NUL: without the guard this would be a 500.
        read = api.get(notes_url("a%00b"))
        written = append(api, "x", user_id="a%00b")

        assert read.status_code == 404
        assert written.status_code == 400
        assert "user_id" in error_fields(written)


class TestSizeLimit:
    def test_content_over_the_limit_is_a_400(self, api, limits, tenant):
        limits["NOTE_CONTENT_MAX_BYTES"] = 10

        saved = save(api, "x" * 11)
        appended = append(api, "é" * 6)  # 12 bytes in UTF-8

        assert saved.status_code == appended.status_code == 400
        assert error_fields(saved)["content"][0]["code"] == "too_large"
        assert error_fields(appended)["content"][0]["code"] == "too_large"
        assert not Note.objects.filter(tenant=tenant).exists()

    def test_content_at_the_limit_is_accepted(self, api, limits):
        limits["NOTE_CONTENT_MAX_BYTES"] = 10

        assert save(api, "x" * 10).status_code == 200
        assert append(api, "x" * 10).status_code == 201

    def test_an_append_that_would_make_the_day_too_large_is_a_400(self, api, limits, tenant):
        limits["NOTE_CONTENT_MAX_BYTES"] = 10
        append(api, "12345")

        fits = append(api, "1234")  # "12345\n1234": 10 bytes
        too_much = append(api, "x")

        assert fits.status_code == 201
        assert too_much.status_code == 400
        assert error_fields(too_much)["content"][0]["code"] == "too_large"
        assert Note.objects.filter(tenant=tenant).count() == 2


class TestScopes:
    def test_a_read_only_key_reads_but_cannot_write(self, api, read_only_api, tenant):
        save(api, "likes tea")
        append(api, "today", day="2026-02-10")
        before = rows(tenant)

        writes = [
            save(read_only_api, "overwritten"),
            append(read_only_api, "more"),
            read_only_api.post(notes_url(tail="clear/")),
        ]
        reads = [
            read_only_api.get(notes_url()),
            read_only_api.get(notes_url(tail="long-term/")),
            read_only_api.get(notes_url(tail="long-term/history/")),
            read_only_api.get(notes_url(tail="daily/2026-02-10/")),
        ]

        assert [response.status_code for response in writes] == [403, 403, 403]
        assert {error_code(response) for response in writes} == {"insufficient_scope"}
        assert [response.status_code for response in reads] == [200, 200, 200, 200]
        assert rows(tenant) == before


READ_PATHS = ["", "long-term/", "long-term/history/", "daily/2026-02-10/"]


class TestOutsider:
    @pytest.fixture
    def our_notes(self, api, tenant):
        save(api, "likes tea")
        append(api, "today", day="2026-02-10")
        return rows(tenant)

    @pytest.mark.parametrize("tail", READ_PATHS)
    def test_an_outsider_gets_a_404_for_every_read(self, outsider_api, our_notes, tail):
        response = outsider_api.get(notes_url(tail=tail))

        assert response.status_code == 404
        assert error_code(response) == "not_found"

    def test_an_outsider_long_term_save_creates_its_own_person(
        self, outsider_api, our_notes, tenant, other_tenant
    ):
        response = save(outsider_api, "the outsider's text")

        assert response.status_code == 200
        assert response.json()["version"] == 1
        assert rows(tenant) == our_notes
        theirs = EndUser.objects.get(tenant=other_tenant, external_id=USER)
        assert Note.objects.get(end_user=theirs).content == "the outsider's text"

    def test_an_outsider_daily_append_creates_its_own_person(
        self, outsider_api, our_notes, tenant, other_tenant
    ):
        response = append(outsider_api, "the outsider's day", day="2026-02-10")

        assert response.status_code == 201
        assert response.json()["content"] == "the outsider's day"  # not joined onto ours
        assert rows(tenant) == our_notes
        assert Note.objects.filter(tenant=other_tenant, kind=NoteKind.DAILY).count() == 1

    def test_an_outsider_clear_clears_nothing_of_ours(self, outsider_api, our_notes, tenant):
        response = outsider_api.post(notes_url(tail="clear/"))

        assert response.json() == {"cleared": 0}
        assert rows(tenant) == our_notes

    def test_an_outsiders_notes_are_not_ours(self, api, outsider_api, our_notes):
        save(outsider_api, "outsider v1")
        save(outsider_api, "outsider v2")

        ours = api.get(notes_url(tail="long-term/history/")).json()["results"]

        assert [v["content"] for v in ours] == ["likes tea"]
