"""Every write to conversation memory: sessions, message appends and session state."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from memoryhub.accounts.idempotency import idempotency_responses_erase
from memoryhub.accounts.models import Actor, AuditAction, EndUser, Tenant
from memoryhub.accounts.redaction import (
    redact_for_write,
    redact_tool_calls,
    redaction_on_anywhere,
    tool_calls_with,
)
from memoryhub.accounts.selectors import (
    memory_disabled_anywhere,
    memory_policy_for,
    memory_policy_for_every_agent,
)
from memoryhub.accounts.services import (
    audited_delete,
    end_user_get_or_create,
    end_user_hold,
    end_user_recall_touch,
)
from memoryhub.core.errors import Conflict, InvalidInput, ResourceNotFound
from memoryhub.core.locks import DELETE_RERUN_SQLSTATES, rows_hold, rows_lock, run_rerunning
from memoryhub.core.prepared import statements_prepared
from memoryhub.core.tokens import count_tokens
from sessions_app.embedding import embedding_enabled, embedding_enqueue_after_append
from sessions_app.extraction import extraction_enabled, extraction_request
from sessions_app.models import (
    MESSAGE_INSERT_COLUMNS,
    Message,
    MessageRole,
    Plan,
    Session,
    StateEntry,
    TaskContext,
)
from sessions_app.summaries import summary_due, summary_request


@dataclass(frozen=True)
class MessageInput:
    role: str
    content: str = ""
    name: str = ""
    tool_call_id: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: dt.datetime | None = None
    token_count: int | None = None


# The Idempotency-Key scope of appends: retention finds their stored responses by it.
MESSAGE_APPEND_SCOPE = "sessions.messages.append"

# A client's clock may run a little ahead of ours: a given time up to this far ahead is stored as
# now, so that a message appended later without a time never sorts before it.
CREATED_AT_CLOCK_SKEW = dt.timedelta(minutes=5)


class MessageInputInvalid(InvalidInput):
    """InvalidInput about `field` of `messages[index]`: the API names the message of a batch."""

    def __init__(self, *, index: int, field: str, message: str, code: str) -> None:
        super().__init__(field=field, message=message, code=code)
        self.index = index


def message_inputs_counted(*, messages: list[MessageInput]) -> list[MessageInput]:
    """Fill in token counts. Callers do this before opening a transaction: tokenizing is the
    slow part of an append and needs no lock."""
    return [
        item
        if item.token_count is not None
        else replace(item, token_count=count_tokens(item.content))
        for item in messages
    ]


def session_create_or_get(
    *,
    tenant: Tenant,
    user_id: str | None = None,
    agent_id: str = "",
    external_key: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> tuple[Session, bool]:
    """Create a session, or return the one already holding `external_key` (created=False).

    The bot's `channel:chat:thread` key is unique per tenant, so two racing requests for the
    same key end up with one session: the loser's insert fails and it reads the winner's row.
    """
    end_user = end_user_get_or_create(tenant=tenant, external_id=user_id) if user_id else None
    if external_key is not None:
        existing = _session_by_external_key(tenant=tenant, external_key=external_key)
        if existing is not None:
            _check_same_owner(existing=existing, end_user=end_user)
            return existing, False
    try:
        with transaction.atomic():
            if end_user is not None:
                end_user_hold(end_user_id=end_user.pk)  # 404 if erased since the lookup
            session = Session.objects.create(
                tenant=tenant,
                end_user=end_user,
                agent_id=agent_id,
                external_key=external_key,
                metadata=metadata or {},
                last_active_at=timezone.now(),
            )
    except IntegrityError:
        existing = _session_by_external_key(tenant=tenant, external_key=external_key)
        if existing is None:
            if tenant.person is None:
                raise
            # Held by a session a person-bound token cannot see: another person's.
            raise Conflict(
                "This external_key already belongs to a session of another user.",
                code="external_key_conflict",
            ) from None
        _check_same_owner(existing=existing, end_user=end_user)
        return existing, False
    return session, True


def _session_by_external_key(*, tenant: Tenant, external_key: str | None) -> Session | None:
    return (
        Session.objects.for_tenant(tenant)
        .select_related("end_user")
        .filter(external_key=external_key)
        .first()
    )


def _check_same_owner(*, existing: Session, end_user: EndUser | None) -> None:
    if end_user is not None and existing.end_user_id not in (None, end_user.pk):
        raise Conflict(
            "This external_key already belongs to a session of another user.",
            code="external_key_conflict",
        )


def session_update(
    *,
    session: Session,
    agent_id: str | None = None,
    external_key: str | None = None,
    clear_external_key: bool = False,
    metadata: dict[str, Any] | None = None,
) -> Session:
    """Patch the given fields; an update counts as activity (seed 002 "touch on update")."""
    fields = ["last_active_at", "updated_at"]
    if agent_id is not None:
        session.agent_id = agent_id
        fields.append("agent_id")
    if external_key is not None or clear_external_key:
        session.external_key = None if clear_external_key else external_key
        fields.append("external_key")
    if metadata is not None:
        session.metadata = metadata
        fields.append("metadata")
    session.last_active_at = timezone.now()
    try:
        with transaction.atomic():
            session.save(update_fields=fields)
    except IntegrityError:
        raise Conflict(
            "Another session already has this external_key.", code="external_key_conflict"
        ) from None
    return session


def session_delete(
    *, session: Session, actor: Actor, action: str = AuditAction.DELETE
) -> dict[str, int]:
    """Delete a session with its messages, state, summaries, plans and task contexts, in one
    transaction with one audit event (`action`: a purge says so) that counts what went. The
    stored responses of writes to it are blanked in the same transaction (a replay answers
    410: accounts.idempotency), and the person's search indexes are told.

    It completes while the bot is still writing: it locks as writers do — the person's row
    (touching their recall version, which search needs anyway), then the session's, then the
    rows under it that have rows of their own (plans, task contexts) — before the collector
    looks for what cascades. An append waiting for the session's row then finds it gone (404),
    and no row can appear between the collector's delete of the children and the session's;
    a message's vector is written under the session's lock too (sessions_app.embedding). A
    deadlock that slips through is run again. ResourceNotFound when it is gone already.
    """

    def delete() -> dict[str, int]:
        with transaction.atomic():
            if session.end_user_id is not None:
                end_user_recall_touch(tenant=session.tenant, end_user_ids=[session.end_user_id])
            if not rows_lock(Session.objects.filter(pk=session.pk)):
                raise ResourceNotFound("No such session.")
            sessions_delete_prepare(tenant=session.tenant, session_ids=[session.pk])
            return audited_delete(
                obj=session,
                tenant=session.tenant,
                actor=actor,
                action=action,
                object_type="session",
                object_id=str(session.pk),
            )

    return run_rerunning(delete, sqlstates=DELETE_RERUN_SQLSTATES)


def sessions_delete_prepare(*, tenant: Tenant, session_ids: list[uuid.UUID]) -> None:
    """What deleting these sessions needs first, in the delete's transaction and with their
    rows locked already: lock the rows under them that writers add rows under (plans get task
    contexts, task contexts sub-tasks), so the collector misses nothing; and blank the stored
    responses of writes to them. Messages are not locked: their only rows, vectors, are written
    under the session's lock."""
    rows_lock(Plan.objects.filter(session_id__in=session_ids))
    rows_lock(TaskContext.objects.filter(session_id__in=session_ids))
    idempotency_responses_erase(tenant=tenant, session_ids=session_ids)


