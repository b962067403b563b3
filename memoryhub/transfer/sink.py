"""The one writer every importer uses: records in, MemoryHub rows out, each checked first.

- One transaction per session (and per memory, fact, note): a bad record rejects that item
  with its origin and reason in the report; the others go on.
- Idempotent by source id: an ImportedRecord row remembers what each source record became,
  so running the same import again adds nothing (and counts it as "already there").
- A dry run does all the work, constraint checks included, inside transactions that are then
  rolled back: its counts are the real import's.
- Timestamps are kept (created_at, last activity, message times, state entries' times); ids are
  new, except that a fact's or memory's source session is pointed at the session the same import
  created for it.
- Incremental: a session or note imported by an earlier run is grown, not duplicated: the
  messages (note versions) the source holds after the last one already stored are appended.
- A record is never dropped for its size or its role: a text over the import limit
  (MEMORYHUB_IMPORT_MAX_CONTENT_BYTES, larger than the API's) is stored cut, with a marker and
  its original size; an unknown role is stored as "assistant" with the source's role in the
  message metadata. Each such change is listed in the report (ImportReport.changed).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import itertools
import json
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DatabaseError, IntegrityError, connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Field, Model
from django.utils import timezone

from facts_app.models import (
    FACT_EXTERNAL_ID_MAX_LENGTH,
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
from memoryhub.accounts.models import (
    END_USER_ID_MAX_LENGTH,
    EndUser,
    MemoryPolicy,
    Tenant,
)
from memoryhub.accounts.redaction import (
    redact_for_write,
    redact_tool_calls,
    redaction_for,
    tool_calls_with,
)
from memoryhub.accounts.selectors import memory_policy_for
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.core.errors import InvalidInput
from memoryhub.core.statistics import keys_analyze
from memoryhub.core.tokens import count_tokens
from memoryhub.transfer.models import ImportedRecord
from memoryhub.transfer.types import (
    Changed,
    ImportedEndUser,
    ImportedFact,
    ImportedMemory,
    ImportedMessage,
    ImportedNote,
    ImportedNoteVersion,
    ImportedPlan,
    ImportedPolicy,
    ImportedSession,
    ImportedTaskContext,
    ImportReport,
    Origin,
)
from sessions_app.embedding import embedding_request_sessions
from sessions_app.models import (
    AGENT_ID_MAX_LENGTH,
    CONVERSATION_KEYS,
    EVENT_NAME_MAX_LENGTH,
    EXTERNAL_KEY_MAX_LENGTH,
    MESSAGE_INSERT_COLUMNS,
    MESSAGE_INSERT_FIELDS,
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
# On PostgreSQL, the characters of message contents one INSERT takes at most (_insert_messages).
MESSAGE_JSON_CHARS = 16 * 1024 * 1024
# Sessions whose embedding is requested together (two queries and a task per batch), after
# their own commits: a request never names a session that was rolled back.
EMBEDDING_REQUEST_BATCH = 100
# An import that wrote at least this many messages ends with ANALYZE of the keys of the tables
# it filled (memoryhub.core.statistics): a tenant's reads are planned on their indexes at once,
# not after the next hourly run.
ANALYZE_AFTER_MESSAGES = 10_000
# Imports keep texts the API would refuse (a 120 KB tool output is routine) up to this size.
IMPORT_MAX_CONTENT_BYTES_DEFAULT = 256 * 1024
TRUNCATION_MARKER = "\n\n[… cut by the MemoryHub import: {original} bytes, the first {kept} kept]"
# Roles other stores write, and what MemoryHub stores them as; any other role is "assistant"
# (valid anywhere in a chat request, and never mistaken for what the person said). The source's
# role is kept in the message's metadata as `source_role`.
ROLE_ALIASES = {
    "human": "user",
    "ai": "assistant",
    "bot": "assistant",
    "model": "assistant",
    "developer": "system",
}
UNKNOWN_ROLE_STORED_AS = "assistant"
STATE_CAP_MAX = 10_000  # as MemoryPolicy.state_cap's own range
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


_MESSAGE_ROLES = frozenset(MessageRole.values)
_SAME_FACT = "the same fact already exists for this person."
_TOKEN_COUNT = MESSAGE_INSERT_FIELDS.index("token_count")
_CONTENT = MESSAGE_INSERT_FIELDS.index("content")
_SESSION_FK = Message._meta.get_field("session")


# Statements an item's writes put off (ImportSink._flush), with their parameters.
Statements = list[tuple[str, list[Any]]]


def _run_or_defer(
    db: BaseDatabaseWrapper, sql: str, params: list[Any], defer: Statements | None
) -> None:
    if defer is not None:
        defer.append((sql, params))
        return
    with db.cursor() as cursor:
        cursor.execute(sql, params)


def _insert_rows(
    db: BaseDatabaseWrapper,
    model: type[Model],
    *,
    columns: tuple[str, ...],
    rows: list[tuple[Any, ...]],
    defer: Statements | None = None,
) -> None:
    """INSERT `rows` (values ready for the database, in `columns`' order) as few multi-row
    statements as the backend's parameter limit allows; put off in `defer` when given."""
    if not rows:
        return
    limit = db.features.max_query_params
    per_statement = max(1, limit // len(columns)) if limit else len(rows)
    quote = db.ops.quote_name
    # Names from the model's own metadata, quoted; every value is a parameter.
    head = (
        f"INSERT INTO {quote(model._meta.db_table)} "  # noqa: S608
        f"({', '.join(quote(column) for column in columns)}) VALUES "
    )
    placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    for start in range(0, len(rows), per_statement):
        part = rows[start : start + per_statement]
        _run_or_defer(
            db,
            head + ", ".join([placeholders] * len(part)),
            [value for row in part for value in row],
            defer,
        )


# Per database alias: the message INSERT that takes a chunk's rows as one JSON parameter.
_MESSAGE_JSON_INSERT: dict[str, str] = {}


def _message_json_insert(db: BaseDatabaseWrapper) -> str:
    """PostgreSQL's message INSERT: the tenant and session as parameters, then one row per
    element of a JSON array of the other values, each cast to its column's type. Text goes
    uncast (an assignment to a varchar checks its length; an explicit cast would cut it)."""
    if db.alias not in _MESSAGE_JSON_INSERT:
        fields = {field.name: field for field in Message._meta.concrete_fields}
        quote = db.ops.quote_name
        values = []
        for index, name in enumerate(MESSAGE_INSERT_FIELDS[2:]):
            field = fields[name]
            text = f"r->>{index}"
            if field.get_internal_type() in ("CharField", "TextField"):
                values.append(text)
            else:
                values.append(f"({text})::{field.db_type(db)}")
        # Names and types from the model's own metadata; every value is a parameter.
        _MESSAGE_JSON_INSERT[db.alias] = (
            f"INSERT INTO {quote(Message._meta.db_table)} "  # noqa: S608
            f"({', '.join(quote(column) for column in MESSAGE_INSERT_COLUMNS)}) "
            f"SELECT %s, %s, {', '.join(values)} FROM jsonb_array_elements(%s::jsonb) AS r"
        )
    return _MESSAGE_JSON_INSERT[db.alias]


def _insert_messages(
    db: BaseDatabaseWrapper, *, rows: list[tuple[Any, ...]], defer: Statements | None = None
) -> None:
    """INSERT a chunk of one session's message rows (in MESSAGE_INSERT_COLUMNS' order). On
    PostgreSQL as one statement of three parameters, the rows a JSON array: a multi-row VALUES
    of eleven parameters a row costs the driver more (it splits the statement at every
    placeholder and quotes each value) than encoding the chunk at once. Elsewhere (SQLite) as
    _insert_rows."""
    if not rows:
        return
    if db.vendor != "postgresql":
        _insert_rows(db, Message, columns=MESSAGE_INSERT_COLUMNS, rows=rows, defer=defer)
        return
    tenant_id, session_id = rows[0][0], rows[0][1]
    sql = _message_json_insert(db)
    start = 0
    while start < len(rows):
        # A statement's texts stay under MESSAGE_JSON_CHARS (a jsonb value holds 256 MB at
        # most, and a thousand 256 KB tool outputs would be more).
        end, size = start + 1, len(rows[start][_CONTENT])
        while end < len(rows) and size + len(rows[end][_CONTENT]) <= MESSAGE_JSON_CHARS:
            size += len(rows[end][_CONTENT])
            end += 1
        values = [(*row[2:-1], row[-1].isoformat()) for row in rows[start:end]]
        try:
            # orjson: the same text as json.dumps(ensure_ascii=False, no spaces), 20 times faster
            payload = orjson.dumps(values).decode()
        except TypeError:  # what orjson refuses (a lone surrogate): the standard library's say
            payload = json.dumps(values, ensure_ascii=False, separators=(",", ":"))
        _run_or_defer(db, sql, [tenant_id, session_id, payload], defer)
        start = end


def _client_side_binding(db: BaseDatabaseWrapper) -> bool:
    """Whether Django's cursors on `db` bind parameters in the client (its default), and so
    send a statement by the simple protocol, which runs several separated by semicolons."""
    import psycopg

    with db.cursor() as cursor:
        return isinstance(cursor.cursor, psycopg.ClientCursor)


def _insert_as_is(row: Model) -> None:
    """INSERT `row` with the values it holds: its source's created_at is kept (auto_now_add and
    auto_now do not apply), so no UPDATE has to follow. `raw` is how Django's loaddata saves a
    row as it is; no signal receiver listens to the models imported this way."""
    row.save_base(raw=True, force_insert=True)


def _insert_fields(model: type[Model]) -> list[Field[Any, Any]]:
    """The fields an INSERT of `model` names: not a generated one, nor an AutoField primary
    key (the database's)."""
    return [
        field
        for field in model._meta.concrete_fields
        if not getattr(field, "generated", False)
        and not (field.primary_key and field.get_internal_type().endswith("AutoField"))
    ]


def _insert_without_id(
    db: BaseDatabaseWrapper, row: Model, *, as_is: bool, defer: Statements | None = None
) -> None:
    """INSERT `row` as save() would, in _insert_rows' plain statement: the ORM's compiler costs
    more than the database does for the two or three rows an imported session adds. Not for a
    row whose generated id is needed (nothing is returned): an AutoField is left to the
    database, any other primary key must be set. `as_is`: the values it holds, as
    _insert_as_is (auto_now and auto_now_add do not apply); else as a create() fills them."""
    fields = _insert_fields(type(row))
    values = tuple(
        field.get_db_prep_save(
            getattr(row, field.attname) if as_is else field.pre_save(row, add=True),
            connection=db,
        )
        for field in fields
    )
    _insert_rows(
        db, type(row), columns=tuple(field.column for field in fields), rows=[values], defer=defer
    )


def _select_list(
    db: BaseDatabaseWrapper, row: Model, *, computed: dict[str, tuple[str, list[Any]]]
) -> tuple[list[str], list[str], list[Any]]:
    """For an INSERT … SELECT of `row` (its values as they are, auto_now_add filled): its
    columns, the SELECT's expressions and their parameters. A field named in `computed` is an
    SQL expression of its own (with its parameters) instead of its value. Values are cast to
    their columns' types, but text (as _message_json_insert: a cast would cut a varchar)."""
    columns: list[str] = []
    expressions: list[str] = []
    params: list[Any] = []
    for field in _insert_fields(type(row)):
        columns.append(db.ops.quote_name(field.column))
        if field.attname in computed:
            expression, values = computed[field.attname]
            expressions.append(expression)
            params.extend(values)
            continue
        value = getattr(row, field.attname)
        if value is None and getattr(field, "auto_now_add", False):
            value = field.pre_save(row, add=True)
        params.append(field.get_db_prep_save(value, connection=db))
        if field.get_internal_type() in ("CharField", "TextField"):
            expressions.append("%s")
        else:
            expressions.append(f"%s::{field.db_type(db)}")
    return columns, expressions, params


def _fact_insert_unless_there(
    db: BaseDatabaseWrapper,
    fact: Fact,
    *,
    message_seqs: list[int],
    record: ImportedRecord,
) -> int | None:
    """PostgreSQL: INSERT `fact` (its values as they are), with the ids of its source session's
    messages `message_seqs` read in the same statement, and `record` naming the new fact: its
    id, or None (and nothing written) when its person (or the tenant, for a fact of no one)
    has a fact of the same content already. The ORM's way (that lookup, the ids' query, the
    INSERT, the record's INSERT) was four round trips, most of an imported fact's time."""
    quote = db.ops.quote_name
    table, messages = quote(Fact._meta.db_table), quote(Message._meta.db_table)
    computed: dict[str, tuple[str, list[Any]]] = {}
    if fact.source_session_id is not None and message_seqs:
        computed["source_message_ids"] = (
            # As the ORM's query would list them: in seq order (Message.Meta.ordering). The
            # tenant in the aggregate's FILTER, not the WHERE: a tenant new to the table's
            # statistics (an import's, as it grows) looks tiny to the planner, which then
            # walked the tenant's whole (tenant_id, created_at) index for every fact (34 ms at
            # 87,000 messages) instead of the two rows of (session_id, seq).
            f"COALESCE((SELECT jsonb_agg(m.id ORDER BY m.seq) FILTER (WHERE m.tenant_id = %s) "  # noqa: S608
            f"FROM {messages} m WHERE m.session_id = %s AND m.seq = ANY(%s::bigint[])), "
            "'[]'::jsonb)",
            [fact.tenant_id, fact.source_session_id, [int(seq) for seq in message_seqs]],
        )
    columns, expressions, params = _select_list(db, fact, computed=computed)
    record_columns, record_expressions, record_params = _select_list(
        db, record, computed={"object_id": ("f.id::text", [])}
    )
    same_person = "end_user_id = %s" if fact.end_user_id is not None else "end_user_id IS NULL"
    person = [fact.end_user_id] if fact.end_user_id is not None else []
    # Names from the models' own metadata; every value is a parameter. The record's INSERT
    # runs whether or not the main query reads it (a data-modifying WITH always does).
    sql = (
        f"WITH f AS (INSERT INTO {table} ({', '.join(columns)}) "  # noqa: S608
        f"SELECT {', '.join(expressions)} WHERE NOT EXISTS (SELECT 1 FROM {table} "
        f"WHERE tenant_id = %s AND {same_person} AND content_hash = %s) RETURNING id), "
        f"r AS (INSERT INTO {quote(ImportedRecord._meta.db_table)} "
        f"({', '.join(record_columns)}) SELECT {', '.join(record_expressions)} FROM f) "
        "SELECT id FROM f"
    )
    with db.cursor() as cursor:
        cursor.execute(sql, [*params, fact.tenant_id, *person, fact.content_hash, *record_params])
        found = cursor.fetchone()
    return None if found is None else int(found[0])


def _json_text(value: Any, *, what: str, max_bytes: int) -> str:
    """`value` as JSON text (how a JSON column takes it on both backends), checked as
    _json_size checks it."""
    if type(value) is dict and not value:  # most messages' metadata: json.dumps({}) without it
        return "{}"
    try:
        encoded = json.dumps(value)
    except (TypeError, ValueError) as error:
        raise RecordRejected(f"{what} is not JSON: {error}") from None
    if len(encoded) > max_bytes:  # ASCII (json.dumps escapes the rest): a character a byte
        raise RecordRejected(f"{what} is over {max_bytes} bytes.")
    if "\\u0000" in encoded:
        raise RecordRejected(f"{what} contains a NUL character.")
    return encoded


def source_key(source_id: str) -> str:
    return hashlib.sha256(source_id.encode()).hexdigest()


class RecordRejected(Exception):
    """A record that cannot be imported as it is; the message says why, for the report."""


class _DryRunRollback(Exception):
    pass


def _limit(name: str) -> int:
    return int(settings.MEMORYHUB_LIMITS[name])


def import_max_content_bytes() -> int:
    return int(
        settings.MEMORYHUB_LIMITS.get("IMPORT_MAX_CONTENT_BYTES", IMPORT_MAX_CONTENT_BYTES_DEFAULT)
    )


def content_fit(value: str, *, max_bytes: int) -> tuple[str, int | None]:
    """`value` as an import stores it: whole when it fits `max_bytes` (UTF-8), else cut (on a
    character boundary) with a marker that says so; the original size when it was cut."""
    encoded = value.encode()
    if len(encoded) <= max_bytes:
        return value, None
    marker = TRUNCATION_MARKER.format(original=len(encoded), kept="{kept}")
    room = max(0, max_bytes - len(marker.encode()) - 16)
    kept = encoded[:room].decode(errors="ignore")
    return kept + marker.format(kept=len(kept.encode())), len(encoded)


def _instant(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat()


def _fingerprint(*, role: str, content: str) -> tuple[str, str]:
    return role, hashlib.sha256(content.encode()).hexdigest()


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

    def __init__(
        self, *, tenant: Tenant, source: str, dry_run: bool = False, pin: bool = False
    ) -> None:
        self.tenant = tenant
        self.source = source
        self.dry_run = dry_run
        # The importer chose to exempt what it brings in from retention (transfer.retention).
        self.pin = pin
        self._content_max = import_max_content_bytes()
        self._message_api_max = _limit("MESSAGE_CONTENT_MAX_BYTES")
        self._metadata_max = _limit("METADATA_MAX_BYTES")
        self._db = connections[router.db_for_write(Message)]
        self._db_session_id: Any = None
        # PostgreSQL through Django's client-side cursor (the simple protocol, which takes
        # several statements at once): an item's INSERTs that return nothing (its messages, its
        # session, its ImportedRecord) wait in `_deferred` and go in one round trip, before
        # anything reads. Under load a round trip is a wait for the server's turn on the CPU.
        self._batching = self._db.vendor == "postgresql" and _client_side_binding(self._db)
        self._deferred: Statements | None = None
        # agent id -> whether its policy redacts (the tenant's for ""): looked up once per
        # import, not per message; forgotten when the import brings a policy of its own.
        self._redaction: dict[str, bool] = {}
        self.report = ImportReport(dry_run=dry_run)
        # Source session id -> the session it became (this run's, or an earlier run's).
        self._sessions: dict[str, uuid.UUID] = {}
        self._facts: dict[str, int] = {}
        # plan_id -> the plan row this run made (in a dry run, one that was rolled back: the
        # deferred foreign key lets a task context point at it before its own rollback).
        self._plans: dict[str, int] = {}
        self._users: dict[str, EndUser] = {}
        # Whether an earlier run of this source left anything in this tenant. When none did (a
        # first import), a session or fact is "already there" only if this run brought it (the
        # maps above): no query per record. A run beside this one is still caught, by
        # ImportedRecord's unique constraint. A dry run asks each time (its rows are rolled back).
        self._first_run = (
            not dry_run and not ImportedRecord.objects.filter(tenant=tenant, source=source).exists()
        )
        self._supersede: list[tuple[str, str]] = []
        # Whether the current item's write inserted its ImportedRecord itself (a fact does, in
        # the statement that inserts it).
        self._remembered = False
        # The current item's changes, reported only if it is imported (not if it is skipped).
        self._changes: list[Changed] = []
        # Sessions given messages by the current item, then by the committed items: their
        # embedding is requested in batches (EMBEDDING_REQUEST_BATCH) and at `finish`.
        self._item_embeddings: list[uuid.UUID] = []
        self._embeddings: list[uuid.UUID] = []
        # Messages written (rolled back ones included): what decides the closing ANALYZE.
        self._messages_written = 0

    # --- shared ---------------------------------------------------------------------------------
    def _already(self, *, kind: str, source_id: str) -> str | None:
        """What this source record became in an earlier run, if that row still exists (a
        purged or erased one is imported again)."""
        if self._first_run and kind in ("sessions", "facts"):
            mapped = self._sessions if kind == "sessions" else self._facts
            return str(mapped[source_id]) if source_id in mapped else None
        record = (
            ImportedRecord.objects.filter(
                tenant=self.tenant, source=self.source, kind=kind, source_key=source_key(source_id)
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

    def _record(self, *, kind: str, source_id: str, object_id: str = "") -> ImportedRecord:
        return ImportedRecord(
            tenant=self.tenant,
            source=self.source,
            kind=kind,
            source_key=source_key(source_id),
            object_id=object_id,
        )

    def _remember(self, *, kind: str, source_id: str, object_id: str) -> None:
        _insert_without_id(
            self._db,
            self._record(kind=kind, source_id=source_id, object_id=object_id),
            as_is=False,
            defer=self._deferred,
        )

    def _flush(self) -> None:
        """Run the statements the current item put off, in order, as one."""
        if not self._deferred:
            return
        statements, self._deferred[:] = list(self._deferred), []
        sql = "; ".join(statement for statement, _ in statements)
        params = [value for _, values in statements for value in values]
        with self._db.cursor() as cursor:
            cursor.execute(sql, params)

    def _end_user(self, user_id: str) -> EndUser:
        if not user_id or len(user_id) > END_USER_ID_MAX_LENGTH or "\x00" in user_id:
            raise RecordRejected(f"user id {user_id!r} is not 1-{END_USER_ID_MAX_LENGTH} chars.")
        if user_id not in self._users:
            try:
                self._users[user_id] = end_user_get_or_create(
                    tenant=self.tenant, external_id=user_id, probably_new=True
                )
            except InvalidInput as error:
                raise RecordRejected(str(error)) from None
        return self._users[user_id]

    def _changed(self, *, kind: str, origin: Origin, change: str) -> None:
        self._changes.append(Changed(kind=kind, origin=origin, change=change))

    def _run(
        self,
        *,
        kind: str,
        source_id: str,
        origin: Origin,
        write: Any,
        grow: Any = None,
        one_statement: bool = False,
    ) -> None:
        """Import one item in its own transaction (rolled back in a dry run), once; an item
        imported before is grown by `grow(object_id)` (what the source added since), if given.
        `one_statement`: `write` writes with one statement and nothing else, which is then the
        item's transaction by itself (no BEGIN and COMMIT round trips)."""
        existing = self._already(kind=kind, source_id=source_id)
        if existing is not None:
            self.report.already_there[kind] += 1
            self._note_mapping(kind=kind, source_id=source_id, object_id=existing)
            if grow is None:
                return
            write = lambda: grow(existing)  # noqa: E731
        users_before = dict(self._users)
        self._changes = []
        self._item_embeddings = []
        self._deferred = [] if self._batching else None
        self._remembered = False
        try:
            with (
                contextlib.nullcontext()
                if one_statement and existing is None and not self.dry_run
                else transaction.atomic(using=self._db.alias)
            ):
                object_id = write()
                if existing is None and not self._remembered:
                    self._remember(kind=kind, source_id=source_id, object_id=str(object_id))
                self._flush()
                if self.dry_run:
                    raise _DryRunRollback
        except _DryRunRollback:
            self._users = users_before  # created in the rolled-back transaction
        except RecordRejected as error:
            self._users = users_before
            self.report.skip(kind=kind, origin=origin, reason=str(error))
            return
        except (IntegrityError, DatabaseError, ValueError) as error:
            self._users = users_before
            self.report.skip(kind=kind, origin=origin, reason=f"refused by the database: {error}")
            return
        finally:
            self._deferred = None
        self.report.changed.extend(self._changes)
        if not self.dry_run:
            self._embeddings.extend(self._item_embeddings)
            if len(self._embeddings) >= EMBEDDING_REQUEST_BATCH:
                self._embeddings_request()
        if existing is None:
            self.report.imported[kind] += 1
            self._note_mapping(kind=kind, source_id=source_id, object_id=str(object_id))

    @contextlib.contextmanager
    def commits_unflushed(self) -> Iterator[None]:
        """While the import runs, its commits do not wait for the disk (PostgreSQL's
        synchronous_commit off, on this connection only): should the server crash before one is
        flushed (a fraction of a second later), the item and its ImportedRecord are lost
        together, and running the import again brings them. That wait was a tenth of an
        import's time. Not inside an outer transaction (a request's, a test's): its own commit
        keeps the server's setting."""
        if self._db.vendor != "postgresql" or self._db.in_atomic_block:
            yield
            return
        with self._db.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO OFF")
        try:
            yield
        finally:
            try:
                with self._db.cursor() as cursor:
                    cursor.execute("RESET synchronous_commit")
            except DatabaseError:  # the connection is gone, and its setting with it
                pass

    def _embeddings_request(self) -> None:
        """Imported turns are recalled like appended ones: ask for their vectors."""
        if self._embeddings:
            embedding_request_sessions(session_ids=self._embeddings)
            self._embeddings = []

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
        self._redaction.clear()  # this policy may redact what follows
        return policy.pk

    # --- sessions -------------------------------------------------------------------------------
    def session(self, item: ImportedSession) -> None:
        self._run(
            kind="sessions",
            source_id=item.source_id,
            origin=item.origin,
            write=lambda: self._write_session(item),
            grow=lambda existing: self._grow_session(item, session_id=existing),
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
        # Its row is inserted last, counters and source times included (one INSERT, no UPDATE):
        # the foreign keys of its messages, state and summaries are checked at commit.
        session = Session(
            tenant=self.tenant,
            end_user=self._end_user(item.user_id) if item.user_id else None,
            agent_id=item.agent_id,
            external_key=external_key,
            metadata=item.metadata,
            created_at=created_at,
            updated_at=timezone.now(),
            last_active_at=_aware(item.last_active_at, what="last_active_at") or created_at,
            pinned=self.pin or item.pinned,
            state_cap=self._state_cap(item),
        )
        last_seq, count, tokens, token_by_seq = self._write_messages(
            session=session,
            origin=item.origin,
            messages=item.messages,
            default_time=created_at,
            after_seq=0,
            defer=self._deferred,
        )
        if item.state or item.summaries:
            self._flush()  # in order, before the ORM writes the rest
        for position, entry in enumerate(item.state, start=1):
            if not entry.key or len(entry.key) > STATE_KEY_MAX_LENGTH:
                raise RecordRejected(f"state key {entry.key!r} is empty or too long.")
            _text(entry.key, what="state key")
            _json_size(
                entry.value, what=f"state {entry.key!r}", max_bytes=_limit("STATE_VALUE_MAX_BYTES")
            )
            state_entry = StateEntry.objects.create(
                tenant=self.tenant,
                session=session,
                key=entry.key,
                value=entry.value,
                position=position,
            )
            updated_at = _aware(entry.updated_at, what=f"state {entry.key!r} time")
            if updated_at is not None:  # auto_now: only an update can set it
                StateEntry.objects.filter(pk=state_entry.pk).update(updated_at=updated_at)
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
        session.last_seq = last_seq
        session.message_count = count
        session.token_count = tokens
        session.state_clock = len(item.state)
        session.summarized_seq = summarized_seq
        session.summarized_tokens = summarized_tokens
        # Imported history is not mined again: the facts of that time come with the import (or
        # not at all); only new exchanges are extracted.
        session.extracted_seq = last_seq
        _insert_without_id(self._db, session, as_is=True, defer=self._deferred)
        if count:
            self._item_embeddings.append(session.pk)
        return session.pk

    def _state_cap(self, item: ImportedSession) -> int | None:
        """The session's own state cap, when what it brings (or its store's cap) is more than
        its memory policy keeps: else the next new key would evict imported ones."""
        policy_cap = memory_policy_for(tenant=self.tenant, agent_id=item.agent_id).state_cap
        wanted = max(len(item.state), item.state_cap or 0)
        if wanted <= policy_cap:
            return None
        if wanted > STATE_CAP_MAX:
            raise RecordRejected(f"{wanted} state keys: no state cap goes over {STATE_CAP_MAX}.")
        store_cap = f"; its store's cap was {item.state_cap}" if item.state_cap else ""
        self._changed(
            kind="state",
            origin=item.origin,
            change=(
                f"{len(item.state)} state keys{store_cap}, over the memory policy's cap of "
                f"{policy_cap}: this session keeps up to {wanted} keys, so a new key does not "
                "evict imported ones."
            ),
        )
        return wanted

    def _message_row(
        self,
        *,
        session: Session,
        message: ImportedMessage,
        seq: int,
        origin: Origin,
        default_time: dt.datetime,
    ) -> tuple[Any, ...]:
        """The values a message's row gets, in MESSAGE_INSERT_COLUMNS' order: an unknown role
        renamed and an oversized content cut, each said in the report."""
        role, metadata = message.role, message.metadata
        if role not in _MESSAGE_ROLES:
            role = ROLE_ALIASES.get(role.lower(), UNKNOWN_ROLE_STORED_AS)
            metadata = {**metadata, "source_role": message.role}
            self._changed(
                kind="messages",
                origin=origin,
                change=f"message {seq}: the role {message.role!r} is stored as {role!r} "
                "(the original is in its metadata as source_role).",
            )
        content, original_bytes = content_fit(
            _text(message.content, what=f"message {seq}"), max_bytes=self._content_max
        )
        if original_bytes is not None:
            metadata = {
                **metadata,
                "import_truncated": {
                    "original_bytes": original_bytes,
                    "kept_bytes": len(content.encode()),
                },
            }
            self._changed(
                kind="messages",
                origin=origin,
                change=f"message {seq}: {original_bytes} bytes, over the import limit of "
                f"{self._content_max}; stored cut, with a marker (metadata import_truncated).",
            )
        elif len(content) > self._message_api_max and len(content.encode()) > (
            self._message_api_max
        ):  # len(str) <= len(bytes): most contents need no encoding to be known small
            self._changed(
                kind="messages",
                origin=origin,
                change=f"message {seq}: {len(content.encode())} bytes, over the API's limit of "
                f"{self._message_api_max}; kept whole (the import limit is {self._content_max}).",
            )
        encoded_metadata = _json_text(
            metadata, what=f"message {seq} metadata", max_bytes=self._metadata_max
        )
        tool_calls = message.tool_calls
        redacted = False
        if self._redacting(agent_id=session.agent_id):
            values = {"content": content, **redact_tool_calls(tool_calls=tool_calls)}
            masked = self._redacted(
                values,
                object_type="message",
                agent_id=session.agent_id,
                kind="messages",
                origin=origin,
                what=f"message {seq}",
            )
            redacted = masked != values
            if redacted:
                content = masked["content"]
                tool_calls = tool_calls_with(tool_calls=tool_calls, values=masked)
        token_count = (
            message.token_count
            if message.token_count is not None and original_bytes is None and not redacted
            else count_tokens(content)
        )
        # A message without a time of its own gets its session's.
        created_at = _aware(message.created_at, what=f"message {seq} time") or default_time
        return (
            self.tenant.pk,
            self._db_session_id,
            seq,
            role,
            content,
            _text(message.name, what=f"message {seq} name")[:128],
            message.tool_call_id[:128],
            None if tool_calls is None else json.dumps(tool_calls),
            encoded_metadata,
            token_count,
            self._db.ops.adapt_datetimefield_value(created_at),
        )

    def _write_messages(
        self,
        *,
        session: Session,
        origin: Origin,
        messages: Iterable[ImportedMessage],
        default_time: dt.datetime,
        after_seq: int,
        keep_seqs: bool = True,
        defer: Statements | None = None,
    ) -> tuple[int, int, int, dict[int, int]]:
        """Insert the messages in chunks after `after_seq`; returns last seq, count, tokens,
        tokens per seq (only up to the summaries' range is needed, but seqs are few compared
        with contents). `keep_seqs`: a source's own seqs (MemoryHub's export) are kept.

        Rows go in as one INSERT per chunk, built here (_insert_messages: on PostgreSQL the
        rows as one JSON parameter, elsewhere a multi-row VALUES): bulk_create's model instances
        and (on PostgreSQL) its UNNEST arrays, dumped element by element in Python, cost more
        than the database's own work for an import's hundreds of thousands of messages. The
        values are checked above as the model would (role, sizes, NUL, offsets) and the
        database checks the rest (seq order, unique seqs, the role's CHECK)."""
        last_seq = after_seq
        count = tokens = 0
        token_by_seq: dict[int, int] = {}
        self._db_session_id = _SESSION_FK.get_db_prep_save(session.pk, self._db)
        stream = iter(messages)
        while chunk := list(itertools.islice(stream, MESSAGE_CHUNK)):
            rows = []
            for message in chunk:
                seq = message.seq if keep_seqs and message.seq is not None else last_seq + 1
                if seq <= last_seq:
                    raise RecordRejected(f"message seq {seq} does not follow {last_seq}.")
                row = self._message_row(
                    session=session,
                    message=message,
                    seq=seq,
                    origin=origin,
                    default_time=default_time,
                )
                rows.append(row)
                token_count = row[_TOKEN_COUNT]
                token_by_seq[seq] = token_count
                last_seq = seq
                count += 1
                tokens += token_count
            if defer:
                self._flush()  # the chunk before: one chunk held at a time, however long
            _insert_messages(self._db, rows=rows, defer=defer)
        self._messages_written += count
        return last_seq, count, tokens, token_by_seq

    def _grow_session(self, item: ImportedSession, *, session_id: str) -> uuid.UUID:
        """Append what the source holds after the last message already stored (a transcript or
        tape that grew since the first import); never a message twice.

        Messages are matched by role and content (and time, where the source has one), as many
        times as each is stored. Source messages before the last match that are not stored
        (removed since by retention or a purge) are not brought back; those after it are new."""
        session = Session.objects.select_for_update().filter(pk=session_id).first()
        if session is None:  # pragma: no cover - _already just saw it
            raise RecordRejected("the session imported before is gone.")
        stored: Counter[tuple[str, str]] = Counter()
        stored_timed: Counter[tuple[str, str, str]] = Counter()
        latest: dt.datetime | None = None
        for role, content, created_at in (
            Message.objects.filter(session=session)
            .values_list("role", "content", "created_at")
            .iterator(chunk_size=MESSAGE_CHUNK)
        ):
            fingerprint = _fingerprint(role=role, content=content)
            stored[fingerprint] += 1
            stored_timed[(*fingerprint, _instant(created_at))] += 1
            latest = created_at if latest is None else max(latest, created_at)
        pending: list[ImportedMessage] = []
        not_brought_back = 0
        for message in item.messages:
            role = message.role
            if role not in MessageRole.values:
                role = ROLE_ALIASES.get(role.lower(), UNKNOWN_ROLE_STORED_AS)
            content, _ = content_fit(message.content, max_bytes=self._content_max)
            fingerprint = _fingerprint(role=role, content=content)
            created_at = _aware(message.created_at, what="message time")
            timed = None if created_at is None else (*fingerprint, _instant(created_at))
            matched = stored_timed[timed] > 0 if timed is not None else stored[fingerprint] > 0
            if matched:
                if timed is not None:
                    stored_timed[timed] -= 1
                stored[fingerprint] -= 1
                not_brought_back += len(pending)
                pending = []
            else:
                pending.append(message)
        if not_brought_back:
            self._changed(
                kind="messages",
                origin=item.origin,
                change=f"{not_brought_back} messages older than the last one stored are no "
                "longer in the session (removed since the first import): not added again.",
            )
        if not pending:
            return session.pk
        last_seq, count, tokens, _ = self._write_messages(
            session=session,
            origin=item.origin,
            messages=pending,
            default_time=latest or session.created_at,
            after_seq=session.last_seq,
            keep_seqs=False,
        )
        newest = max(
            [
                t
                for t in (session.last_active_at, _aware(item.last_active_at, what="last active"))
                if t is not None
            ]
        )
        Session.objects.filter(pk=session.pk).update(
            last_seq=last_seq,
            message_count=F("message_count") + count,
            token_count=F("token_count") + tokens,
            last_active_at=newest,
            # Imported history is not mined: the extraction cursor moves past it, unless a
            # newer exchange waits to be read.
            extracted_seq=last_seq
            if session.extracted_seq >= session.last_seq
            else session.extracted_seq,
            pinned=session.pinned or self.pin,
        )
        if count:
            self._item_embeddings.append(session.pk)
        self.report.added_to_existing["messages"] += count
        return session.pk

    # --- long-term memory -----------------------------------------------------------------------
    def memory(self, item: ImportedMemory) -> None:
        self._run(
            kind="user_memories",
            source_id=item.source_id,
            origin=item.origin,
            write=lambda: self._write_memory(item),
            grow=lambda existing: self._grow_memory(item, memory_id=existing),
        )

    def _redacting(self, *, agent_id: str) -> bool:
        """Whether the policy in force for `agent_id` redacts anything (asked once an import)."""
        if agent_id not in self._redaction:
            _mode, classes = redaction_for(tenant_id=self.tenant.pk, agent_id=agent_id)
            self._redaction[agent_id] = bool(classes)
        return self._redaction[agent_id]

    def _redacted(
        self,
        values: dict[str, str],
        *,
        object_type: str,
        agent_id: str = "",
        kind: str,
        origin: Origin,
        what: str,
    ) -> dict[str, str]:
        """`values` as the tenant's redaction policy wants them stored. An import masks even
        under "refuse": refusing would drop the record, and an import loses nothing unsaid."""
        if not self._redacting(agent_id=agent_id):
            return values
        masked = redact_for_write(
            tenant_id=self.tenant.pk,
            values=values,
            object_type=object_type,
            agent_id=agent_id,
            never_refuse=True,
        )
        if masked != values:
            self._changed(
                kind=kind,
                origin=origin,
                change=f"{what}: secrets or personal data masked, as the redaction policy asks.",
            )
        return masked

    def _fit(self, value: str, *, what: str, kind: str, origin: Origin, api_limit: str) -> str:
        """A text as the import stores it: whole up to the import limit, which is larger than
        the API's (said in the report when the API would refuse it), else cut with a marker."""
        content, original_bytes = content_fit(_text(value, what=what), max_bytes=self._content_max)
        if original_bytes is not None:
            self._changed(
                kind=kind,
                origin=origin,
                change=f"{what}: {original_bytes} bytes, over the import limit of "
                f"{self._content_max}; stored cut, with a marker.",
            )
        elif len(content.encode()) > _limit(api_limit):
            self._changed(
                kind=kind,
                origin=origin,
                change=f"{what}: {len(content.encode())} bytes, over the API's limit of "
                f"{_limit(api_limit)}; kept whole (the import limit is {self._content_max}).",
            )
        object_type = {"user_memories": "memory", "facts": "fact", "notes": "note"}[kind]
        return self._redacted(
            {"content": content}, object_type=object_type, kind=kind, origin=origin, what=what
        )["content"]

    def _grow_memory(self, item: ImportedMemory, *, memory_id: str) -> int:
        """A memory the source changed since the first import: its new content becomes the
        next version (the stored one is kept as a version); an older or equal one adds nothing."""
        memory = UserMemory.objects.select_for_update().get(pk=memory_id)
        content = self._fit(
            item.content,
            what="memory content",
            kind="user_memories",
            origin=item.origin,
            api_limit="MEMORY_CONTENT_MAX_BYTES",
        )
        updated_at = _aware(item.updated_at, what="memory updated_at")
        if content == memory.content or (
            updated_at is not None and updated_at <= memory.updated_at
        ):
            return memory.pk
        UserMemoryVersion.objects.create(
            tenant=self.tenant,
            memory=memory,
            version=memory.version,
            content=memory.content,
            created_at=memory.updated_at,
        )
        UserMemory.objects.filter(pk=memory.pk).update(
            content=content,
            version=memory.version + 1,
            updated_at=updated_at or timezone.now(),
        )
        self.report.added_to_existing["memory versions"] += 1
        return memory.pk

    def _write_memory(self, item: ImportedMemory) -> int:
        if len(item.key) > MEMORY_KEY_MAX_LENGTH or not re.match(MEMORY_KEY_PATTERN, item.key):
            raise RecordRejected(f"memory key {item.key!r} is not {MEMORY_KEY_PATTERN}.")
        if item.key.startswith(RESERVED_MEMORY_KEY_PREFIXES):
            raise RecordRejected(f"memory key {item.key!r} uses a reserved prefix.")
        content = self._fit(
            item.content,
            what="memory content",
            kind="user_memories",
            origin=item.origin,
            api_limit="MEMORY_CONTENT_MAX_BYTES",
        )
        expires_at = _aware(item.expires_at, what="memory expires_at")
        pinned = item.pinned
        if self.pin and not pinned and expires_at is not None and expires_at <= timezone.now():
            pinned = True  # retention would remove it at once: the importer chose to keep it
            self._changed(
                kind="user_memories",
                origin=item.origin,
                change=f"memory {item.key!r} expired at {expires_at.isoformat()}: pinned, as "
                "chosen, so retention keeps it.",
            )
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
            content=content,
            pinned=pinned,
            expires_at=expires_at,
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
            one_statement=self._fact_in_one_statement(item),
        )

    def _fact_in_one_statement(self, item: ImportedFact) -> bool:
        """Whether importing the fact writes one statement (_fact_insert_unless_there) and
        nothing else: on PostgreSQL, outside an outer transaction, its person known already
        (not created with it) and its source session none or this run's."""
        return (
            self._db.vendor == "postgresql"
            and not self._db.in_atomic_block
            and (not item.user_id or item.user_id in self._users)
            and (item.source_session_id is None or item.source_session_id in self._sessions)
        )

    def _write_fact(self, item: ImportedFact) -> int:
        content = self._fit(
            item.content,
            what="fact content",
            kind="facts",
            origin=item.origin,
            api_limit="FACT_CONTENT_MAX_BYTES",
        )
        if not content.strip():
            raise RecordRejected("fact content is empty.")
        _json_size(item.metadata, what="fact metadata", max_bytes=_limit("METADATA_MAX_BYTES"))
        end_user = self._end_user(item.user_id) if item.user_id else None
        content_hash = fact_content_hash(content)
        # PostgreSQL checks for the same fact in the INSERT itself (_fact_insert_unless_there).
        in_one_statement = self._db.vendor == "postgresql"
        if (
            not in_one_statement
            and Fact.objects.for_tenant(self.tenant)
            .filter(end_user=end_user, content_hash=content_hash)
            .exists()
        ):
            raise RecordRejected(_SAME_FACT)
        external_id = item.external_id
        if external_id is not None:
            if not external_id or len(external_id) > FACT_EXTERNAL_ID_MAX_LENGTH:
                raise RecordRejected(f"fact id must be 1-{FACT_EXTERNAL_ID_MAX_LENGTH} characters.")
            if Fact.objects.for_tenant(self.tenant).filter(external_id=external_id).exists():
                raise RecordRejected(f"fact id {external_id!r} is already another fact's.")
        tags = list(dict.fromkeys(str(tag) for tag in item.tags))
        source_session = self.session_id_for(item.source_session_id)
        source_message_ids: list[int] = []
        if not in_one_statement and source_session is not None and item.source_message_seqs:
            source_message_ids = list(
                Message.objects.filter(
                    session_id=source_session, seq__in=item.source_message_seqs
                ).values_list("pk", flat=True)
            )
        fact = Fact(
            tenant=self.tenant,
            end_user=end_user,
            content=content,
            content_hash=content_hash,
            external_id=external_id,
            search_text=fact_search_text(content=content, tags=tags, end_user=end_user),
            tags=tags,
            metadata=item.metadata,
            source_session_id=source_session,
            source_message_ids=source_message_ids,
            valid_until=_aware(item.valid_until, what="fact valid_until"),
            created_at=_aware(item.created_at, what="fact created_at") or timezone.now(),
            updated_at=timezone.now(),
        )
        if in_one_statement:
            self._flush()  # nothing is put off before a fact; should that change, in order
            fact_id = _fact_insert_unless_there(
                self._db,
                fact,
                message_seqs=item.source_message_seqs,
                record=self._record(kind="facts", source_id=item.source_id),
            )
            if fact_id is None:
                raise RecordRejected(_SAME_FACT)
            self._remembered = True
            return fact_id
        _insert_as_is(fact)
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
        """Link facts to the facts that superseded them (both may come in any order), request
        the last embeddings, then return the report."""
        self._embeddings_request()
        for old_source, new_source in self._supersede:
            old, new = self._facts.get(old_source), self._facts.get(new_source)
            if old is None or new is None:
                continue  # one of the two was skipped: already in the report
            if not self.dry_run:
                Fact.objects.filter(tenant=self.tenant, pk=old).update(superseded_by_id=new)
        if not self.dry_run and self._messages_written >= ANALYZE_AFTER_MESSAGES:
            keys_analyze(
                using=self._db.alias,
                of={**CONVERSATION_KEYS, Fact: ("tenant", "end_user"), ImportedRecord: ("tenant",)},
            )
        return self.report

    def note(self, item: ImportedNote) -> None:
        self._run(
            kind="notes",
            source_id=item.source_id,
            origin=item.origin,
            write=lambda: self._write_note(item),
            grow=lambda existing: self._grow_note(item),
        )

    def _note_rows(self, item: ImportedNote) -> tuple[EndUser, str, Any]:
        end_user = self._end_user(item.user_id)
        kind = NoteKind.LONG_TERM if item.day is None else NoteKind.DAILY
        rows = Note.objects.for_tenant(self.tenant).filter(
            end_user=end_user, kind=kind, day=item.day
        )
        return end_user, kind, rows

    def _write_note(self, item: ImportedNote) -> int:
        if not item.versions:
            raise RecordRejected("a note needs at least one version.")
        end_user, kind, existing = self._note_rows(item)
        if existing.exists():
            which = "long-term note" if item.day is None else f"note for {item.day}"
            raise RecordRejected(f"this person already has a {which}.")
        return self._write_note_versions(
            item=item, end_user=end_user, kind=kind, versions=item.versions, after=0
        )

    def _write_note_versions(
        self,
        *,
        item: ImportedNote,
        end_user: EndUser,
        kind: str,
        versions: list[ImportedNoteVersion],
        after: int,
    ) -> int:
        last = None
        for number, version in enumerate(versions, start=after + 1):
            last = Note.objects.create(
                tenant=self.tenant,
                end_user=end_user,
                kind=kind,
                day=item.day,
                version=number,
                content=self._fit(
                    version.content,
                    what=f"note version {number}",
                    kind="notes",
                    origin=item.origin,
                    api_limit="NOTE_CONTENT_MAX_BYTES",
                ),
            )
            if version.created_at is not None:
                Note.objects.filter(pk=last.pk).update(
                    created_at=_aware(version.created_at, what="note created_at")
                )
        assert last is not None
        return last.pk

    def _grow_note(self, item: ImportedNote) -> int:
        """Append the versions the source holds after the last one already stored (a tape
        with new memory zones), as _grow_session does for messages."""
        end_user, kind, rows = self._note_rows(item)
        stored = Counter(rows.values_list("content", flat=True))
        last_version = max(rows.values_list("version", flat=True), default=0)
        pending: list[ImportedNoteVersion] = []
        for version in item.versions:
            content, _ = content_fit(version.content, max_bytes=self._content_max)
            if stored[content] > 0:
                stored[content] -= 1
                pending = []
            else:
                pending.append(version)
        if not pending:
            return 0
        pk = self._write_note_versions(
            item=item, end_user=end_user, kind=kind, versions=pending, after=last_version
        )
        self.report.added_to_existing["note versions"] += len(pending)
        return pk
