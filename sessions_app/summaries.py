"""Incremental session summaries: when to ask for one, how to write one, and setting one by hand.

The unsummarized history is `Session.token_count - Session.summarized_tokens`, two counters an
append already touches, so deciding "over the threshold" never sums over messages. A summary
folds every message after the current summary's through_seq except the newest KEEP_RECENT into
previous summary + newer messages -> new text. The LLM call happens outside any transaction; only
the insert of the finished row (unique on session + through_seq) takes the session's row lock.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from memoryhub.accounts.models import (
    MemoryPolicy,
    Tenant,
    default_summary_keep_recent,
    default_summary_threshold_tokens,
)
from memoryhub.accounts.redaction import redact_for_write
from memoryhub.accounts.selectors import memory_policy_for
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.tokens import count_tokens
from memoryhub.llm import ChatMessage, Completion
from memoryhub.llm.client import get_llm_client
from memoryhub.llm.models import LLM_MODEL_NAME_MAX_LENGTH
from memoryhub.llm.offline import offline_summary
from memoryhub.llm.prompts import summarize
from memoryhub.llm.usage import llm_usage_record
from sessions_app.models import Message, Session, Summary
from sessions_app.pending import pending_claim, pending_finish
from sessions_app.selectors import summary_current

logger = logging.getLogger(__name__)

# One run folds at most this much; a longer backlog takes several runs (each re-requests the
# next), so neither the read nor the prompt grows with the history.
FOLD_MAX_MESSAGES = 1000
FOLD_MAX_TOKENS = 32_000
SUMMARY_MAX_TOKENS = 600
# A request older than this with no summary since is taken as a lost task by the sweep.
REQUEST_STALE_AFTER = dt.timedelta(minutes=15)
SWEEP_BATCH = 500


def summary_due(
    *,
    token_count: int,
    summarized_tokens: int,
    last_seq: int,
    summarized_seq: int,
    policy: MemoryPolicy,
) -> bool:
    """Whether unsummarized history has passed the policy's threshold (strictly more than it)
    and holds messages older than the kept-recent ones, so that a run has something to fold."""
    return (
        policy.memory_enabled
        and policy.enable_summarization
        and token_count - summarized_tokens > policy.summary_threshold_tokens
        and last_seq - policy.summary_keep_recent > summarized_seq
    )


SUMMARY_STATE_FIELDS = (
    "tenant_id",
    "agent_id",
    "token_count",
    "summarized_tokens",
    "last_seq",
    "summarized_seq",
)


def session_summary_due(*, session: Session) -> bool:
    """summary_due for a Session loaded with SUMMARY_STATE_FIELDS."""
    return summary_due(
        token_count=session.token_count,
        summarized_tokens=session.summarized_tokens,
        last_seq=session.last_seq,
        summarized_seq=session.summarized_seq,
        policy=_policy(session=session),
    )


def _policy(*, session: Session) -> MemoryPolicy:
    return memory_policy_for(tenant_id=session.tenant_id, agent_id=session.agent_id)


def summary_request(
    *,
    session_id: uuid.UUID,
    stale_before: dt.datetime | None = None,
    from_append: bool = False,
    claimed: bool = False,
) -> bool:
    """Mark a summarization as requested unless one already is, and enqueue it after commit
    (sessions_app.pending: one pending task per session)."""
    return pending_claim(
        session_id=session_id,
        field="summary_requested_at",
        enqueue=lambda: summary_enqueue(session_id=session_id),
        stale_before=stale_before,
        from_append=from_append,
        claimed=claimed,
    )


def summary_enqueue(*, session_id: uuid.UUID) -> None:
    from sessions_app.tasks import summarize_session  # the task module imports this one

    summarize_session.delay(str(session_id))


def summary_request_finish(*, session_id: uuid.UUID, retry_later: bool = False) -> None:
    """The task is done with its request: clear it, and request again at once if appends that
    arrived meanwhile (and saw the request still set) left the session over the threshold.

    `retry_later` (a permanent failure) re-stamps the request instead, so the next attempt is
    the sweep's, after REQUEST_STALE_AFTER, rather than every following append's.
    """
    pending_finish(session_id=session_id, field="summary_requested_at", retry_later=retry_later)
    if retry_later:
        return
    session = Session.objects.filter(pk=session_id).only(*SUMMARY_STATE_FIELDS).first()
    if session is not None and session_summary_due(session=session):
        summary_request(session_id=session_id)


def summaries_sweep(*, now: dt.datetime | None = None, batch: int = SWEEP_BATCH) -> int:
    """Enqueue summarization for sessions over the threshold with no live request: never asked
    (an enqueue lost after commit) or asked long ago (a task lost in a worker). Returns how many.

    Scans sessions, not messages, most recently active first, at most `batch` per run. Each
    session is held to its own policy's threshold: the agent's override, else the tenant's,
    else the default.
    """
    now = now or timezone.now()
    stale_before = now - REQUEST_STALE_AFTER
    candidates = list(
        _sessions_over_their_threshold()
        .filter(Q(summary_requested_at__isnull=True) | Q(summary_requested_at__lt=stale_before))
        .order_by("-last_active_at")
        .values_list("pk", flat=True)[:batch]
    )
    enqueued = sum(
        summary_request(session_id=session_id, stale_before=stale_before)
        for session_id in candidates
    )
    if enqueued:
        logger.info("summaries sweep: enqueued %d session(s)", enqueued)
    return enqueued


def _sessions_over_their_threshold() -> QuerySet[Session]:
    def policy_of(agent_id: Any) -> QuerySet[MemoryPolicy]:
        return MemoryPolicy.objects.filter(tenant_id=OuterRef("tenant_id"), agent_id=agent_id)

    default_threshold = default_summary_threshold_tokens()
    lowest = min(
        [
            default_threshold,
            *MemoryPolicy.objects.values_list("summary_threshold_tokens", flat=True),
        ]
    )
    in_force = policy_of(OuterRef("agent_id"))
    tenant_wide = policy_of("")

    def policy_value(field: str, default: Any) -> Coalesce:
        return Coalesce(
            Subquery(in_force.values(field)[:1]),
            Subquery(tenant_wide.values(field)[:1]),
            Value(default),
        )

    return (
        # The lowest threshold anywhere is a cheap first cut before the per-row subqueries.
        Session.objects.filter(token_count__gt=F("summarized_tokens") + lowest)
        .annotate(
            policy_threshold=policy_value("summary_threshold_tokens", default_threshold),
            policy_keep_recent=policy_value("summary_keep_recent", default_summary_keep_recent()),
            policy_enabled=policy_value("memory_enabled", True),
            policy_summarizes=policy_value("enable_summarization", True),
        )
        .filter(
            policy_enabled=True,
            policy_summarizes=True,
            token_count__gt=F("summarized_tokens") + F("policy_threshold"),
            last_seq__gt=F("summarized_seq") + F("policy_keep_recent"),
        )
    )


@dataclass(frozen=True)
class _Fold:
    """What one run folds: the messages after the current summary, up to `through_seq`."""

    previous: Summary | None
    messages: list[Message]

    @property
    def through_seq(self) -> int:
        return self.messages[-1].seq


def _fold_for(*, session: Session, force: bool) -> _Fold | None:
    policy = _policy(session=session)
    if not policy.memory_enabled or not policy.enable_summarization:
        # Off is off, forced or not (seed 001's enable_summarization): POST …/summarize/
        # refuses before queueing, so this only meets a task queued before the switch.
        return None
    if not force and not session_summary_due(session=session):
        return None
    previous = summary_current(tenant_id=session.tenant_id, session_id=session.pk)
    after = previous.through_seq if previous else 0
    upto = session.last_seq - policy.summary_keep_recent
    if upto <= after:
        return None
    rows = list(
        Message.objects.filter(
            tenant_id=session.tenant_id, session_id=session.pk, seq__gt=after, seq__lte=upto
        )
        .order_by("seq")
        .only("seq", "role", "content", "token_count")[:FOLD_MAX_MESSAGES]
    )
    folded: list[Message] = []
    tokens = 0
    for row in rows:
        if folded and tokens + row.token_count > FOLD_MAX_TOKENS:
            break
        folded.append(row)
        tokens += row.token_count
    return _Fold(previous=previous, messages=folded) if folded else None


def session_summarize(*, session_id: uuid.UUID, force: bool = False) -> Summary | None:
    """Write the session's next summary, or return None when there is nothing to do: the
    session is gone, under the threshold (unless `force`), or has no messages to fold beyond
    the newest KEEP_RECENT.

    Call it outside a transaction: the LLM call can take seconds. LLMTransientError and
    LLMPermanentError propagate and leave the session exactly as it was. Idempotent: when
    another worker wrote the same range (or a newer summary) meanwhile, that row is returned.
    """
    session = Session.objects.filter(pk=session_id).only(*SUMMARY_STATE_FIELDS).first()
    if session is None:
        return None
    fold = _fold_for(session=session, force=force)
    if fold is None:
        return None
    previous_text = fold.previous.text if fold.previous else ""
    chat = [ChatMessage(role=m.role, content=m.content) for m in fold.messages]
    client = get_llm_client()
    completion: Completion | None = None
    if client is None:
        text = offline_summary(
            previous_summary=previous_text, messages=chat, max_tokens=SUMMARY_MAX_TOKENS
        )
        model = Summary.OFFLINE_MODEL
    else:
        completion = summarize(
            client=client,
            previous_summary=previous_text,
            messages=chat,
            max_tokens=SUMMARY_MAX_TOKENS,
        )
        text, model = completion.text, completion.model[:LLM_MODEL_NAME_MAX_LENGTH]
    # The model may repeat what older messages held: masked like them, never refused (no
    # client to answer here).
    text = redact_for_write(
        tenant_id=session.tenant_id,
        values={"text": text},
        object_type="summary",
        object_id=str(session.pk),
        agent_id=session.agent_id,
        never_refuse=True,
    )["text"]
    summary = _summary_store(session=session, fold=fold, text=text, model=model)
    if completion is not None:
        # The call was made (and paid for) even when another worker's row won.
        llm_usage_record(tenant_id=session.tenant_id, completion=completion, purpose="summary")
    return summary


def _summary_store(*, session: Session, fold: _Fold, text: str, model: str) -> Summary | None:
    """Insert the summary and advance summarized_tokens, under the session's row lock."""
    with transaction.atomic():
        locked = (
            Session.objects.select_for_update()
            .filter(pk=session.pk)
            .only("tenant_id", "summarized_tokens")
            .first()
        )
        if locked is None:
            return None  # deleted while the LLM was thinking
        newest = summary_current(tenant_id=session.tenant_id, session_id=session.pk)
        if newest is not None and newest.through_seq >= fold.through_seq:
            return newest  # another worker (or a PUT) got here first
        # Count only what the newest summary does not cover yet: if one was written since we
        # read, part of our range is already in summarized_tokens.
        covered = newest.through_seq if newest else 0
        added = sum(m.token_count for m in fold.messages if m.seq > covered)
        try:
            with transaction.atomic():
                summary = Summary.objects.create(
                    tenant_id=session.tenant_id,
                    session_id=session.pk,
                    text=text,
                    through_seq=fold.through_seq,
                    token_count=count_tokens(text),
                    model=model,
                )
        except IntegrityError:
            return Summary.objects.get(session_id=session.pk, through_seq=fold.through_seq)
        Session.objects.filter(pk=session.pk).update(
            summarized_tokens=F("summarized_tokens") + added, summarized_seq=fold.through_seq
        )
    return summary


