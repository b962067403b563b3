"""The one writer every importer uses: records in, MemoryHub rows out, each checked first.

- One transaction per session (and per memory, fact, note): a bad record rejects that item
  with its origin and reason in the report; the others go on.
- Idempotent by source id: an ImportedRecord row remembers what each source record became,
  so running the same import again adds nothing (and counts it as "already there").
- A dry run does all the work, constraint checks included, inside transactions that are then
  rolled back: its counts are the real import's.
- Timestamps are kept (created_at, last activity, message times); ids are new, except that a
  fact's or memory's source session is pointed at the session the same import created for it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import re
import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Model
from django.utils import timezone

from facts_app.models import (
    MEMORY_KEY_MAX_LENGTH,
    MEMORY_KEY_PATTERN,
    RESERVED_MEMORY_KEY_PREFIXES,
    Fact,
    Note,
    NoteKind,
    UserMemory,
    UserMemoryVersion,
)
from facts_app.services.facts import fact_content_hash, fact_search_text
from memoryhub.accounts.models import END_USER_ID_MAX_LENGTH, EndUser, MemoryPolicy, Tenant
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.core.errors import InvalidInput
from memoryhub.core.tokens import count_tokens
from memoryhub.transfer.models import ImportedRecord
from memoryhub.transfer.types import (
    ImportedEndUser,
    ImportedFact,
    ImportedMemory,
    ImportedNote,
    ImportedPlan,
    ImportedPolicy,
    ImportedSession,
    ImportedTaskContext,
    ImportReport,
    Origin,
)
from sessions_app.models import (
    AGENT_ID_MAX_LENGTH,
    EVENT_NAME_MAX_LENGTH,
    EXTERNAL_KEY_MAX_LENGTH,
    RESPONSE_TOPIC_MAX_LENGTH,
    STATE_KEY_MAX_LENGTH,
    SUMMARY_MODEL_MAX_LENGTH,
    WORK_ID_MAX_LENGTH,
    Message,
    MessageRole,
    Plan,
    PlanStatus,
    Session,
    StateEntry,
    SubTask,
    Summary,
    TaskContext,
)

MESSAGE_CHUNK = 1000
_KIND_MODELS: dict[str, type[Model]] = {
    "end_users": EndUser,
    "memory_policies": MemoryPolicy,
    "sessions": Session,
    "plans": Plan,
    "task_contexts": TaskContext,
    "user_memories": UserMemory,
    "facts": Fact,
    "notes": Note,
}


def _key(source_id: str) -> str:
    return hashlib.sha256(source_id.encode()).hexdigest()


class RecordRejected(Exception):
    """A record that cannot be imported as it is; the message says why, for the report."""


class _DryRunRollback(Exception):
    pass


def _limit(name: str) -> int:
    return int(settings.MEMORYHUB_LIMITS[name])


def _text(value: str, *, what: str, max_bytes: int | None = None) -> str:
    if "\x00" in value:
        raise RecordRejected(f"{what} contains a NUL character.")
    if max_bytes is not None and len(value.encode()) > max_bytes:
        raise RecordRejected(f"{what} is over {max_bytes} bytes.")
    return value


def _json_size(value: Any, *, what: str, max_bytes: int) -> Any:
    try:
        encoded = json.dumps(value)
    except (TypeError, ValueError) as error:
        raise RecordRejected(f"{what} is not JSON: {error}") from None
    if len(encoded.encode()) > max_bytes:
        raise RecordRejected(f"{what} is over {max_bytes} bytes.")
    if "\\u0000" in encoded:
        raise RecordRejected(f"{what} contains a NUL character.")
    return value


def _aware(value: dt.datetime | None, *, what: str) -> dt.datetime | None:
    if value is None:
        return None
    if timezone.is_naive(value):
        raise RecordRejected(f"{what} has no UTC offset.")
    if abs(value.utcoffset() or dt.timedelta()) > dt.timedelta(hours=15, minutes=59):
        raise RecordRejected(f"{what} has a UTC offset beyond ±15:59.")
    return value


class ImportSink:
    """Writes one import's records into `tenant`; read the outcome from `report`.

    `source` names the import format ("memoryhub", "basic-session", ...): a source id is unique
    within it, so the same file imported twice, or two files of one store, never duplicate.
    """

    def __init__(self, *, tenant: Tenant, source: str, dry_run: bool = False) -> None:
        self.tenant = tenant
        self.source = source
        self.dry_run = dry_run
        self.report = ImportReport(dry_run=dry_run)
        # Source session id -> the session it became (this run's, or an earlier run's).
        self._sessions: dict[str, uuid.UUID] = {}
        self._facts: dict[str, int] = {}
        # plan_id -> the plan row this run made (in a dry run, one that was rolled back: the
        # deferred foreign key lets a task context point at it before its own rollback).
        self._plans: dict[str, int] = {}
        self._users: dict[str, EndUser] = {}
        self._supersede: list[tuple[str, str]] = []

    # --- shared ---------------------------------------------------------------------------------
    def _already(self, *, kind: str, source_id: str) -> str | None:
        """What this source record became in an earlier run, if that row still exists (a
        purged or erased one is imported again)."""
        record = (
            ImportedRecord.objects.filter(
                tenant=self.tenant, source=self.source, kind=kind, source_key=_key(source_id)
            )
            .only("pk", "object_id")
            .first()
        )
        if record is None:
            return None
        if (
            _KIND_MODELS[kind]
            ._default_manager.filter(tenant=self.tenant, pk=record.object_id)
            .exists()
        ):
            return record.object_id
        record.delete()
        return None

    def _remember(self, *, kind: str, source_id: str, object_id: str) -> None:
        ImportedRecord.objects.create(
            tenant=self.tenant,
            source=self.source,
            kind=kind,
            source_key=_key(source_id),
            object_id=object_id,
        )

    def _end_user(self, user_id: str) -> EndUser:
        if not user_id or len(user_id) > END_USER_ID_MAX_LENGTH or "\x00" in user_id:
            raise RecordRejected(f"user id {user_id!r} is not 1-{END_USER_ID_MAX_LENGTH} chars.")
        if user_id not in self._users:
            try:
                self._users[user_id] = end_user_get_or_create(
                    tenant=self.tenant, external_id=user_id
                )
            except InvalidInput as error:
                raise RecordRejected(str(error)) from None
        return self._users[user_id]

    def _run(self, *, kind: str, source_id: str, origin: Origin, write: Any) -> None:
        """Import one item in its own transaction (rolled back in a dry run), once."""
        existing = self._already(kind=kind, source_id=source_id)
        if existing is not None:
            self.report.already_there[kind] += 1
            self._note_mapping(kind=kind, source_id=source_id, object_id=existing)
            return
        users_before = dict(self._users)
        try:
            with transaction.atomic():
                object_id = write()
                self._remember(kind=kind, source_id=source_id, object_id=str(object_id))
                if self.dry_run:
                    raise _DryRunRollback
        except _DryRunRollback:
            self._users = users_before  # created in the rolled-back transaction
            self.report.imported[kind] += 1
            self._note_mapping(kind=kind, source_id=source_id, object_id=str(object_id))
            return
        except RecordRejected as error:
            self._users = users_before
            self.report.skip(kind=kind, origin=origin, reason=str(error))
            return
        except (IntegrityError, DatabaseError, ValueError) as error:
            self._users = users_before
            self.report.skip(kind=kind, origin=origin, reason=f"refused by the database: {error}")
            return
        self.report.imported[kind] += 1
        self._note_mapping(kind=kind, source_id=source_id, object_id=str(object_id))

    def _note_mapping(self, *, kind: str, source_id: str, object_id: str) -> None:
        if kind == "sessions":
            self._sessions[source_id] = uuid.UUID(object_id)
        elif kind == "facts":
            self._facts[source_id] = int(object_id)

    def session_id_for(self, source_session_id: str | None) -> uuid.UUID | None:
        """The imported session a source session id became (None if it was not imported)."""
        if source_session_id is None:
            return None
        if source_session_id not in self._sessions:
            found = self._already(kind="sessions", source_id=source_session_id)
            if found is None:
                return None
            self._sessions[source_session_id] = uuid.UUID(found)
        return self._sessions[source_session_id]

    # --- people and settings --------------------------------------------------------------------
    def end_user(self, item: ImportedEndUser) -> None:
        self._run(
            kind="end_users",
            source_id=item.source_id,
            origin=item.origin,
            write=lambda: self._write_end_user(item),
        )

    def _write_end_user(self, item: ImportedEndUser) -> int:
        end_user = self._end_user(item.user_id)
        _json_size(item.metadata, what="person metadata", max_bytes=_limit("METADATA_MAX_BYTES"))
        stamps: dict[str, Any] = {
            "display_name": _text(item.display_name, what="display name")[:200],
            "metadata": item.metadata,
        }
        created_at = _aware(item.created_at, what="person created_at")
        if created_at is not None:
            stamps["created_at"] = created_at
        EndUser.objects.filter(pk=end_user.pk).update(**stamps)
        return end_user.pk

    def policy(self, item: ImportedPolicy) -> None:
        self._run(
            kind="memory_policies",
            source_id=item.source_id,
            origin=item.origin,
            write=lambda: self._write_policy(item),
        )

    def _write_policy(self, item: ImportedPolicy) -> int:
        if MemoryPolicy.objects.filter(tenant=self.tenant, agent_id=item.agent_id).exists():
            raise RecordRejected(
                f"this tenant already has a memory policy for agent {item.agent_id!r}; "
                "it is kept as it is."
            )
        known = {f.name for f in MemoryPolicy._meta.concrete_fields} - {
            "id",
            "tenant",
            "agent_id",
            "updated_at",
        }
        unknown = sorted(set(item.values) - known)
        if unknown:
            raise RecordRejected(f"unknown memory policy fields: {', '.join(unknown)}.")
        policy = MemoryPolicy(tenant=self.tenant, agent_id=item.agent_id, **item.values)
        try:
            policy.full_clean(exclude=["tenant"])
        except ValidationError as error:
            raise RecordRejected(f"invalid memory policy: {error.message_dict}") from None
        policy.save()
        return policy.pk

    # --- sessions -------------------------------------------------------------------------------
    def session(self, item: ImportedSession) -> None:
        self._run(
            kind="sessions",
            source_id=item.source_id,
            origin=item.origin,
            write=lambda: self._write_session(item),
        )

    def _write_session(self, item: ImportedSession) -> uuid.UUID:
        if len(item.agent_id) > AGENT_ID_MAX_LENGTH:
            raise RecordRejected(f"agent id is over {AGENT_ID_MAX_LENGTH} characters.")
        external_key = item.external_key
        if external_key is not None:
            _text(external_key, what="external key")
            if len(external_key) > EXTERNAL_KEY_MAX_LENGTH:
                raise RecordRejected(f"external key is over {EXTERNAL_KEY_MAX_LENGTH} characters.")
            if Session.objects.for_tenant(self.tenant).filter(external_key=external_key).exists():
                raise RecordRejected(
                    f"external key {external_key!r} already belongs to a session of this tenant."
                )
        _json_size(item.metadata, what="session metadata", max_bytes=_limit("METADATA_MAX_BYTES"))
        created_at = _aware(item.created_at, what="session created_at") or timezone.now()
        session = Session.objects.create(
            tenant=self.tenant,
            end_user=self._end_user(item.user_id) if item.user_id else None,
            agent_id=item.agent_id,
            external_key=external_key,
            metadata=item.metadata,
            last_active_at=_aware(item.last_active_at, what="last_active_at") or created_at,
        )
        last_seq, count, tokens, token_by_seq = self._write_messages(
            session=session, item=item, default_time=created_at
        )
        for position, entry in enumerate(item.state, start=1):
            if not entry.key or len(entry.key) > STATE_KEY_MAX_LENGTH:
                raise RecordRejected(f"state key {entry.key!r} is empty or too long.")
            _text(entry.key, what="state key")
            _json_size(
                entry.value, what=f"state {entry.key!r}", max_bytes=_limit("STATE_VALUE_MAX_BYTES")
            )
            StateEntry.objects.create(
                tenant=self.tenant,
                session=session,
                key=entry.key,
                value=entry.value,
                position=position,
            )
        summarized_seq = summarized_tokens = 0
        for summary in sorted(item.summaries, key=lambda s: s.through_seq):
            if not 0 < summary.through_seq <= last_seq:
                raise RecordRejected(
                    f"summary through seq {summary.through_seq} is outside 1-{last_seq}."
                )
            _text(summary.text, what="summary text")
            row = Summary.objects.create(
                tenant=self.tenant,
                session=session,
                text=summary.text,
                through_seq=summary.through_seq,
                token_count=count_tokens(summary.text),
                model=(summary.model or "imported")[:SUMMARY_MODEL_MAX_LENGTH],
            )
            if summary.created_at is not None:
                Summary.objects.filter(pk=row.pk).update(
                    created_at=_aware(summary.created_at, what="summary created_at")
                )
            summarized_seq = summary.through_seq
        if summarized_seq:
            summarized_tokens = sum(t for seq, t in token_by_seq.items() if seq <= summarized_seq)
        Session.objects.filter(pk=session.pk).update(
            created_at=created_at,
            last_seq=last_seq,
            message_count=count,
            token_count=tokens,
            state_clock=len(item.state),
            summarized_seq=summarized_seq,
            summarized_tokens=summarized_tokens,
            # Imported history is not mined again: the facts of that time come with the import
            # (or not at all); only new exchanges are extracted.
            extracted_seq=last_seq,
        )
        return session.pk

    def _write_messages(
        self, *, session: Session, item: ImportedSession, default_time: dt.datetime
    ) -> tuple[int, int, int, dict[int, int]]:
        """Insert the messages in chunks; returns last seq, count, tokens, tokens per seq (only
        up to the summaries' range is needed, but seqs are few compared with contents)."""
        roles = set(MessageRole.values)
        max_bytes = _limit("MESSAGE_CONTENT_MAX_BYTES")
        metadata_max = _limit("METADATA_MAX_BYTES")
        last_seq = count = tokens = 0
        token_by_seq: dict[int, int] = {}
        messages = iter(item.messages)
        while chunk := list(itertools.islice(messages, MESSAGE_CHUNK)):
            rows = []
            for message in chunk:
                seq = message.seq if message.seq is not None else last_seq + 1
                if seq <= last_seq:
                    raise RecordRejected(f"message seq {seq} does not follow {last_seq}.")
                if message.role not in roles:
                    raise RecordRejected(f"message {seq} has an unknown role {message.role!r}.")
                _text(message.content, what=f"message {seq}", max_bytes=max_bytes)
                _json_size(message.metadata, what=f"message {seq} metadata", max_bytes=metadata_max)
                token_count = (
                    message.token_count
                    if message.token_count is not None
                    else count_tokens(message.content)
                )
                rows.append(
                    Message(
                        tenant=self.tenant,
                        session=session,
                        seq=seq,
                        role=message.role,
                        content=message.content,
                        name=_text(message.name, what=f"message {seq} name")[:128],
                        tool_call_id=message.tool_call_id[:128],
                        tool_calls=message.tool_calls,
                        metadata=message.metadata,
                        token_count=token_count,
                        # A message without a time of its own gets its session's.
                        created_at=_aware(message.created_at, what=f"message {seq} time")
                        or default_time,
                    )
                )
                token_by_seq[seq] = token_count
                last_seq = seq
                count += 1
                tokens += token_count
            Message.objects.bulk_create(rows)
        return last_seq, count, tokens, token_by_seq

    # --- long-term memory -----------------------------------------------------------------------
    def memory(self, item: ImportedMemory) -> None:
        self._run(
            kind="user_memories",
            source_id=item.source_id,
            origin=item.origin,
            write=lambda: self._write_memory(item),
        )

    def _write_memory(self, item: ImportedMemory) -> int:
        if len(item.key) > MEMORY_KEY_MAX_LENGTH or not re.match(MEMORY_KEY_PATTERN, item.key):
            raise RecordRejected(f"memory key {item.key!r} is not {MEMORY_KEY_PATTERN}.")
        if item.key.startswith(RESERVED_MEMORY_KEY_PREFIXES):
            raise RecordRejected(f"memory key {item.key!r} uses a reserved prefix.")
        _text(item.content, what="memory content", max_bytes=_limit("MEMORY_CONTENT_MAX_BYTES"))
        end_user = self._end_user(item.user_id) if item.user_id else None
        if (
            UserMemory.objects.for_tenant(self.tenant)
            .filter(end_user=end_user, key=item.key)
            .exists()
        ):
            raise RecordRejected(f"memory {item.key!r} already exists for this person.")
        memory = UserMemory.objects.create(
            tenant=self.tenant,
            end_user=end_user,
            key=item.key,
            content=item.content,
            pinned=item.pinned,
            expires_at=_aware(item.expires_at, what="memory expires_at"),
            source_session_id=self.session_id_for(item.source_session_id),
            version=max([item.version, *(v.version + 1 for v in item.versions)]),
        )
        for version in item.versions:
            UserMemoryVersion.objects.create(
                tenant=self.tenant,
                memory=memory,
                version=version.version,
                content=_text(version.content, what=f"memory version {version.version}"),
                created_at=_aware(version.created_at, what="version created_at") or timezone.now(),
            )
        stamps = {
            "created_at": _aware(item.created_at, what="memory created_at"),
            "updated_at": _aware(item.updated_at, what="memory updated_at"),
        }
        stamps = {name: value for name, value in stamps.items() if value is not None}
        if stamps:
            UserMemory.objects.filter(pk=memory.pk).update(**stamps)
        return memory.pk

    def fact(self, item: ImportedFact) -> None:
        if item.superseded_by_source_id:
            self._supersede.append((item.source_id, item.superseded_by_source_id))
        self._run(
            kind="facts",
            source_id=item.source_id,
            origin=item.origin,
            write=lambda: self._write_fact(item),
        )

    def _write_fact(self, item: ImportedFact) -> int:
        _text(item.content, what="fact content", max_bytes=_limit("FACT_CONTENT_MAX_BYTES"))
        if not item.content.strip():
            raise RecordRejected("fact content is empty.")
        _json_size(item.metadata, what="fact metadata", max_bytes=_limit("METADATA_MAX_BYTES"))
        end_user = self._end_user(item.user_id) if item.user_id else None
        content_hash = fact_content_hash(item.content)
        if (
            Fact.objects.for_tenant(self.tenant)
            .filter(end_user=end_user, content_hash=content_hash)
            .exists()
        ):
            raise RecordRejected("the same fact already exists for this person.")
        tags = list(dict.fromkeys(str(tag) for tag in item.tags))
        source_session = self.session_id_for(item.source_session_id)
        source_message_ids: list[int] = []
        if source_session is not None and item.source_message_seqs:
            source_message_ids = list(
                Message.objects.filter(
                    session_id=source_session, seq__in=item.source_message_seqs
                ).values_list("pk", flat=True)
            )
        fact = Fact.objects.create(
            tenant=self.tenant,
            end_user=end_user,
            content=item.content,
            content_hash=content_hash,
            search_text=fact_search_text(content=item.content, tags=tags, end_user=end_user),
            tags=tags,
            metadata=item.metadata,
            source_session_id=source_session,
            source_message_ids=source_message_ids,
            valid_until=_aware(item.valid_until, what="fact valid_until"),
        )
        if item.created_at is not None:
            Fact.objects.filter(pk=fact.pk).update(
                created_at=_aware(item.created_at, what="fact created_at")
            )
        return fact.pk

    # --- asynchronous work: plans and task contexts ---------------------------------------------
    def plan(self, item: ImportedPlan) -> None:
        self._run(
            kind="plans",
            source_id=item.source_id,
            origin=item.origin,
            write=lambda: self._write_plan(item),
        )

    def _work_id(self, value: str, *, what: str) -> str:
        if not value or len(value) > WORK_ID_MAX_LENGTH:
            raise RecordRejected(f"{what} must be 1-{WORK_ID_MAX_LENGTH} characters.")
        return _text(value, what=what)

    def _session_ref(self, source_id: str | None) -> uuid.UUID | None:
        if source_id is None:
            return None
        session_id = self.session_id_for(source_id)
        if session_id is None:
            raise RecordRejected(f"its session {source_id} was not imported.")
        return session_id

    def _write_plan(self, item: ImportedPlan) -> int:
        plan_id = self._work_id(item.plan_id, what="plan_id")
        if Plan.objects.for_tenant(self.tenant).filter(plan_id=plan_id).exists():
            raise RecordRejected(f"plan {plan_id!r} already exists in this tenant.")
        if item.status not in PlanStatus.values:
            raise RecordRejected(f"plan status {item.status!r} is not one of {PlanStatus.values}.")
        if not item.goal_event or len(item.goal_event) > EVENT_NAME_MAX_LENGTH:
            raise RecordRejected("goal_event is empty or too long.")
        task_max = _limit("TASK_DATA_MAX_BYTES")
        plan = Plan.objects.create(
            tenant=self.tenant,
            plan_id=plan_id,
            end_user=self._end_user(item.user_id),
            session_id=self._session_ref(item.session_source_id),
            goal_event=_text(item.goal_event, what="goal_event"),
            goal_data=_json_size(item.goal_data, what="goal_data", max_bytes=task_max),
            status=item.status,
            state=_json_size(item.state, what="plan state", max_bytes=task_max),
        )
        self._stamp(Plan, pk=plan.pk, created_at=item.created_at, updated_at=item.updated_at)
        self._plans[plan_id] = plan.pk
        return plan.pk

    def task_context(self, item: ImportedTaskContext) -> None:
        self._run(
            kind="task_contexts",
            source_id=item.source_id,
            origin=item.origin,
            write=lambda: self._write_task_context(item),
        )

    def _write_task_context(self, item: ImportedTaskContext) -> int:
        task_id = self._work_id(item.task_id, what="task_id")
        if TaskContext.objects.for_tenant(self.tenant).filter(task_id=task_id).exists():
            raise RecordRejected(f"task {task_id!r} already exists in this tenant.")
        plan_pk = None
        if item.plan_id is not None:
            plan_pk = self._plans.get(item.plan_id) or (
                Plan.objects.for_tenant(self.tenant)
                .filter(plan_id=item.plan_id)
                .values_list("pk", flat=True)
                .first()
            )
            if plan_pk is None:
                raise RecordRejected(f"its plan {item.plan_id!r} is not in this tenant.")
        if not item.event_type or len(item.event_type) > EVENT_NAME_MAX_LENGTH:
            raise RecordRejected("event_type is empty or too long.")
        if len(item.response_topic) > RESPONSE_TOPIC_MAX_LENGTH:
            raise RecordRejected("response_topic is too long.")
        task_max = _limit("TASK_DATA_MAX_BYTES")
        task = TaskContext.objects.create(
            tenant=self.tenant,
            task_id=task_id,
            plan_id=plan_pk,
            session_id=self._session_ref(item.session_source_id),
            event_type=_text(item.event_type, what="event_type"),
            response_event=_text(item.response_event, what="response_event")[
                :EVENT_NAME_MAX_LENGTH
            ],
            response_topic=_text(item.response_topic, what="response_topic"),
            data=_json_size(item.data, what="task data", max_bytes=task_max),
            state=_json_size(item.state, what="task state", max_bytes=task_max),
        )
        sub_task_ids = [self._work_id(sub, what="sub-task id") for sub in item.sub_tasks]
        taken = set(
            SubTask.objects.for_tenant(self.tenant)
            .filter(subtask_id__in=sub_task_ids)
            .values_list("subtask_id", flat=True)
        )
        if taken:
            raise RecordRejected(f"sub-tasks already wait on another task: {sorted(taken)}.")
        SubTask.objects.bulk_create(
            [
                SubTask(tenant=self.tenant, task=task, subtask_id=sub)
                for sub in dict.fromkeys(sub_task_ids)
            ]
        )
        self._stamp(TaskContext, pk=task.pk, created_at=item.created_at, updated_at=item.updated_at)
        return task.pk

    def _stamp(
        self,
        model: type[Model],
        *,
        pk: int,
        created_at: dt.datetime | None,
        updated_at: dt.datetime | None,
    ) -> None:
        """Keep the source's timestamps (auto_now fields cannot be set on create)."""
        stamps = {
            "created_at": _aware(created_at, what="created_at"),
            "updated_at": _aware(updated_at, what="updated_at"),
        }
        stamps = {name: value for name, value in stamps.items() if value is not None}
        if stamps:
            model._default_manager.filter(pk=pk).update(**stamps)

    def finish(self) -> ImportReport:
        """Link facts to the facts that superseded them (both may come in any order), then
        return the report."""
        for old_source, new_source in self._supersede:
            old, new = self._facts.get(old_source), self._facts.get(new_source)
            if old is None or new is None:
                continue  # one of the two was skipped: already in the report
            if not self.dry_run:
                Fact.objects.filter(tenant=self.tenant, pk=old).update(superseded_by_id=new)
        return self.report

    def note(self, item: ImportedNote) -> None:
        self._run(
            kind="notes",
            source_id=item.source_id,
            origin=item.origin,
            write=lambda: self._write_note(item),
        )

    def _write_note(self, item: ImportedNote) -> int:
        if not item.versions:
            raise RecordRejected("a note needs at least one version.")
        end_user = self._end_user(item.user_id)
        kind = NoteKind.LONG_TERM if item.day is None else NoteKind.DAILY
        existing = Note.objects.for_tenant(self.tenant).filter(
            end_user=end_user, kind=kind, day=item.day
        )
        if existing.exists():
            which = "long-term note" if item.day is None else f"note for {item.day}"
            raise RecordRejected(f"this person already has a {which}.")
        max_bytes = _limit("NOTE_CONTENT_MAX_BYTES")
        last = None
        for number, version in enumerate(item.versions, start=1):
            last = Note.objects.create(
                tenant=self.tenant,
                end_user=end_user,
                kind=kind,
                day=item.day,
                version=number,
                content=_text(version.content, what=f"note version {number}", max_bytes=max_bytes),
            )
            if version.created_at is not None:
                Note.objects.filter(pk=last.pk).update(
                    created_at=_aware(version.created_at, what="note created_at")
                )
        assert last is not None
        return last.pk