def session_owner_hold(*, tenant: Tenant, session_id: uuid.UUID) -> int | None:
    """The session's person, held until commit (accounts.services.end_user_hold): for a write
    that will store their id (an idempotent append's stored response), and so must lock them
    before the session, in the order an erasure locks. None when the session has no person or
    no longer exists (the write itself then finds no session: 404)."""
    held = rows_hold(EndUser.objects.filter(tenant=tenant, sessions__pk=session_id))
    return held[0] if held else None


def _lock_session(*, tenant: Tenant, session_id: uuid.UUID) -> Session:
    # The row lock serialises appends to one session (PostgreSQL); on SQLite the IMMEDIATE
    # transaction already holds the database write lock, and select_for_update is a no-op.
    session = Session.objects.select_for_update().filter(tenant=tenant, pk=session_id).first()
    if session is None:
        raise ResourceNotFound("No such session.")
    return session


def memory_enabled_for_session(*, tenant: Tenant, session_id: uuid.UUID) -> bool:
    """Whether the session's policy keeps memory; ResourceNotFound for another tenant's session.

    Costs no query for a tenant whose policies all keep memory (the cached usual case), and
    one indexed read of the session's agent otherwise.
    """
    if not memory_disabled_anywhere(tenant_id=tenant.pk):
        return True
    agent_id = (
        Session.objects.for_tenant(tenant)
        .filter(pk=session_id)
        .values_list("agent_id", flat=True)
        .first()
    )
    if agent_id is None:
        raise ResourceNotFound("No such session.")
    return memory_policy_for(tenant=tenant, agent_id=agent_id).memory_enabled


