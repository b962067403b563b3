"""Message vectors: computed by a worker after the append, never on its path.

An append sets `Session.embedding_requested_at` in the same UPDATE that claims its seqs (no
extra query) and, when it was the one to set it, has `embed_session_messages` enqueued after
commit: by the worker, from a batch of the web process's requests
(embedding_enqueue_after_append, sessions_app.pending). The task embeds every message of the
session that has no vector of the current model (so a model change re-embeds), in batches,
then clears the request; the beat sweep takes over a request whose task was lost. Idempotent:
a vector is keyed by its message, so a redelivered task rewrites the same rows.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from memoryhub.accounts.models import EndUser
from memoryhub.core.after_response import after_response
from memoryhub.core.locks import rows_hold
from memoryhub.llm.embeddings import Embedder, get_embedder, vector_to_bytes
from sessions_app.models import Message, MessageVector, Session
from sessions_app.pending import pending_claim, pending_enqueue_after_append, pending_finish
from sessions_app.pgvector import embeddings_store, pgvector_enabled
from sessions_app.recall import message_passage

logger = logging.getLogger(__name__)

EMBED_BATCH = 64
REQUEST_STALE_AFTER = dt.timedelta(minutes=5)
SWEEP_BATCH = 200


def embedding_enabled() -> bool:
    """Whether an embedder is configured (read from settings: the web process need not load
    the model to know)."""
    return str(settings.EMBEDDINGS_BACKEND) != "off"


def messages_without_vector(*, embedder: Embedder) -> Q:
    """Messages with no vector, or one of another model."""
    return Q(vector__isnull=True) | ~Q(vector__model=embedder.model_name)


def embedding_request(*, session_id: uuid.UUID, stale_before: dt.datetime | None = None) -> bool:
    """Request an embedding run for the session unless one is pending (the sweep and the
    backfill use this; appends set the flag in their own UPDATE)."""
    return pending_claim(
        session_id=session_id,
        field="embedding_requested_at",
        enqueue=lambda: embedding_enqueue(session_id=session_id),
        stale_before=stale_before,
    )


def embedding_enqueue_after_append(*, session_id: uuid.UUID) -> None:
    """The enqueue of an append that requested its session's embedding, after commit: gathered
    with the process's other appends' requests, as their summaries' and extractions' are
    (sessions_app.pending.pending_enqueue_after_append)."""
    pending_enqueue_after_append(
        session_id=session_id,
        field="embedding_requested_at",
        enqueue=lambda: embedding_enqueue(session_id=session_id),
    )


def embedding_request_sessions(*, session_ids: list[uuid.UUID]) -> int:
    """Request embedding for many sessions at once (an import): one UPDATE sets the request of
    those that have none pending, and after commit one `embed_appended_sessions` task per
    IMPORT_BATCH of them is published. Returns how many were requested. A publish that fails
    leaves the requests set, for the sweep."""
    if not embedding_enabled() or not session_ids:
        return 0
    requested = [
        str(pk)
        for pk in Session.objects.filter(pk__in=session_ids, embedding_requested_at__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    ]
    Session.objects.filter(pk__in=requested, embedding_requested_at__isnull=True).update(
        embedding_requested_at=timezone.now()
    )
    for start in range(0, len(requested), IMPORT_BATCH):
        _publish_after_commit(requested[start : start + IMPORT_BATCH])
    return len(requested)


def _publish_after_commit(session_ids: list[str]) -> None:
    transaction.on_commit(
        lambda: after_response(lambda: _appended_sessions_publish(session_ids)), robust=True
    )


IMPORT_BATCH = 500


def _appended_sessions_publish(session_ids: list[str]) -> None:
    from sessions_app.tasks import embed_appended_sessions

    embed_appended_sessions.apply_async((session_ids,))


def embedding_enqueue(*, session_id: uuid.UUID) -> None:
    """Enqueue the session's embedding a few seconds from now: appends arriving meanwhile find
    the request still set and enqueue nothing, so a busy conversation costs one enqueue per
    EMBEDDINGS_DELAY_SECONDS, not one per append, and the worker embeds them in one batch."""
    from sessions_app.tasks import embed_session_messages  # the task module imports this one

    embed_session_messages.apply_async(
        (str(session_id),), countdown=float(settings.EMBEDDINGS_DELAY_SECONDS)
    )


def message_vectors_compute(
    *,
    session_id: uuid.UUID,
    batch: int = EMBED_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Embed the session's messages that lack a vector of the current model; returns how many.

    The embedder runs outside any transaction; each batch's vectors are written in one. A
    message deleted meanwhile is skipped. Bumps the person's recall version once per batch, so
    search indexes pick the new vectors up.
    """
    embedder = get_embedder()
    if embedder is None:
        return 0
    session = Session.objects.filter(pk=session_id).values("tenant_id", "end_user_id").first()
    if session is None:
        return 0
    done = 0
    skip: set[int] = set()
    while True:
        rows = list(
            Message.objects.filter(session_id=session_id)
            .filter(messages_without_vector(embedder=embedder))
            .exclude(pk__in=skip)
            .order_by("seq")
            .values_list("pk", "name", "role", "content")[:batch]
        )
        if not rows:
            return done
        vectors = embedder.embed_passages(
            [
                message_passage(name=name, role=role, content=content)
                for _, name, role, content in rows
            ]
        )
        made = [
            MessageVector(
                message_id=pk,
                tenant_id=session["tenant_id"],
                end_user_id=session["end_user_id"],
                model=embedder.model_name,
                vector=vector_to_bytes(vectors[i]),
            )
            for i, (pk, *_) in enumerate(rows)
        ]
        try:
            _vectors_store(made=made, end_user_id=session["end_user_id"], session_id=session_id)
        except IntegrityError:
            # A message of the batch was deleted (a purge) after we read it: store the rest.
            alive = set(
                Message.objects.filter(pk__in=[row.message_id for row in made]).values_list(
                    "pk", flat=True
                )
            )
            skip.update(row.message_id for row in made if row.message_id not in alive)
            made = [row for row in made if row.message_id in alive]
            if made:
                _vectors_store(made=made, end_user_id=session["end_user_id"], session_id=session_id)
        done += len(made)
        if progress is not None:
            progress(len(rows))


