"""Vectors of facts, memories and notes: computed by a worker after the write, never on its path.

A write that changes what a row means (a new fact, a memory's new text, a note's new version)
asks for its vector after commit and after the response (`vectors_request`); the task embeds
every row it was given that still has no vector of the current model (so a model change
re-embeds, and a redelivered task finds nothing left to do), and the beat sweep catches rows
whose task was lost. Changing a fact's or a memory's text deletes its vector in the same
transaction, and a vector is stored only if the text it was computed from is still the row's:
a stale vector never outlives an edit.

Writing vectors bumps no version counter: the fact index's token is read from the candidate
rows themselves, vector times included (facts_app/recall.py).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from django.db import transaction
from django.db.models import Exists, Model, OuterRef, Q
from django.utils import timezone

from facts_app.models import (
    Fact,
    FactVector,
    Note,
    NoteKind,
    NoteVector,
    UserMemory,
    UserMemoryVector,
    VectorRow,
)
from memoryhub.core.after_response import after_response
from memoryhub.llm.embeddings import Embedder, get_embedder, vector_to_bytes

logger = logging.getLogger(__name__)

EMBED_BATCH = 64
# The sweep looks this far back, and takes at most this many rows of each kind per run.
SWEEP_WINDOW = dt.timedelta(days=1)
SWEEP_BATCH = 500

Kind = Literal["fact", "memory", "note"]


def _without_vector(embedder: Embedder) -> Q:
    return Q(vector__isnull=True) | ~Q(vector__model=embedder.model_name)


def facts_without_vector(*, embedder: Embedder) -> Q:
    """Facts with no vector, or one of another model."""
    return _without_vector(embedder)


def memories_without_vector(*, embedder: Embedder) -> Q:
    """Memories with no vector, or one of another model."""
    return _without_vector(embedder)


def notes_without_vector(*, embedder: Embedder) -> Q:
    """Current, non-empty note versions with no vector, or one of another model. Earlier
    versions are never embedded: a note is read as it stands."""
    newer = Note.objects.filter(
        tenant_id=OuterRef("tenant_id"),
        end_user_id=OuterRef("end_user_id"),
        kind=OuterRef("kind"),
        version__gt=OuterRef("version"),
    ).filter(
        # The long-term note has no day (NULL = NULL is not true in SQL): its kind is enough.
        Q(kind=NoteKind.LONG_TERM) | Q(day=OuterRef("day"))
    )
    return _without_vector(embedder) & ~Q(content="") & ~Q(Exists(newer))


@dataclass(frozen=True)
class _Kind:
    model: type[Model]
    vector_model: type[VectorRow]
    link: str  # the vector's one-to-one field
    text_fields: tuple[str, ...]
    passage: Callable[[tuple[Any, ...]], str]
    without_vector: Callable[..., Q]
    recent_field: str  # what the sweep's window is on


def memory_passage(*, key: str, content: str) -> str:
    """What is embedded for a memory: its key says what the text is about."""
    return f"{key}: {content}"


KINDS: dict[Kind, _Kind] = {
    "fact": _Kind(
        model=Fact,
        vector_model=FactVector,
        link="fact",
        text_fields=("content",),
        passage=lambda texts: str(texts[0]),
        without_vector=facts_without_vector,
        # An edit of the text deletes the vector and moves updated_at: the sweep sees both.
        recent_field="updated_at",
    ),
    "memory": _Kind(
        model=UserMemory,
        vector_model=UserMemoryVector,
        link="memory",
        text_fields=("key", "content"),
        passage=lambda texts: memory_passage(key=str(texts[0]), content=str(texts[1])),
        without_vector=memories_without_vector,
        recent_field="updated_at",
    ),
    "note": _Kind(
        model=Note,
        vector_model=NoteVector,
        link="note",
        text_fields=("content",),
        passage=lambda texts: str(texts[0]),
        without_vector=notes_without_vector,
        # Versions are never changed in place: a new text is a new row.
        recent_field="created_at",
    ),
}


def vectors_request(*, kind: Kind, tenant_id: int, ids: Sequence[int]) -> None:
    """Have the rows embedded by a worker, once the current transaction commits and the
    response has gone out; nothing when embeddings are off. A lost enqueue is the sweep's."""
    if not ids or get_embedder() is None:
        return
    wanted = [int(pk) for pk in ids]

    def enqueue() -> None:
        from facts_app.tasks import embed_rows  # the task module imports this one

        embed_rows.delay(kind, tenant_id, wanted)

    transaction.on_commit(lambda: after_response(enqueue), robust=True)