def message_append_batch(
    *, tenant: Tenant, session_id: uuid.UUID, messages: list[MessageInput]
) -> list[Message]:
    """Append messages in order with gapless seqs; all or none are written.

    A message's `created_at` (a backfill, an import) must have a UTC offset, be no later than
    now (within CREATED_AT_CLOCK_SKEW, stored as now), and not be earlier than the message
    before it, in the batch or already stored: times are non-decreasing in seq order. A message
    without one is stored at now. A refusal is a MessageInputInvalid naming the message.

    Returns the stored messages, or [] when the session's memory policy is off: then nothing is
    written and nothing fails (seed 004). Raises ResourceNotFound for a session that is not the
    tenant's. Summarization and fact extraction are only requested here (a flag and, after
    commit, an enqueue); the LLM is never on this path.
    """
    now = timezone.now()
    times, first_given = _message_times(messages=messages, now=now)
    if not memory_enabled_for_session(tenant=tenant, session_id=session_id):
        return []
    messages = messages_redacted(tenant=tenant, session_id=session_id, messages=messages)
    counted = message_inputs_counted(messages=messages)
    tokens = sum(item.token_count or 0 for item in counted)
    requests = _append_requests(tenant=tenant, messages=counted)
    stored: list[Message] | None = None
    # Nothing to read between the claim and the insert: on PostgreSQL one statement does both.
    claim_and_insert = first_given is None and connection.vendor == "postgresql"
    # And when the policy, every agent's, decided its requests, that statement is the whole
    # append: outside a caller's transaction it runs as its own, and the COMMIT's round trip is
    # saved (0.3 of 1.8 ms in-process). Its on_commit work then runs once it has returned, as
    # after a commit.
    statement_is_transaction = (
        claim_and_insert and requests is not None and not connection.in_atomic_block
    )
    with contextlib.nullcontext() if statement_is_transaction else transaction.atomic():
        # The claim and the insert are prepared statements (one plan each, whatever the values:
        # memoryhub.core.prepared); nothing else in this transaction is.
        claim_statement = _claim_statement(
            tenant=tenant,
            session_id=session_id,
            count=len(counted),
            tokens=tokens,
            now=now,
            requests=requests,
        )
        with statements_prepared():
            if claim_and_insert:
                claim, stored = _claim_and_insert(
                    tenant=tenant,
                    session_id=session_id,
                    messages=counted,
                    times=times,
                    claim_statement=claim_statement,
                )
            else:
                claim = _claim_seqs(statement=claim_statement)
        if first_given is not None and claim.first_seq > 1:
            # Read under the row lock the claim took, so no append can slip in between. Only a
            # message bringing its own time pays for the read: `now` follows any stored time.
            _check_not_before_previous(
                session_id=session_id, time=times[first_given], index=first_given
            )
        if requests is not None:
            # The claim decided them (the policy is every agent's): no statement more.
            if claim.summary_requested_here:
                summary_request(session_id=session_id, from_append=True, claimed=True)
            if claim.extraction_requested_here:
                extraction_request(session_id=session_id, from_append=True, claimed=True)
        else:
            _append_requests_by_agent(
                tenant=tenant, session_id=session_id, claim=claim, messages=counted
            )
        if claim.embedding_requested:
            transaction.on_commit(
                lambda: embedding_enqueue_after_append(session_id=session_id), robust=True
            )
        if stored is None:
            with statements_prepared():
                stored = _messages_insert(
                    tenant=tenant,
                    session_id=session_id,
                    first_seq=claim.first_seq,
                    messages=counted,
                    times=times,
                )
        return stored