def _vectors_store(
    *, made: list[MessageVector], end_user_id: int | None, session_id: uuid.UUID
) -> None:
    """Store a batch of vectors. The person's row first (touching their vectors version, which
    search needs anyway), then the session's, the order a delete locks them in: an erasure or a
    session delete under way waits for these vectors and deletes them too, or took the person
    or the session first, and then nothing is stored."""
    with transaction.atomic():
        if end_user_id is not None and not EndUser.objects.filter(pk=end_user_id).update(
            vectors_version=F("vectors_version") + 1
        ):
            return
        if not rows_hold(Session.objects.filter(pk=session_id)):
            return
        MessageVector.objects.bulk_create(
            made,
            update_conflicts=True,
            unique_fields=["message"],
            update_fields=["model", "vector", "end_user", "created_at"],
        )
        if pgvector_enabled():
            embeddings_store(vectors=[(row.message_id, row.vector) for row in made])


def embedding_request_finish(*, session_id: uuid.UUID) -> None:
    """Clear the request, then request again if messages arrived meanwhile (their appends saw
    the request still set and enqueued nothing)."""
    pending_finish(session_id=session_id, field="embedding_requested_at", retry_later=False)
    embedder = get_embedder()
    if embedder is None:
        return
    if (
        Message.objects.filter(session_id=session_id)
        .filter(messages_without_vector(embedder=embedder))
        .exists()
    ):
        embedding_request(session_id=session_id)


def embeddings_sweep(*, now: dt.datetime | None = None, batch: int = SWEEP_BATCH) -> int:
    """Enqueue embedding for sessions whose request has been pending too long (its task was
    lost, or the enqueue after the append failed). Returns how many."""
    if get_embedder() is None:
        return 0
    stale_before = (now or timezone.now()) - REQUEST_STALE_AFTER
    stale = list(
        Session.objects.filter(embedding_requested_at__lt=stale_before)
        .order_by("embedding_requested_at")
        .values_list("pk", flat=True)[:batch]
    )
    return sum(
        embedding_request(session_id=session_id, stale_before=stale_before) for session_id in stale
    )
