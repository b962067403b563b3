"""Fact extraction: after a user/assistant exchange, a worker asks the LLM for facts about the
person and stores each as a Fact with provenance (sclaw's extraction prompt, seed 004).

`Session.extracted_seq` is the cursor: messages up to it have been read. A run reads the
messages after it, up to the last assistant reply (an exchange the reply has not answered yet
waits for it), bounded by EXTRACT_MAX_MESSAGES and EXTRACT_MAX_TOKENS; a longer backlog takes
several runs, each requesting the next. The LLM call happens outside any transaction; the facts
and the cursor are written together under the session's row lock, so a redelivered task, or two
racing ones, store the facts once.

Not stored twice: a fact with the same normalised text (exact, also enforced by a unique
constraint), or one too close to a current fact of the person (near: fact_near_duplicate_of).
A fact the LLM marks `|| replaces: <known fact>` supersedes that fact instead of deleting it.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from facts_app.models import Fact
from facts_app.services.facts import fact_create, fact_near_duplicate_of, fact_supersede
from memoryhub.accounts.models import EndUser, MemoryPolicy
from memoryhub.accounts.selectors import memory_policy_for
from memoryhub.accounts.services import end_user_hold
from memoryhub.core.errors import ResourceNotFound
from memoryhub.llm import ChatMessage
from memoryhub.llm.client import get_llm_client
from memoryhub.llm.models import LLM_MODEL_NAME_MAX_LENGTH
from memoryhub.llm.prompts import ExtractedFact, extract_facts
from memoryhub.llm.usage import llm_usage_record
from sessions_app.models import Message, MessageRole, Session
from sessions_app.pending import pending_claim, pending_finish

logger = logging.getLogger(__name__)

EXTRACT_MAX_MESSAGES = 20
EXTRACT_MAX_TOKENS = 6000
# What the model is shown as "known facts" (so it can skip or replace them), and what a new
# fact is compared with for near duplicates: the person's most recent current facts.
KNOWN_FACTS_FOR_PROMPT = 50
KNOWN_FACTS_FOR_DEDUP = 500
REQUEST_STALE_AFTER = dt.timedelta(minutes=15)
SWEEP_BATCH = 500
EXCHANGE_ROLES = (MessageRole.USER, MessageRole.ASSISTANT)


def extraction_enabled(*, policy: MemoryPolicy) -> bool:
    """Extraction runs only with memory on, the policy's switch on, and an LLM configured
    (offline mode has no extractive fallback for facts: it would invent nothing useful)."""
    return policy.memory_enabled and policy.extraction_enabled and get_llm_client() is not None


def extraction_request(
    *,
    session_id: uuid.UUID,
    stale_before: dt.datetime | None = None,
    from_append: bool = False,
    claimed: bool = False,
) -> bool:
    """Request an extraction run for the session unless one is pending; enqueued after commit."""
    return pending_claim(
        session_id=session_id,
        field="extraction_requested_at",
        enqueue=lambda: extraction_enqueue(session_id=session_id),
        stale_before=stale_before,
        from_append=from_append,
        claimed=claimed,
    )


def extraction_enqueue(*, session_id: uuid.UUID) -> None:
    from sessions_app.tasks import extract_session_facts  # the task module imports this one

    extract_session_facts.delay(str(session_id))


@dataclass(frozen=True)
class ExtractionResult:
    through_seq: int
    created: list[Fact]
    skipped_duplicates: int
    superseded: int


def _exchange_for(*, session: Session) -> list[Message]:
    """The messages after the cursor up to the last assistant reply within the bounds."""
    rows = list(
        Message.objects.filter(
            tenant_id=session.tenant_id, session_id=session.pk, seq__gt=session.extracted_seq
        )
        .order_by("seq")
        .only("id", "seq", "role", "content", "token_count")[:EXTRACT_MAX_MESSAGES]
    )
    window: list[Message] = []
    tokens = 0
    for row in rows:
        if window and tokens + row.token_count > EXTRACT_MAX_TOKENS:
            break
        window.append(row)
        tokens += row.token_count
    last_reply = max(
        (index for index, row in enumerate(window) if row.role == MessageRole.ASSISTANT),
        default=None,
    )
    return [] if last_reply is None else window[: last_reply + 1]


def _current_facts(*, end_user_id: int, tenant_id: int, limit: int) -> list[Fact]:
    now = timezone.now()
    return list(
        Fact.objects.filter(tenant_id=tenant_id, end_user_id=end_user_id, superseded_by=None)
        .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=now))
        .order_by("-updated_at", "-id")
        .only("id", "content", "content_hash", "tenant_id", "end_user_id", "valid_until")[:limit]
    )


def session_extract_facts(*, session_id: uuid.UUID) -> ExtractionResult | None:
    """Run one extraction for the session; None when there is nothing to do (the session is
    gone, has no person, its policy is off, or no assistant reply follows the cursor).

    Call it outside a transaction. LLMTransientError and LLMPermanentError propagate and leave
    the session and its facts exactly as they were.
    """
    session = (
        Session.objects.filter(pk=session_id)
        .only("tenant_id", "agent_id", "end_user_id", "extracted_seq")
        .first()
    )
    if session is None or session.end_user_id is None:
        return None
    policy = memory_policy_for(tenant_id=session.tenant_id, agent_id=session.agent_id)
    client = get_llm_client()
    if client is None or not extraction_enabled(policy=policy):
        return None
    exchange = _exchange_for(session=session)
    if not exchange:
        return None
    known = _current_facts(
        tenant_id=session.tenant_id, end_user_id=session.end_user_id, limit=KNOWN_FACTS_FOR_DEDUP
    )
    chat = [
        ChatMessage(role=m.role, content=m.content)
        for m in exchange
        if m.role in EXCHANGE_ROLES and m.content.strip()
    ]
    if not chat:
        # Tool calls and empty replies only: nothing to ask about, but the cursor moves on.
        return _facts_store(session=session, exchange=exchange, extracted=[], model="")
    extracted, completion = extract_facts(
        client=client,
        exchange=chat,
        known_facts=[fact.content for fact in known[:KNOWN_FACTS_FOR_PROMPT]],
    )
    result = _facts_store(
        session=session,
        exchange=exchange,
        extracted=extracted,
        model=completion.model[:LLM_MODEL_NAME_MAX_LENGTH],
    )
    llm_usage_record(tenant_id=session.tenant_id, completion=completion, purpose="extraction")
    return result


def _facts_store(
    *, session: Session, exchange: list[Message], extracted: list[ExtractedFact], model: str
) -> ExtractionResult | None:
    through_seq = exchange[-1].seq
    with transaction.atomic():
        if session.end_user_id is not None:
            # The person before the session, the order an erasure locks in (a session without
            # one has no facts to store: the check below).
            try:
                end_user_hold(end_user_id=session.end_user_id)
            except ResourceNotFound:
                return None  # erased while the LLM was thinking
        # Lock the session row only: end_user is the nullable side of an outer join, which
        # PostgreSQL refuses to lock.
        locked = (
            Session.objects.select_for_update(of=("self",))
            .filter(pk=session.pk)
            .select_related("tenant", "end_user")
            .first()
        )
        if locked is None or locked.end_user is None:
            return None  # deleted (or its person erased) while the LLM was thinking
        if locked.extracted_seq >= through_seq:
            return None  # another run stored this exchange already
        end_user: EndUser = locked.end_user
        current = _current_facts(
            tenant_id=locked.tenant_id, end_user_id=end_user.pk, limit=KNOWN_FACTS_FOR_DEDUP
        )
        by_content = {fact.content: fact for fact in current}
        created: list[Fact] = []
        skipped = superseded = 0
        for item in extracted:
            replaced = by_content.get(item.replaces) if item.replaces else None
            others = [fact for fact in current if fact is not replaced]
            if fact_near_duplicate_of(content=item.content, candidates=others) is not None:
                skipped += 1
                continue
            fact, was_created = fact_create(
                tenant=locked.tenant,
                end_user=end_user,
                content=item.content,
                metadata={"source": "extraction", "model": model},
                source_session_id=locked.pk,
                source_message_ids=[message.pk for message in exchange],
                supersedes=replaced,
                redaction_refuses=False,
            )
            if not was_created:
                if fact.superseded_by_id is None:
                    skipped += 1
                    continue
                # A superseded fact holds again ("moved back to Paris"): the unique text keeps
                # it one row, so it becomes current again rather than a second copy.
                _fact_revive(fact=fact)
                if replaced is not None:
                    fact_supersede(old=replaced, new=fact)
            created.append(fact)
            current.append(fact)
            if replaced is not None:
                superseded += 1
                current.remove(replaced)
                by_content.pop(replaced.content, None)
        Session.objects.filter(pk=locked.pk).update(extracted_seq=through_seq)
    return ExtractionResult(
        through_seq=through_seq,
        created=created,
        skipped_duplicates=skipped,
        superseded=superseded,
    )


def _fact_revive(*, fact: Fact) -> None:
    fact.superseded_by = None
    fact.valid_until = None
    fact.save(update_fields=["superseded_by", "valid_until", "updated_at"])


def extraction_request_finish(*, session_id: uuid.UUID, retry_later: bool = False) -> None:
    """Clear the request; ask again at once when an assistant reply arrived after the cursor
    meanwhile (its append saw the request still set and did not ask)."""
    pending_finish(session_id=session_id, field="extraction_requested_at", retry_later=retry_later)
    if retry_later:
        return
    session = Session.objects.filter(pk=session_id).only("extracted_seq").first()
    if session is None:
        return
    more = Message.objects.filter(
        session_id=session_id, seq__gt=session.extracted_seq, role=MessageRole.ASSISTANT
    ).exists()
    if more:
        extraction_request(session_id=session_id)


def extraction_sweep(*, now: dt.datetime | None = None, batch: int = SWEEP_BATCH) -> int:
    """Re-enqueue extraction requests that stayed pending too long (their task was lost)."""
    now = now or timezone.now()
    stale_before = now - REQUEST_STALE_AFTER
    candidates = list(
        Session.objects.filter(extraction_requested_at__lt=stale_before)
        .order_by("extraction_requested_at")
        .values_list("pk", flat=True)[:batch]
    )
    enqueued = sum(
        extraction_request(session_id=session_id, stale_before=stale_before)
        for session_id in candidates
    )
    if enqueued:
        logger.info("extraction sweep: enqueued %d session(s)", enqueued)
    return enqueued