@dataclass(frozen=True)
class _AppendRequests:
    """What decides an append's summary and extraction requests, when its policy is known
    before its claim: the claim's UPDATE then sets them itself (_claim_statement)."""

    summarize: bool  # the policy keeps memory and summarizes
    threshold_tokens: int
    keep_recent: int
    extract: bool  # the append brings an assistant turn and the policy extracts


def _append_requests(*, tenant: Tenant, messages: list[MessageInput]) -> _AppendRequests | None:
    """The append's requests decided from the policy every agent of the tenant shares; None
    when agents have their own (the session's agent, known after the claim, decides then)."""
    policy = memory_policy_for_every_agent(tenant=tenant)
    if policy is None:
        return None
    return _AppendRequests(
        summarize=policy.memory_enabled and policy.enable_summarization,
        threshold_tokens=policy.summary_threshold_tokens,
        keep_recent=policy.summary_keep_recent,
        extract=any(item.role == MessageRole.ASSISTANT for item in messages)
        and extraction_enabled(policy=policy),
    )


def _append_requests_by_agent(
    *, tenant: Tenant, session_id: uuid.UUID, claim: _Claim, messages: list[MessageInput]
) -> None:
    """An append's requests under its session's agent's policy: an UPDATE each, once per
    summary or extraction (the thresholds are known from the counters the claim returned)."""
    policy = memory_policy_for(tenant=tenant, agent_id=claim.agent_id)
    if claim.summary_requested_at is None and summary_due(
        token_count=claim.token_count,
        summarized_tokens=claim.summarized_tokens,
        last_seq=claim.last_seq,
        summarized_seq=claim.summarized_seq,
        policy=policy,
    ):
        summary_request(session_id=session_id, from_append=True)
    if (
        claim.extraction_requested_at is None
        and claim.has_end_user
        and any(item.role == MessageRole.ASSISTANT for item in messages)
        and extraction_enabled(policy=policy)
    ):
        extraction_request(session_id=session_id, from_append=True)


def _message_values(
    *,
    tenant: Tenant,
    session_id: uuid.UUID,
    messages: list[MessageInput],
    times: list[dt.datetime],
) -> list[list[Any]]:
    """Each message's column values but its seq, in MESSAGE_INSERT_COLUMNS' order, adapted for the
    connection by the fields themselves (JSON, times, the session's id), as the ORM would."""
    meta = Message._meta
    prep_session = meta.get_field("session").get_db_prep_save(session_id, connection)
    tool_calls_field = meta.get_field("tool_calls")
    metadata_field = meta.get_field("metadata")
    created_field = meta.get_field("created_at")
    return [
        [
            tenant.pk,
            prep_session,
            item.role,
            item.content,
            item.name,
            item.tool_call_id,
            tool_calls_field.get_db_prep_save(item.tool_calls, connection),
            metadata_field.get_db_prep_save(item.metadata, connection),
            item.token_count or 0,
            created_field.get_db_prep_save(times[offset], connection),
        ]
        for offset, item in enumerate(messages)
    ]


