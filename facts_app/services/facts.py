"""Writes to facts: create (deduplicated by normalised text), update, supersede, delete."""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import re
import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from facts_app.embedding import vectors_request
from facts_app.models import Fact, FactVector
from memoryhub.accounts.models import Actor, EndUser, Tenant
from memoryhub.accounts.provenance import source_session_check
from memoryhub.accounts.redaction import redact_for_write
from memoryhub.accounts.services import audited_delete, end_user_hold
from memoryhub.core.errors import Conflict, InvalidInput

_SPACE = re.compile(r"\s+")


def fact_normalise(content: str) -> str:
    """What makes two facts "the same": case, spacing and a final full stop do not count."""
    return _SPACE.sub(" ", content).strip().casefold().rstrip(".!").strip()


def fact_content_hash(content: str) -> str:
    return hashlib.sha256(fact_normalise(content).encode("utf-8")).hexdigest()


def fact_search_text(*, content: str, tags: list[str], end_user: EndUser | None) -> str:
    # The person's id and the tags are searchable too.
    parts = [content, " ".join(tags)]
    if end_user is not None:
        parts.append(end_user.external_id)
    return "\n".join(part for part in parts if part)


# Near duplicates: "User likes green tea" and "The user likes green tea." are one
# fact. Word sets overlapping this much, or texts this similar character by character, count as
# the same; both ignore case, spacing and final punctuation (fact_normalise).
NEAR_DUPLICATE_WORD_OVERLAP = 0.8
NEAR_DUPLICATE_TEXT_RATIO = 0.9
_WORD = re.compile(r"\w+")
_FILLER_WORDS = frozenset({"the", "a", "an", "user", "s"})
# Two texts that differ in a number or in a negation say different things however close they
# look ("is 30" / "is 31", "allergic" / "not allergic"): never near duplicates.
_NUMBER = re.compile(r"\d+")
_NEGATIONS = frozenset({"not", "no", "never", "t", "nor", "neither", "without"})


def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(fact_normalise(text))) - _FILLER_WORDS


def fact_near_duplicate_of(*, content: str, candidates: list[Fact]) -> Fact | None:
    """The first candidate that says the same as `content`, or None.

    Cheap enough for a few hundred candidates per extracted fact: a set comparison first, the
    character-level ratio only for candidates whose lengths are close.
    """
    normalised = fact_normalise(content)
    words = _words(content)
    numbers = _NUMBER.findall(normalised)
    for candidate in candidates:
        other = fact_normalise(candidate.content)
        if other == normalised:
            return candidate
        other_words = _words(candidate.content)
        if _NUMBER.findall(other) != numbers or (words ^ other_words) & _NEGATIONS:
            continue
        union = words | other_words
        if union and len(words & other_words) / len(union) >= NEAR_DUPLICATE_WORD_OVERLAP:
            return candidate
        shorter, longer = sorted((len(normalised), len(other)))
        if longer and shorter / longer >= NEAR_DUPLICATE_TEXT_RATIO:
            ratio = difflib.SequenceMatcher(None, normalised, other, autojunk=False).ratio()
            if ratio >= NEAR_DUPLICATE_TEXT_RATIO:
                return candidate
    return None


def _existing(*, tenant: Tenant, end_user: EndUser | None, content_hash: str) -> Fact | None:
    return (
        Fact.objects.for_tenant(tenant)
        .filter(end_user=end_user, content_hash=content_hash)
        .select_related("end_user")
        .first()
    )


# A caller's own id for a fact (seed 004's fact ids, an importer's source ids) is Fact.external_id,
# unique per tenant; metadata keeps a copy under this key, kept through a metadata PATCH.
FACT_EXTERNAL_ID_KEY = "external_id"
# A caller's clock may run a little ahead of ours (as for messages' created_at).
CREATED_AT_CLOCK_SKEW = dt.timedelta(minutes=5)


def fact_external_id(fact: Fact) -> str | None:
    return fact.external_id


def _by_external_id(*, tenant: Tenant, external_id: str) -> Fact | None:
    return (
        Fact.objects.for_tenant(tenant)
        .filter(external_id=external_id)
        .select_related("end_user")
        .first()
    )


def fact_created_at_checked(created_at: dt.datetime | None) -> dt.datetime | None:
    """A caller's `created_at` (a backfill, an import): not in the future; up to
    CREATED_AT_CLOCK_SKEW ahead is stored as now."""
    if created_at is None:
        return None
    now = timezone.now()
    if created_at > now + CREATED_AT_CLOCK_SKEW:
        raise InvalidInput(
            field="created_at", message="created_at is in the future.", code="created_at_in_future"
        )
    return min(created_at, now)


