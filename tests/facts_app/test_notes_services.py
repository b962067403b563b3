"""The notes services directly: pruning (retention's entry point), and the invariants the API
relies on (versions per note, the unique constraints as a backstop)."""

import datetime as dt

import pytest
from django.db import IntegrityError, transaction

from facts_app.models import Note, NoteKind
from facts_app.selectors.notes import note_recall, query_words
from facts_app.services.notes import (
    note_clear,
    note_daily_append,
    note_daily_prune,
    note_long_term_save,
)
from memoryhub.core.errors import ResourceNotFound
from tests.factories import EndUserFactory

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
TODAY = NOW.date()


@pytest.fixture
def person(tenant):
    return EndUserFactory(tenant=tenant, external_id="tui:local")


def days_ago(count: int) -> dt.date:
    return TODAY - dt.timedelta(days=count)


class TestPrune:
    def test_it_deletes_every_version_of_daily_notes_older_than_n_days(self, tenant, person):
        for day in (days_ago(31), days_ago(45)):
            note_daily_append(tenant=tenant, end_user=person, content="old", day=day)
            note_daily_append(tenant=tenant, end_user=person, content="older", day=day)
        note_daily_append(tenant=tenant, end_user=person, content="kept", day=days_ago(30))
        note_daily_append(tenant=tenant, end_user=person, content="kept", day=TODAY)
        note_long_term_save(tenant=tenant, end_user=person, content="never pruned")

        deleted = note_daily_prune(tenant=tenant, older_than_days=30, now=NOW)

        assert deleted == 4
        remaining = Note.objects.filter(tenant=tenant).values_list("kind", "day")
        assert sorted(remaining, key=str) == sorted(
            [(NoteKind.DAILY, days_ago(30)), (NoteKind.DAILY, TODAY), (NoteKind.LONG_TERM, None)],
            key=str,
        )

    def test_it_deletes_in_batches_and_counts_them_all(self, tenant, person):
        for offset in range(40, 47):
            note_daily_append(tenant=tenant, end_user=person, content="x", day=days_ago(offset))

        deleted = note_daily_prune(tenant=tenant, older_than_days=30, now=NOW, batch_size=2)

        assert deleted == 7
        assert not Note.objects.filter(tenant=tenant).exists()

    def test_it_leaves_other_tenants_alone(self, tenant, other_tenant, person):
        theirs = EndUserFactory(tenant=other_tenant)
        note_daily_append(tenant=other_tenant, end_user=theirs, content="x", day=days_ago(90))

        assert note_daily_prune(tenant=tenant, now=NOW) == 0
        assert Note.objects.filter(tenant=other_tenant).count() == 1

    def test_a_negative_age_is_refused(self, tenant):
        with pytest.raises(ValueError, match="older_than_days"):
            note_daily_prune(tenant=tenant, older_than_days=-1)


class TestVersions:
    def test_versions_count_per_note(self, tenant, person):
        a = note_daily_append(tenant=tenant, end_user=person, content="a", day=TODAY)
        b = note_daily_append(tenant=tenant, end_user=person, content="b", day=days_ago(1))
        c = note_daily_append(tenant=tenant, end_user=person, content="c", day=TODAY)
        long_term = note_long_term_save(tenant=tenant, end_user=person, content="lt")

        assert (a.version, b.version, c.version, long_term.version) == (1, 1, 2, 1)
        assert c.content == "a\nc"

    def test_the_unique_constraint_refuses_a_duplicate_version(self, tenant, person):
        note_daily_append(tenant=tenant, end_user=person, content="a", day=TODAY)

        with pytest.raises(IntegrityError), transaction.atomic():
            Note.objects.create(
                tenant=tenant, end_user=person, kind=NoteKind.DAILY, day=TODAY, version=1
            )

    def test_clear_skips_notes_that_are_already_empty(self, tenant, person):
        note_long_term_save(tenant=tenant, end_user=person, content="")
        note_daily_append(tenant=tenant, end_user=person, content="x", day=TODAY)

        assert note_clear(tenant=tenant, end_user=person) == 1
        assert note_clear(tenant=tenant, end_user=person) == 0
        assert Note.objects.filter(tenant=tenant).count() == 3

    def test_a_write_for_a_person_erased_meanwhile_is_not_found(self, tenant, person):
        person_copy = type(person).objects.get(pk=person.pk)
        person.delete()

        with pytest.raises(ResourceNotFound):
            note_long_term_save(tenant=tenant, end_user=person_copy, content="x")


class TestRecall:
    def test_query_words_split_on_non_word_characters(self):
        assert query_words("Python, a BERLIN! python x_y") == ["python", "berlin", "x_y"]

    def test_recall_of_a_window_includes_today_and_tomorrow(self, tenant, person):
        for offset in (-1, 0, 2, 3):
            note_daily_append(tenant=tenant, end_user=person, content="x", day=days_ago(offset))

        recall = note_recall(tenant=tenant, end_user=person, today=TODAY, days=3)

        assert [note.day for note in recall.daily] == [days_ago(-1), TODAY, days_ago(2)]