def _messages_stored(
    *,
    tenant: Tenant,
    session_id: uuid.UUID,
    first_seq: int,
    messages: list[MessageInput],
    times: list[dt.datetime],
    ids: list[int],
) -> list[Message]:
    """The inserted messages as instances, as `bulk_create` hands them back."""
    stored: list[Message] = []
    for offset, (item, pk) in enumerate(zip(messages, ids, strict=True)):
        message = Message(
            id=pk,
            tenant=tenant,
            session_id=session_id,
            seq=first_seq + offset,
            role=item.role,
            content=item.content,
            name=item.name,
            tool_call_id=item.tool_call_id,
            tool_calls=item.tool_calls,
            metadata=item.metadata,
            token_count=item.token_count or 0,
            created_at=times[offset],
        )
        message._state.adding = False
        message._state.db = connection.alias
        stored.append(message)
    return stored


def _messages_insert(
    *,
    tenant: Tenant,
    session_id: uuid.UUID,
    first_seq: int,
    messages: list[MessageInput],
    times: list[dt.datetime],
) -> list[Message]:
    """Insert the messages at `first_seq` on, in one statement; returns them as stored.

    What `bulk_create` would send, without building the statement from the model on every
    append (a tenth of an append's instructions: bench/README.md, "Eighth round")."""
    meta = Message._meta
    quote = connection.ops.quote_name
    row = "(" + ", ".join(["%s"] * len(MESSAGE_INSERT_COLUMNS)) + ")"
    sql = (
        f"INSERT INTO {quote(meta.db_table)} "  # noqa: S608 (identifiers from model metadata)
        f"({', '.join(quote(column) for column in MESSAGE_INSERT_COLUMNS)}) "
        f"VALUES {', '.join([row] * len(messages))} RETURNING {quote(meta.pk.column)}"
    )
    params: list[Any] = []
    values = _message_values(tenant=tenant, session_id=session_id, messages=messages, times=times)
    for offset, columns in enumerate(values):
        params += (*columns[:2], first_seq + offset, *columns[2:])
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        ids = [row_id for (row_id,) in cursor.fetchall()]
    return _messages_stored(
        tenant=tenant,
        session_id=session_id,
        first_seq=first_seq,
        messages=messages,
        times=times,
        ids=ids,
    )


def _claim_and_insert(
    *,
    tenant: Tenant,
    session_id: uuid.UUID,
    messages: list[MessageInput],
    times: list[dt.datetime],
    claim_statement: _ClaimStatement,
) -> tuple[_Claim, list[Message]]:
    """_claim_seqs and _messages_insert in one statement (PostgreSQL): the claim's UPDATE in a
    data-modifying CTE, the insert taking its seqs from the claimed range. One round trip,
    parsed and planned once per connection, where the two took two; a session that is not the
    tenant's claims nothing, so nothing is inserted either."""
    count = len(messages)
    meta = Message._meta
    quote = connection.ops.quote_name
    columns = [column for column in MESSAGE_INSERT_COLUMNS if column != "seq"]
    # Typed, so that a column of NULLs (no message with tool calls) is not taken for text.
    casts = [f"CAST(%s AS {_message_cast_type(column)})" for column in columns]
    row = f"(CAST(%s AS integer), {', '.join(casts)})"
    selected = ", ".join(
        "claim.last_seq - %s + v.ord" if column == "seq" else f"v.{quote(column)}"
        for column in MESSAGE_INSERT_COLUMNS
    )
    sql = (
        f"WITH claim AS ({claim_statement.sql}), "  # noqa: S608 (identifiers from model metadata)
        f"inserted AS (INSERT INTO {quote(meta.db_table)} "
        f"({', '.join(quote(column) for column in MESSAGE_INSERT_COLUMNS)}) "
        f"SELECT {selected} FROM claim CROSS JOIN "
        f"(VALUES {', '.join([row] * count)}) "
        f"AS v(ord, {', '.join(quote(column) for column in columns)}) "
        f"RETURNING {quote(meta.pk.column)}, seq) "
        f"SELECT claim.*, ARRAY(SELECT {quote(meta.pk.column)} FROM inserted ORDER BY seq) "
        "FROM claim"
    )
    params: list[Any] = [*claim_statement.params, count - 1]
    values = _message_values(tenant=tenant, session_id=session_id, messages=messages, times=times)
    for offset, message_columns in enumerate(values):
        params += (offset, *message_columns)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchone()
    if found is None:
        raise ResourceNotFound("No such session.")
    claim = claim_statement.claim(found[:-1])
    stored = _messages_stored(
        tenant=tenant,
        session_id=session_id,
        first_seq=claim.first_seq,
        messages=messages,
        times=times,
        ids=list(found[-1]),
    )
    return claim, stored