def fact_create(
    *,
    tenant: Tenant,
    end_user: EndUser | None,
    content: str,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    source_session_id: uuid.UUID | None = None,
    source_message_ids: list[int] | None = None,
    valid_until: dt.datetime | None = None,
    supersedes: Fact | None = None,
    external_id: str | None = None,
    created_at: dt.datetime | None = None,
    redaction_refuses: bool = True,
) -> tuple[Fact, bool]:
    """Store a fact, or return the one with the same normalised text for that person.

    `supersedes` marks an older fact as replaced by this one (it stays, with superseded_by and
    valid_until set) instead of deleting it.

    A caller that owns the fact's identity (an import, a backfill) may give `external_id`
    (unique per tenant: Fact.external_id, copied into metadata["external_id"]) and `created_at`
    (not in the future).
    A retry (the same id, person and text) returns the stored fact; the id on another fact,
    or this text already stored under another id, is a Conflict. A fact found by its text
    without an id takes the given one. `created_at` only dates a fact this call creates.

    The content is masked or refused as the tenant's redaction policy says (accounts.redaction);
    `redaction_refuses=False` masks even under "refuse" (facts the extraction writes).
    """
    source_session_check(tenant=tenant, session_id=source_session_id)
    created_at = fact_created_at_checked(created_at)
    content = redact_for_write(
        tenant_id=tenant.pk,
        values={"content": content},
        object_type="fact",
        object_id=end_user.external_id if end_user else "",
        never_refuse=not redaction_refuses,
    )["content"]
    content_hash = fact_content_hash(content)
    if external_id is not None:
        # metadata keeps a copy of the id: the API has always shown it there.
        metadata = {**(metadata or {}), FACT_EXTERNAL_ID_KEY: external_id}
        found = _by_external_id(tenant=tenant, external_id=external_id)
        if found is not None:
            return _retry_or_conflict(
                found=found, end_user=end_user, content_hash=content_hash, external_id=external_id
            )
        existing = _existing(tenant=tenant, end_user=end_user, content_hash=content_hash)
        if existing is not None:
            return _adopt_external_id(
                fact=existing, end_user=end_user, content_hash=content_hash, external_id=external_id
            )
    else:
        existing = _existing(tenant=tenant, end_user=end_user, content_hash=content_hash)
        if existing is not None:
            return existing, False
    return _fact_insert(
        tenant=tenant,
        end_user=end_user,
        content=content,
        content_hash=content_hash,
        tags=tags,
        metadata=metadata,
        source_session_id=source_session_id,
        source_message_ids=source_message_ids,
        valid_until=valid_until,
        supersedes=supersedes,
        created_at=created_at,
        external_id=external_id,
    )


def _retry_or_conflict(
    *, found: Fact, end_user: EndUser | None, content_hash: str, external_id: str
) -> tuple[Fact, bool]:
    if found.end_user_id == (end_user.pk if end_user else None) and (
        found.content_hash == content_hash
    ):
        return found, False
    raise Conflict(
        f"Fact id {external_id!r} is already another fact's (id {found.pk}).",
        code="fact_id_conflict",
    )


def _adopt_external_id(
    *, fact: Fact, end_user: EndUser | None, content_hash: str, external_id: str
) -> tuple[Fact, bool]:
    current = fact.external_id
    if current == external_id:
        return fact, False
    if current is not None:
        raise Conflict(
            f"This person already has this fact (id {fact.pk}) under the id {current!r}.",
            code="duplicate_fact",
        )
    fact.external_id = external_id
    fact.metadata = {**fact.metadata, FACT_EXTERNAL_ID_KEY: external_id}
    fact.updated_at = timezone.now()
    try:
        with transaction.atomic():
            # Only while the fact has no id: a concurrent adopter's id is not overwritten.
            adopted = Fact.objects.filter(pk=fact.pk, external_id__isnull=True).update(
                external_id=external_id, metadata=fact.metadata, updated_at=fact.updated_at
            )
    except IntegrityError:
        # Another writer gave this id to another fact first.
        found = _by_external_id(tenant=fact.tenant, external_id=external_id)
        if found is None:
            raise
        return _retry_or_conflict(
            found=found, end_user=end_user, content_hash=content_hash, external_id=external_id
        )
    if not adopted:
        fact.refresh_from_db()
        return _adopt_external_id(
            fact=fact, end_user=end_user, content_hash=content_hash, external_id=external_id
        )
    return fact, False