@transaction.atomic
def summary_set(*, tenant: Tenant, session_id: uuid.UUID, text: str) -> Summary | None:
    """Set the summary by hand: it covers everything up to the session's last message.

    PUT semantics: when the current summary already ends at last_seq (nothing appended since),
    its text is replaced rather than refused, so repeating a PUT is harmless. None when the
    session's memory policy is off: nothing is written and nothing fails, as for every write.
    """
    session = (
        Session.objects.select_for_update()
        .filter(tenant=tenant, pk=session_id)
        .only("tenant_id", "agent_id", "last_seq", "token_count")
        .first()
    )
    if session is None:
        raise ResourceNotFound("No such session.")
    if not _policy(session=session).memory_enabled:
        return None
    text = redact_for_write(
        tenant_id=tenant.pk,
        values={"text": text},
        object_type="summary",
        object_id=str(session_id),
        agent_id=session.agent_id,
    )["text"]
    summary, _ = Summary.objects.update_or_create(
        session=session,
        through_seq=session.last_seq,
        defaults={
            "text": text,
            "token_count": count_tokens(text),
            "model": Summary.MANUAL_MODEL,
            "created_at": timezone.now(),
        },
        create_defaults={
            "tenant": tenant,
            "text": text,
            "token_count": count_tokens(text),
            "model": Summary.MANUAL_MODEL,
        },
    )
    # A later summary can only exist if seqs went backwards, which they never do; so this one
    # is current and everything appended so far counts as summarized.
    Session.objects.filter(pk=session.pk).update(
        summarized_tokens=session.token_count, summarized_seq=session.last_seq
    )
    return summary
