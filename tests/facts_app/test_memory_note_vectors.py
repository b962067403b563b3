"""Memories and notes get vectors from the worker after the write; an edit never leaves the old
text's vector behind, and vectors go with their rows without counting as a kind of their own."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from facts_app import embedding
from facts_app.models import Note, NoteVector, UserMemory, UserMemoryVector
from facts_app.services.memories import memory_delete, memory_save
from facts_app.services.notes import (
    note_clear,
    note_daily_append,
    note_daily_prune,
    note_long_term_save,
)
from memoryhub.accounts.models import Actor, AuditEvent
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.llm.embeddings import get_embedder, vector_from_bytes

# Real commits: the request for a vector is enqueued on commit, and the eager "worker" embeds.
pytestmark = pytest.mark.django_db(transaction=True)

ACTOR = Actor.api_key("mh_test")


@pytest.fixture
def person(tenant):
    return end_user_get_or_create(tenant=tenant, external_id="ana")


def stored_vector(row) -> np.ndarray:
    embedder = get_embedder()
    return vector_from_bytes(bytes(row.vector), dimensions=embedder.dimensions)


def test_a_memory_is_embedded_as_key_and_text(tenant, person):
    memory, _ = memory_save(tenant=tenant, end_user=person, key="pet", content="A puppy, Biscuit")

    vector = UserMemoryVector.objects.get(memory=memory)
    expected = get_embedder().embed_passages(["pet: A puppy, Biscuit"])[0]
    assert np.allclose(stored_vector(vector), expected, atol=1e-5)
    assert vector.tenant_id == tenant.pk


def test_a_memorys_new_text_replaces_its_vector(tenant, person):
    memory, _ = memory_save(tenant=tenant, end_user=person, key="pet", content="A puppy")
    before = stored_vector(UserMemoryVector.objects.get(memory=memory))

    memory_save(tenant=tenant, end_user=person, key="pet", content="A cat called Miso")

    after = stored_vector(UserMemoryVector.objects.get(memory=memory))
    expected = get_embedder().embed_passages(["pet: A cat called Miso"])[0]
    assert np.allclose(after, expected, atol=1e-5)
    assert not np.allclose(before, after)


def test_a_save_that_changes_no_text_keeps_the_vector(tenant, person):
    memory, _ = memory_save(tenant=tenant, end_user=person, key="pet", content="A puppy")
    written = UserMemoryVector.objects.get(memory=memory).created_at

    memory_save(tenant=tenant, end_user=person, key="pet", content="A puppy", pinned=True)

    assert UserMemoryVector.objects.get(memory=memory).created_at == written


def test_a_memorys_vector_goes_with_it_and_is_not_counted(tenant, person):
    memory, _ = memory_save(tenant=tenant, end_user=person, key="pet", content="A puppy")
    memory_save(tenant=tenant, end_user=person, key="pet", content="A cat")
    assert UserMemoryVector.objects.filter(memory=memory).exists()

    memory_delete(memory=memory, actor=ACTOR)

    assert not UserMemoryVector.objects.exists()
    event = AuditEvent.objects.get(object_type="user_memory")
    assert event.counts == {"user_memories": 1, "user_memory_versions": 1}


def test_only_the_current_note_version_keeps_a_vector(tenant, person):
    first = note_daily_append(tenant=tenant, end_user=person, content="Morning run")
    assert NoteVector.objects.filter(note=first).exists()

    second = note_daily_append(tenant=tenant, end_user=person, content="Lunch with Bob")

    assert list(NoteVector.objects.values_list("note_id", flat=True)) == [second.pk]
    expected = get_embedder().embed_passages(["Morning run\nLunch with Bob"])[0]
    assert np.allclose(stored_vector(NoteVector.objects.get()), expected, atol=1e-5)


def test_the_long_term_note_and_each_day_have_their_own_vector(tenant, person):
    long_term = note_long_term_save(tenant=tenant, end_user=person, content="Lives in Kyoto")
    today = note_daily_append(tenant=tenant, end_user=person, content="Dentist")
    yesterday = note_daily_append(
        tenant=tenant,
        end_user=person,
        content="Cinema",
        day=today.day - dt.timedelta(days=1),
    )

    assert set(NoteVector.objects.values_list("note_id", flat=True)) == {
        long_term.pk,
        today.pk,
        yesterday.pk,
    }


def test_cleared_notes_keep_no_vector(tenant, person):
    note_long_term_save(tenant=tenant, end_user=person, content="Lives in Kyoto")
    note_daily_append(tenant=tenant, end_user=person, content="Dentist")

    note_clear(tenant=tenant, end_user=person)

    assert not NoteVector.objects.exists()
    empty = Note.objects.filter(tenant=tenant).filter(
        embedding.notes_without_vector(embedder=get_embedder())
    )
    assert not empty.exists()  # empty versions are never embedded


def test_pruned_notes_take_their_vectors(tenant, person):
    old_day = dt.date.today() - dt.timedelta(days=60)
    note_daily_append(tenant=tenant, end_user=person, content="Long ago", day=old_day)
    assert NoteVector.objects.count() == 1

    note_daily_prune(tenant=tenant, older_than_days=30)

    assert not NoteVector.objects.exists()


def test_the_backfill_embeds_memories_and_current_notes_the_worker_missed(tenant, person, settings):
    settings.EMBEDDINGS_BACKEND = "off"  # written while embeddings were off: no vector asked for
    memory, _ = memory_save(tenant=tenant, end_user=person, key="pet", content="A puppy")
    note_long_term_save(tenant=tenant, end_user=person, content="Old text")
    current = note_long_term_save(tenant=tenant, end_user=person, content="Lives in Kyoto")
    settings.EMBEDDINGS_BACKEND = "onnx"

    assert embedding.memory_vectors_compute(tenant_id=tenant.pk) == 1
    assert embedding.note_vectors_compute(tenant_id=tenant.pk) == 1
    assert UserMemoryVector.objects.filter(memory=memory).exists()
    assert list(NoteVector.objects.values_list("note_id", flat=True)) == [current.pk]
    # Nothing left to do: a second run stores nothing.
    assert embedding.memory_vectors_compute(tenant_id=tenant.pk) == 0
    assert embedding.note_vectors_compute(tenant_id=tenant.pk) == 0


def test_a_task_for_rows_deleted_meanwhile_exits_quietly(tenant, person):
    memory, _ = memory_save(tenant=tenant, end_user=person, key="pet", content="A puppy")
    memory_id = memory.pk
    UserMemory.objects.filter(pk=memory_id).delete()

    assert embedding.memory_vectors_compute(tenant_id=tenant.pk, memory_ids=[memory_id]) == 0