def _fact_insert(
    *,
    tenant: Tenant,
    end_user: EndUser | None,
    content: str,
    content_hash: str,
    tags: list[str] | None,
    metadata: dict[str, Any] | None,
    source_session_id: uuid.UUID | None,
    source_message_ids: list[int] | None,
    valid_until: dt.datetime | None,
    supersedes: Fact | None,
    created_at: dt.datetime | None,
    external_id: str | None,
) -> tuple[Fact, bool]:
    tag_list = list(dict.fromkeys(tags or []))
    try:
        with transaction.atomic():
            if end_user is not None:
                # Before the insert: an erasure under way waits for this fact or takes the
                # person first (404), never a foreign-key error at commit.
                end_user_hold(end_user_id=end_user.pk)
            fact = Fact.objects.create(
                tenant=tenant,
                end_user=end_user,
                content=content,
                content_hash=content_hash,
                external_id=external_id,
                search_text=fact_search_text(content=content, tags=tag_list, end_user=end_user),
                tags=tag_list,
                metadata=metadata or {},
                source_session_id=source_session_id,
                source_message_ids=source_message_ids or [],
                valid_until=valid_until,
            )
            if created_at is not None:
                # auto_now_add ignores a given value: the caller's time goes on after.
                Fact.objects.filter(pk=fact.pk).update(created_at=created_at)
                fact.created_at = created_at
            if supersedes is not None:
                fact_supersede(old=supersedes, new=fact)
            vectors_request(kind="fact", tenant_id=tenant.pk, ids=[fact.pk])
    except IntegrityError:
        # A concurrent post won the race: of the same id (a retry, or the id on another fact),
        # or of the same text (its fact, which takes the id if it has none).
        if external_id is not None:
            found = _by_external_id(tenant=tenant, external_id=external_id)
            if found is not None:
                return _retry_or_conflict(
                    found=found,
                    end_user=end_user,
                    content_hash=content_hash,
                    external_id=external_id,
                )
        existing = _existing(tenant=tenant, end_user=end_user, content_hash=content_hash)
        if existing is None:
            raise
        if external_id is not None:
            return _adopt_external_id(
                fact=existing,
                end_user=end_user,
                content_hash=content_hash,
                external_id=external_id,
            )
        return existing, False
    return fact, True


def fact_supersede(*, old: Fact, new: Fact) -> Fact:
    if old.pk == new.pk or old.tenant_id != new.tenant_id:
        raise Conflict("A fact can only be superseded by another fact of the same tenant.")
    old.superseded_by = new
    if old.valid_until is None or old.valid_until > timezone.now():
        old.valid_until = timezone.now()
    old.save(update_fields=["superseded_by", "valid_until", "updated_at"])
    return old


def fact_update(
    *,
    fact: Fact,
    content: str | None = None,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    valid_until: dt.datetime | None = None,
    clear_valid_until: bool = False,
) -> Fact:
    if content is not None:
        content = redact_for_write(
            tenant_id=fact.tenant_id,
            values={"content": content},
            object_type="fact",
            object_id=str(fact.pk),
        )["content"]
    content_changed = content is not None and content != fact.content
    if content is not None:
        fact.content = content
        fact.content_hash = fact_content_hash(content)
    if tags is not None:
        fact.tags = list(dict.fromkeys(tags))
    if metadata is not None:
        # The caller's id for the fact is its identity, not a free metadata key: it stays, and
        # a metadata that names another one is refused rather than quietly corrected.
        external_id = fact_external_id(fact)
        if metadata.get(FACT_EXTERNAL_ID_KEY, external_id) != external_id:
            raise InvalidInput(
                field="metadata",
                message="metadata.external_id is the fact's id and cannot change.",
                code="external_id_immutable",
            )
        fact.metadata = (
            metadata if external_id is None else {**metadata, FACT_EXTERNAL_ID_KEY: external_id}
        )
    if valid_until is not None or clear_valid_until:
        fact.valid_until = valid_until
    fact.search_text = fact_search_text(
        content=fact.content, tags=fact.tags, end_user=fact.end_user
    )
    try:
        with transaction.atomic():
            fact.save()
            if content_changed:
                # The old text's vector would keep answering for it: gone with the edit, and
                # the new text embedded after commit.
                FactVector.objects.filter(fact_id=fact.pk).delete()
                vectors_request(kind="fact", tenant_id=fact.tenant_id, ids=[fact.pk])
    except IntegrityError:
        raise Conflict(
            "This person already has a fact with the same text.", code="duplicate_fact"
        ) from None
    return fact


def fact_delete(*, fact: Fact, actor: Actor) -> None:
    audited_delete(
        obj=fact,
        tenant=fact.tenant,
        actor=actor,
        object_type="fact",
        object_id=str(fact.pk),
    )