@functools.cache
def _message_cast_type(column: str) -> str:
    """The column's type as a cast names it (a foreign key's is its target's)."""
    field = next(field for field in Message._meta.concrete_fields if field.column == column)
    cast_type = field.db_type(connection)
    if cast_type is None:
        raise TypeError(f"sessions_app_message.{column} has no database type to cast to")
    return cast_type


def messages_redacted(
    *, tenant: Tenant, session_id: uuid.UUID, messages: list[MessageInput]
) -> list[MessageInput]:
    """The messages as the session's redaction policy wants them stored (accounts.redaction):
    contents and tool call arguments masked, or RedactedContentRefused. With redaction off
    everywhere in the tenant (the default) they come back as given, at no query."""
    if not redaction_on_anywhere(tenant_id=tenant.pk):
        return messages
    agent_id = (
        Session.objects.for_tenant(tenant)
        .filter(pk=session_id)
        .values_list("agent_id", flat=True)
        .first()
    )
    if agent_id is None:
        raise ResourceNotFound("No such session.")
    values: dict[str, str] = {}
    for index, item in enumerate(messages):
        # Named as the API names the fields: a batch's by message index.
        prefix = f"messages.{index}." if len(messages) > 1 else ""
        values[f"{prefix}content"] = item.content
        for name, text in redact_tool_calls(tool_calls=item.tool_calls).items():
            values[f"{prefix}{name}"] = text
    masked = redact_for_write(
        tenant_id=tenant.pk,
        values=values,
        object_type="message",
        object_id=str(session_id),
        agent_id=agent_id,
    )
    if masked == values:
        return messages
    redacted: list[MessageInput] = []
    for index, item in enumerate(messages):
        prefix = f"messages.{index}." if len(messages) > 1 else ""
        calls = {
            name.removeprefix(prefix): text
            for name, text in masked.items()
            if name.startswith(f"{prefix}tool_calls.")
        }
        content = masked[f"{prefix}content"]
        redacted.append(
            replace(
                item,
                content=content,
                tool_calls=tool_calls_with(tool_calls=item.tool_calls, values=calls),
                # Counted again: the stored text is the masked one.
                token_count=item.token_count if content == item.content else None,
            )
        )
    return redacted


def _message_times(
    *, messages: list[MessageInput], now: dt.datetime
) -> tuple[list[dt.datetime], int | None]:
    """The time each message is stored at, and the index of the first that brought its own."""
    times: list[dt.datetime] = []
    first_given: int | None = None
    for index, item in enumerate(messages):
        if item.created_at is None:
            times.append(now)
            continue
        if timezone.is_naive(item.created_at):
            raise MessageInputInvalid(
                index=index,
                field="created_at",
                message="created_at needs a UTC offset.",
                code="naive_datetime",
            )
        if item.created_at > now + CREATED_AT_CLOCK_SKEW:
            raise MessageInputInvalid(
                index=index,
                field="created_at",
                message="created_at is in the future.",
                code="created_at_in_future",
            )
        time = min(item.created_at, now).astimezone(dt.UTC)
        # Every stored time is at most now, so only a given time can come before its neighbour.
        if times and time < times[-1]:
            raise MessageInputInvalid(
                index=index,
                field="created_at",
                message="created_at is before the previous message's time in this batch.",
                code="created_at_out_of_order",
            )
        if first_given is None:
            first_given = index
        times.append(time)
    return times, first_given


