"""Every write to notes (seed 003): the long-term document, daily notes, clear and prune.

Notes are append-only: a change writes a new row with the next version for its (user, kind,
day), and the highest version is current. Nothing here updates a row in place; only pruning
deletes, and it deletes whole days.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from rest_framework import serializers

from facts_app.embedding import vectors_request
from facts_app.models import Note, NoteKind, NoteVector
from memoryhub.accounts.models import Actor, AuditAction, EndUser, Tenant
from memoryhub.accounts.redaction import redact_for_write
from memoryhub.accounts.services import audit_event_record
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.limits import limit

logger = logging.getLogger(__name__)

PRUNE_BATCH_SIZE = 1000


def today_utc() -> dt.date:
    """The day a daily note goes to when the bot names none: UTC, the same for every worker."""
    return timezone.now().astimezone(dt.UTC).date()


def _check_size(content: str) -> str:
    maximum = limit("NOTE_CONTENT_MAX_BYTES")
    if len(content.encode("utf-8")) > maximum:
        # Keyed by the input field, so a too-long append answers like a too-long request.
        raise serializers.ValidationError(
            {
                "content": [
                    serializers.ErrorDetail(
                        f"The note would be larger than {maximum} bytes (UTF-8).",
                        code="too_large",
                    )
                ]
            }
        )
    return content


def _lock_end_user(*, tenant: Tenant, end_user: EndUser) -> None:
    """Serialise note writes for one person until commit, so versions are assigned one at a time.

    On PostgreSQL this is the row lock; on SQLite the IMMEDIATE transaction already holds the
    database write lock and select_for_update is a no-op. The unique constraints on
    (user, kind, day, version) are the backstop either way. `FOR NO KEY UPDATE`: it waits for
    an erasure (and an erasure for it), not for the person's other writers, which only hold
    them (accounts.services.end_user_hold).
    """
    locked = (
        EndUser.objects.select_for_update(no_key=True)
        .filter(tenant=tenant, pk=end_user.pk)
        .values_list("pk", flat=True)
    )
    if not list(locked):
        # Erased between the lookup and the write.
        raise ResourceNotFound("No such user.")


def _current(*, tenant: Tenant, end_user: EndUser, kind: str, day: dt.date | None) -> Note | None:
    return (
        Note.objects.for_tenant(tenant)
        .filter(end_user=end_user, kind=kind, day=day)
        .order_by("-version")
        .first()
    )


def _new_version(
    *,
    tenant: Tenant,
    end_user: EndUser,
    kind: str,
    day: dt.date | None,
    content: str,
    previous: Note | None,
) -> Note:
    note = Note.objects.create(
        tenant=tenant,
        end_user=end_user,
        kind=kind,
        day=day,
        version=(previous.version if previous else 0) + 1,
        content=content,
    )
    if content:
        vectors_request(kind="note", tenant_id=tenant.pk, ids=[note.pk])
    return note


def _redacted(*, tenant: Tenant, end_user: EndUser, content: str) -> str:
    """The text as the tenant's redaction policy wants it stored (accounts.redaction)."""
    return redact_for_write(
        tenant_id=tenant.pk,
        values={"content": content},
        object_type="note",
        object_id=end_user.external_id,
    )["content"]


@transaction.atomic
def note_long_term_save(*, tenant: Tenant, end_user: EndUser, content: str) -> Note:
    """Replace the long-term document with `content` as a new version and return it.

    Saving the text that is already current writes nothing and returns the current version:
    a retried PUT must not grow the history, and an unchanged document is not a change.
    """
    _check_size(content)
    content = _redacted(tenant=tenant, end_user=end_user, content=content)
    _lock_end_user(tenant=tenant, end_user=end_user)
    current = _current(tenant=tenant, end_user=end_user, kind=NoteKind.LONG_TERM, day=None)
    if current is not None and current.content == content:
        return current
    return _new_version(
        tenant=tenant,
        end_user=end_user,
        kind=NoteKind.LONG_TERM,
        day=None,
        content=content,
        previous=current,
    )


@transaction.atomic
def note_daily_append(
    *, tenant: Tenant, end_user: EndUser, content: str, day: dt.date | None = None
) -> Note:
    """Append `content` to the day's current text (joined with a newline) as a new version.

    `day` defaults to today in UTC. Raises a ValidationError on `content` when the joined text
    would pass NOTE_CONTENT_MAX_BYTES: the limit is on what is stored, not on one request.
    """
    note_day = day or today_utc()
    content = _redacted(tenant=tenant, end_user=end_user, content=content)
    _lock_end_user(tenant=tenant, end_user=end_user)
    current = _current(tenant=tenant, end_user=end_user, kind=NoteKind.DAILY, day=note_day)
    text = f"{current.content}\n{content}" if current and current.content else content
    return _new_version(
        tenant=tenant,
        end_user=end_user,
        kind=NoteKind.DAILY,
        day=note_day,
        content=_check_size(text),
        previous=current,
    )