def vectors_compute(
    *,
    kind: Kind,
    tenant_id: int,
    ids: Sequence[int] | None = None,
    progress: Callable[[int], None] | None = None,
    batch: int = EMBED_BATCH,
) -> int:
    """Embed the tenant's rows of `kind` (those in `ids`, or all) that lack a vector of the
    current model; returns how many vectors were stored.

    The embedder runs outside any transaction; each batch is stored in one, and only for rows
    that still exist with the text that was embedded (a row deleted or edited meanwhile is left
    to the task its change asked for). `progress` hears how many rows each batch covered.
    """
    embedder = get_embedder()
    if embedder is None:
        return 0
    spec = KINDS[kind]
    rows_qs = spec.model._default_manager.filter(tenant_id=tenant_id).filter(
        spec.without_vector(embedder=embedder)
    )
    if ids is not None:
        rows_qs = rows_qs.filter(pk__in=list(ids))
    done = 0
    skip: set[int] = set()
    while True:
        rows = list(
            rows_qs.exclude(pk__in=skip).order_by("pk").values_list("pk", *spec.text_fields)[:batch]
        )
        if not rows:
            return done
        texts = {int(row[0]): tuple(row[1:]) for row in rows}
        vectors = embedder.embed_passages([spec.passage(row[1:]) for row in rows])
        stored = _store(
            spec=spec,
            tenant_id=tenant_id,
            model_name=embedder.model_name,
            texts=texts,
            vectors={int(row[0]): vectors[position] for position, row in enumerate(rows)},
        )
        # Rows not stored changed under us: their own task embeds them; do not loop on them.
        skip.update(pk for pk in texts if pk not in stored)
        done += len(stored)
        if progress is not None:
            progress(len(rows))


def _store(
    *,
    spec: _Kind,
    tenant_id: int,
    model_name: str,
    texts: dict[int, tuple[Any, ...]],
    vectors: dict[int, Any],
) -> set[int]:
    with transaction.atomic():
        # Locked until commit (PostgreSQL; SQLite's IMMEDIATE transaction holds the database):
        # an edit or a delete of these rows waits for this write, then deletes its vector.
        current = {
            int(row[0]): tuple(row[1:])
            for row in spec.model._default_manager.select_for_update()
            .filter(pk__in=list(texts))
            .values_list("pk", *spec.text_fields)
        }
        unchanged = {pk for pk, text in texts.items() if current.get(pk) == text}
        spec.vector_model.objects.bulk_create(
            [
                spec.vector_model(
                    **{f"{spec.link}_id": pk},
                    tenant_id=tenant_id,
                    model=model_name,
                    vector=vector_to_bytes(vectors[pk]),
                )
                for pk in sorted(unchanged)
            ],
            update_conflicts=True,
            unique_fields=[spec.link],
            update_fields=["model", "vector", "created_at"],
        )
        if spec.model is Note and unchanged:
            _older_note_vectors_delete(note_ids=unchanged)
    return unchanged


def _older_note_vectors_delete(*, note_ids: set[int]) -> None:
    """Vectors of the versions before these notes: no search reads them any more."""
    notes = list(
        Note.objects.filter(pk__in=note_ids).values_list(
            "tenant_id", "end_user_id", "kind", "day", "version"
        )
    )
    older = Q()
    for tenant_id, end_user_id, kind, day, version in notes:
        older |= Q(
            note__tenant_id=tenant_id,
            note__end_user_id=end_user_id,
            note__kind=kind,
            note__day=day,
            note__version__lt=version,
        )
    NoteVector.objects.filter(older).delete()


def fact_vectors_compute(
    *,
    tenant_id: int,
    fact_ids: Sequence[int] | None = None,
    progress: Callable[[int], None] | None = None,
    batch: int = EMBED_BATCH,
) -> int:
    """Embed the tenant's facts (those in `fact_ids`, or all) that lack a current-model vector;
    the passage is the fact's text. Returns how many were stored."""
    return vectors_compute(
        kind="fact", tenant_id=tenant_id, ids=fact_ids, progress=progress, batch=batch
    )


def memory_vectors_compute(
    *,
    tenant_id: int,
    memory_ids: Sequence[int] | None = None,
    progress: Callable[[int], None] | None = None,
    batch: int = EMBED_BATCH,
) -> int:
    """`fact_vectors_compute` for memories; the passage is "<key>: <content>"."""
    return vectors_compute(
        kind="memory", tenant_id=tenant_id, ids=memory_ids, progress=progress, batch=batch
    )


def note_vectors_compute(
    *,
    tenant_id: int,
    note_ids: Sequence[int] | None = None,
    progress: Callable[[int], None] | None = None,
    batch: int = EMBED_BATCH,
) -> int:
    """`fact_vectors_compute` for the current, non-empty note versions; the passage is the
    note's text."""
    return vectors_compute(
        kind="note", tenant_id=tenant_id, ids=note_ids, progress=progress, batch=batch
    )


def embeddings_sweep(*, now: dt.datetime | None = None, batch: int = SWEEP_BATCH) -> int:
    """Embed rows of each kind changed within SWEEP_WINDOW that still lack a vector (their task
    was lost, or the enqueue after the write failed); at most `batch` per kind. Returns how
    many vectors were stored. Older rows are the `embed_memory` command's."""
    embedder = get_embedder()
    if embedder is None:
        return 0
    since = (now or timezone.now()) - SWEEP_WINDOW
    done = 0
    for kind, spec in KINDS.items():
        missing = list(
            spec.model._default_manager.filter(**{f"{spec.recent_field}__gte": since})
            .filter(spec.without_vector(embedder=embedder))
            .order_by(spec.recent_field)
            .values_list("tenant_id", "pk")[:batch]
        )
        by_tenant: dict[int, list[int]] = {}
        for tenant_id, pk in missing:
            by_tenant.setdefault(tenant_id, []).append(pk)
        for tenant_id, ids in by_tenant.items():
            done += vectors_compute(kind=kind, tenant_id=tenant_id, ids=ids)
    if done:
        logger.info("embeddings sweep: stored %d vectors of facts, memories and notes", done)
    return done