def _check_not_before_previous(*, session_id: uuid.UUID, time: dt.datetime, index: int) -> None:
    previous = (
        Message.objects.filter(session_id=session_id)
        .order_by("-seq")
        .values_list("created_at", flat=True)
        .first()
    )
    if previous is not None and time < previous:
        raise MessageInputInvalid(
            index=index,
            field="created_at",
            message=(
                f"created_at is before the session's previous message ({previous.isoformat()})."
            ),
            code="created_at_out_of_order",
        )


@dataclass(frozen=True)
class _Claim:
    first_seq: int
    last_seq: int  # after this append
    token_count: int  # after this append
    summarized_tokens: int
    summarized_seq: int
    agent_id: str
    has_end_user: bool
    # Raw, unconverted columns, only ever compared with None.
    summary_requested_at: object
    extraction_requested_at: object
    embedding_requested: bool  # this append set Session.embedding_requested_at
    # This append's claim set Session.summary_requested_at / extraction_requested_at (with
    # _AppendRequests; always False without).
    summary_requested_here: bool = False
    extraction_requested_here: bool = False


def _claim_seqs(*, statement: _ClaimStatement) -> _Claim:
    """Advance the session's counters by the statement's count of messages and return the first
    seq claimed, with what the summary and extraction checks need.

    One `UPDATE … RETURNING` both takes the session's row lock — held until commit, so
    concurrent appends to one session queue here and seqs stay gapless — and hands out the
    range: one round trip where `SELECT … FOR UPDATE` + `UPDATE` would take two. (On SQLite the
    IMMEDIATE transaction already serialises writers.) The ORM cannot express RETURNING on an
    update, hence the SQL; names and values still go through Django's quoting and adaptation.
    """
    with connection.cursor() as cursor:
        cursor.execute(statement.sql, statement.params)
        row = cursor.fetchone()
    if row is None:
        raise ResourceNotFound("No such session.")
    return statement.claim(row)


def _claim_statement(
    *,
    tenant: Tenant,
    session_id: uuid.UUID,
    count: int,
    tokens: int,
    now: dt.datetime,
    requests: _AppendRequests | None = None,
) -> _ClaimStatement:
    """The claim's UPDATE … RETURNING, its values, and how to read its row. With
    `requests`, the same UPDATE requests a summary (as summary_due decides, on the counters
    after this append) and an extraction (a session with a person) unless one is pending, and
    RETURNING says whether it did: the two UPDATEs of pending_claim, without their round trips."""
    meta = Session._meta
    quote = connection.ops.quote_name
    prep_id = meta.pk.get_db_prep_value(session_id, connection)
    prep_now = meta.get_field("last_active_at").get_db_prep_value(now, connection)
    # With an embedder, the same UPDATE requests the session's embedding (unless a request is
    # pending) and says whether it was this append that requested it: no extra round trip.
    embed = embedding_enabled()
    request_embedding = (
        ", embedding_requested_at = COALESCE(embedding_requested_at, %s)" if embed else ""
    )
    request_work = requested_here = ""
    work_params: list[Any] = []
    if requests is not None:
        # In SET, a column is its value before this UPDATE: the counters after the append are
        # the old ones plus this append's.
        request_work = (
            ", summary_requested_at = CASE WHEN summary_requested_at IS NULL AND %s "
            "AND token_count + %s - summarized_tokens > %s "
            "AND last_seq + %s - %s > summarized_seq THEN %s ELSE summary_requested_at END, "
            "extraction_requested_at = CASE WHEN extraction_requested_at IS NULL AND %s "
            "AND end_user_id IS NOT NULL THEN %s ELSE extraction_requested_at END"
        )
        work_params = [
            requests.summarize,
            tokens,
            requests.threshold_tokens,
            count,
            requests.keep_recent,
            prep_now,
            requests.extract,
            prep_now,
        ]
        requested_here = ", summary_requested_at = %s, extraction_requested_at = %s"
    sql = (
        f"UPDATE {quote(meta.db_table)} SET "  # noqa: S608 (identifiers from model metadata)
        "last_seq = last_seq + %s, message_count = message_count + %s, "
        f"token_count = token_count + %s, last_active_at = %s, updated_at = %s{request_embedding}"
        f"{request_work} "
        "WHERE id = %s AND tenant_id = %s "
        "RETURNING last_seq, token_count, summarized_tokens, summarized_seq, agent_id, "
        "end_user_id, summary_requested_at, extraction_requested_at, "
        f"embedding_requested_at = %s{requested_here}"
    )
    params = [count, count, tokens, prep_now, prep_now, *([prep_now] if embed else [])]
    returned = [prep_now, *([prep_now, prep_now] if requests is not None else [])]
    return _ClaimStatement(
        sql=sql,
        params=[*params, *work_params, prep_id, tenant.pk, *returned],
        count=count,
        embed=embed,
        requests=requests is not None,
    )