@transaction.atomic
def note_clear(*, tenant: Tenant, end_user: EndUser) -> int:
    """Seed 003's memory.clear: an empty new version of every note whose current text is not.

    History is kept (that is the point of append-only); recall shows nothing afterwards.
    Returns how many notes (the long-term document and each day) were cleared.
    """
    _lock_end_user(tenant=tenant, end_user=end_user)
    notes = Note.objects.for_tenant(tenant).filter(end_user=end_user)
    # Current versions only: no newer version of the same note exists. The day comparison
    # needs the kind split, because NULL = NULL is not true in SQL.
    newer_daily = notes.filter(
        kind=NoteKind.DAILY, day=OuterRef("day"), version__gt=OuterRef("version")
    )
    current_daily = list(
        notes.filter(kind=NoteKind.DAILY)
        .exclude(content="")
        .exclude(Exists(newer_daily))
        .order_by("day")
        .values_list("day", "version")
    )
    long_term = _current(tenant=tenant, end_user=end_user, kind=NoteKind.LONG_TERM, day=None)
    cleared: list[tuple[str, dt.date | None, int]] = [
        (NoteKind.DAILY, day, version) for day, version in current_daily
    ]
    if long_term is not None and long_term.content:
        cleared.insert(0, (NoteKind.LONG_TERM, None, long_term.version))
    Note.objects.bulk_create(
        [
            Note(
                tenant=tenant,
                end_user=end_user,
                kind=kind,
                day=day,
                version=version + 1,
                content="",
            )
            for kind, day, version in cleared
        ]
    )
    if cleared:
        # Every current version is empty now: the vectors of the texts before say nothing
        # about the notes as they stand.
        NoteVector.objects.filter(note__tenant=tenant, note__end_user=end_user).delete()
    return len(cleared)


def note_prune_cutoff(*, older_than_days: int, now: dt.datetime | None = None) -> dt.date:
    """The first day a prune keeps: days before it go."""
    moment = now or timezone.now()
    return moment.astimezone(dt.UTC).date() - dt.timedelta(days=older_than_days)


def note_daily_prune_for_person(
    *, tenant: Tenant, end_user: EndUser, actor: Actor, older_than_days: int, dry_run: bool = False
) -> int:
    """Seed 003's `prune()` on demand: the person's daily notes past the retention days, with
    one `purge` audit event (none for a dry run or when nothing went)."""
    pruned = note_daily_prune(
        tenant=tenant, end_user=end_user, older_than_days=older_than_days, dry_run=dry_run
    )
    if pruned and not dry_run:
        audit_event_record(
            tenant=tenant,
            actor=actor,
            action=AuditAction.PURGE,
            object_type="daily_notes",
            object_id=end_user.external_id,
            counts={"daily_notes": pruned},
            detail={
                "older_than_days": older_than_days,
                "cutoff": note_prune_cutoff(older_than_days=older_than_days).isoformat(),
            },
        )
    return pruned


def note_daily_prune(
    *,
    tenant: Tenant,
    older_than_days: int = 30,
    now: dt.datetime | None = None,
    batch_size: int = PRUNE_BATCH_SIZE,
    dry_run: bool = False,
    end_user: EndUser | None = None,
) -> int:
    """Delete every version of the tenant's daily notes (or one person's: `end_user`) dated
    more than `older_than_days` days before `now` (default: the current time); returns how many
    note versions were (with `dry_run`: would be) deleted.

    Retention's entry point (seed 003 keeps 30 days), and seed 003's `prune()` for one person.
    Deletes in batches of `batch_size` ids, oldest day first along the (tenant, kind, day)
    index, each batch its own short transaction, so a large backlog never holds locks for long
    and an interrupted run keeps its progress.
    """
    if older_than_days < 0:
        raise ValueError("older_than_days must be 0 or more.")
    cutoff = note_prune_cutoff(older_than_days=older_than_days, now=now)
    expired = Note.objects.for_tenant(tenant).filter(kind=NoteKind.DAILY, day__lt=cutoff)
    if end_user is not None:
        expired = expired.filter(end_user=end_user)
    if dry_run:
        return expired.count()
    deleted = 0
    while True:
        ids = list(expired.order_by("day", "pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            break
        with transaction.atomic():
            _, per_model = Note.objects.filter(pk__in=ids).delete()
        # Notes only: their vectors go along and are not notes.
        count = per_model.get(Note._meta.label, 0)
        deleted += count
        if len(ids) < batch_size:
            break
    logger.info("Pruned %d daily note versions before %s for tenant %s", deleted, cutoff, tenant.pk)
    return deleted