@dataclass(frozen=True)
class _ClaimStatement:
    """The claim's SQL and values, and what it was built with: what its row holds."""

    sql: str
    params: list[Any]
    count: int
    embed: bool  # it requests the embedding (and returns whether it did)
    requests: bool  # it requests the summary and the extraction (and returns whether it did)

    def claim(self, row: tuple[Any, ...]) -> _Claim:
        return _Claim(
            first_seq=int(row[0]) - self.count + 1,
            last_seq=int(row[0]),
            token_count=int(row[1]),
            summarized_tokens=int(row[2]),
            summarized_seq=int(row[3]),
            agent_id=str(row[4]),
            has_end_user=row[5] is not None,
            summary_requested_at=row[6],
            extraction_requested_at=row[7],
            embedding_requested=self.embed and bool(row[8]),
            summary_requested_here=self.requests and bool(row[9]),
            extraction_requested_here=self.requests and bool(row[10]),
        )


@transaction.atomic
def state_set(
    *, tenant: Tenant, session_id: uuid.UUID, key: str, value: Any, cap: int | None = None
) -> tuple[StateEntry | None, bool, list[str]]:
    """Set a key (moving it to the end of the FIFO) and evict the oldest keys past the cap:
    `cap`, else the state cap of the session's memory policy.

    Returns the entry, whether it was created, and the keys evicted to make room; the entry is
    None when the session's memory policy is off (nothing written, nothing fails).
    """
    session = _lock_session(tenant=tenant, session_id=session_id)
    policy = memory_policy_for(tenant=tenant, agent_id=session.agent_id)
    if not policy.memory_enabled:
        return None, False, []
    if cap is None:
        # An imported store may have kept more keys than the policy allows (Session.state_cap).
        cap = max(policy.state_cap, session.state_cap or 0)
    position = session.state_clock + 1
    now = timezone.now()
    entry, created = StateEntry.objects.update_or_create(
        session=session,
        key=key,
        defaults={"value": value, "position": position},
        create_defaults={"tenant": tenant, "value": value, "position": position},
    )
    Session.objects.filter(pk=session.pk).update(
        state_clock=position, last_active_at=now, updated_at=now
    )
    evicted: list[str] = []
    if created:
        overflow = StateEntry.objects.filter(session=session).count() - cap
        if overflow > 0:
            oldest = list(
                StateEntry.objects.filter(session=session)
                .order_by("position")
                .values_list("pk", "key")[:overflow]
            )
            StateEntry.objects.filter(pk__in=[pk for pk, _ in oldest]).delete()
            evicted = [evicted_key for _, evicted_key in oldest]
    return entry, created, evicted


@transaction.atomic
def state_delete(*, tenant: Tenant, session_id: uuid.UUID, key: str) -> bool:
    session = _lock_session(tenant=tenant, session_id=session_id)
    deleted, _ = StateEntry.objects.filter(session=session, key=key).delete()
    return deleted > 0
