"""Message vectors in pgvector, where the database has it.

Migration 0008 adds `embedding vector(384)` beside the float32 blob of `MessageVector` when the
`vector` extension can be created; elsewhere (SQLite, a PostgreSQL without pgvector) nothing here
runs and recall keeps the person's vectors in its in-process index. Where the column exists, the
worker fills it in the transaction that stores the blob, and a search of a person with
RECALL_PGVECTOR_FROM_MESSAGES messages or more (50,000 by default) takes their nearest messages
from the database instead, so no process holds a copy of those people's vectors. A smaller
person's vectors stay in the in-process index too: the database's exact scan of their rows
costs ~0.65 us a row of its own work (6.5 ms at 10,000 messages, bench/README.md), the index's
int8 product ~0.01 us.

The column is not in the Django model (it exists only on some databases), hence the raw SQL.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import BooleanField, F
from django.db.models.expressions import RawSQL

from sessions_app.models import MessageVector

# The column's size: MiniLM's, the default embedder's. An embedder of another size keeps its
# vectors in the blob only, and recall keeps them in process.
DIMENSIONS = 384

# Measured on pgserver's PostgreSQL 18 with 25,000 rows: a person of 5,000 messages takes 4-12 ms
# exact (1,500 buffers), 56 ms through the HNSW index (20,000 buffers: most candidates are other
# people's). Exact grows ~1 ms per 1,000 messages; from here on the planner may choose.
HNSW_FROM_MESSAGES = 50_000

_column_found: dict[tuple[str, str], bool] = {}


def pgvector_enabled(*, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether the message vectors have their `embedding` column; asked once per process and
    database (adding it takes a migration, which a deployment follows with a restart)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    # By name too: the test runner points an alias at another database after start-up.
    key = (using, str(connection.settings_dict["NAME"]))
    found = _column_found.get(key)
    if found is None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = %s AND column_name = 'embedding'",
                [MessageVector._meta.db_table],
            )
            found = _column_found[key] = cursor.fetchone() is not None
    return found


def pgvector_serves(*, dimensions: int, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether the database holds vectors of this size, so that it can find the nearest ones."""
    return dimensions == DIMENSIONS and pgvector_enabled(using=using)


def vector_literal(vector: npt.ArrayLike) -> str:
    """pgvector's text form, '[0.1,-0.2,...]': each float32 in its shortest exact spelling."""
    return "[" + ",".join(np.asarray(vector, dtype=np.float32).reshape(-1).astype(str)) + "]"


def embeddings_store(
    *, vectors: Sequence[tuple[int, bytes]], using: str = DEFAULT_DB_ALIAS
) -> None:
    """Copy (message id, float32 blob) pairs into `embedding`, in one statement; a blob of
    another size sets NULL, so no other model's vector stays beside a stale one. Call it in the
    transaction that wrote the blobs, and only where `pgvector_enabled()`."""
    if not vectors:
        return
    connection = connections[using]
    params: list[int | str | None] = []
    for message_id, blob in vectors:
        values = np.frombuffer(bytes(blob), dtype="<f4")
        params += [message_id, vector_literal(values) if values.size == DIMENSIONS else None]
    rows = ", ".join(["(%s::bigint, %s::vector)"] * len(vectors))
    table = connection.ops.quote_name(MessageVector._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS t SET embedding = d.embedding "  # noqa: S608 (names are ours)
            f"FROM (VALUES {rows}) AS d(id, embedding) WHERE t.message_id = d.id",
            params,
        )


def _one_of(table: str, ids: Sequence[int]) -> RawSQL:
    """`message_id = ANY(array)`: one parameter, where `message_id__in` would make Django
    build and psycopg adapt one placeholder per id (~500 of them for each search). The array in
    its text form: psycopg's adaptation of a list of 564 ints took 0.37 ms, the join 0.06."""
    literal = "{" + ",".join(str(int(message_id)) for message_id in ids) + "}"
    return RawSQL(  # noqa: S611 (the table name is ours)
        f"{table}.message_id = ANY(%s::bigint[])", (literal,), output_field=BooleanField()
    )


def nearest_messages(
    *,
    tenant_id: int,
    end_user_id: int,
    model: str,
    query_vector: npt.ArrayLike,
    limit: int,
    person_messages: int,
    also_ids: Sequence[int] = (),
    session_id: uuid.UUID | None = None,
    role: str | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    exclude_ids: Sequence[int] = (),
    using: str = DEFAULT_DB_ALIAS,
) -> dict[int, float]:
    """The person's `limit` messages nearest to `query_vector`, and those of `also_ids` that are
    the person's and pass the filters: message id → cosine, in one statement.

    The tenant and person filters come first, so another person's vectors are never candidates.
    Below HNSW_FROM_MESSAGES (`person_messages`, the person's message count) the search is exact:
    ordered by similarity, which no vector index can serve, the planner reads the person's rows
    through their (end_user) index and keeps the best in a top-N sort. From there on it is
    ordered by distance, which the HNSW index can serve: the planner may then walk it instead
    (approximate), which pays when the person is a large share of the table.
    """
    literal = vector_literal(query_vector)
    table = connections[using].ops.quote_name(MessageVector._meta.db_table)
    rows = MessageVector.objects.using(using).filter(
        tenant_id=tenant_id, end_user_id=end_user_id, model=model
    )
    if session_id is not None:
        rows = rows.filter(message__session_id=session_id)
    if role is not None:
        rows = rows.filter(message__role=role)
    if since is not None:
        rows = rows.filter(message__created_at__gte=since)
    if until is not None:
        rows = rows.filter(message__created_at__lte=until)
    if exclude_ids:
        rows = rows.exclude(message_id__in=list(exclude_ids))
    if person_messages < HNSW_FROM_MESSAGES:
        similarity = RawSQL(f"1 - ({table}.embedding <=> %s::vector)", [literal])  # noqa: S611
        nearest = (
            rows.annotate(similarity=similarity)
            # Rows without an embedding (NULL) last: they are no candidates.
            .order_by(F("similarity").desc(nulls_last=True))
            .values_list("message_id", "similarity")[:limit]
        )
        if also_ids:
            # By the primary key, in the same round trip; a message in both branches comes
            # twice with the same cosine.
            also = rows.filter(_one_of(table, also_ids)).annotate(similarity=similarity)
            nearest = nearest.union(also.values_list("message_id", "similarity"), all=True)
        return {message_id: float(found) for message_id, found in nearest if found is not None}
    distance = RawSQL(f"{table}.embedding <=> %s::vector", [literal])  # noqa: S611
    nearest = (
        rows.annotate(distance=distance)
        .order_by("distance")  # NULL sorts last ascending
        .values_list("message_id", "distance")[:limit]
    )
    if also_ids:
        also = rows.filter(_one_of(table, also_ids)).annotate(distance=distance)
        nearest = nearest.union(also.values_list("message_id", "distance"), all=True)
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        # pgvector 0.8: an HNSW scan goes on until `limit` rows pass the person filter (by
        # default it stops after hnsw.ef_search = 40 candidates, most of them other people's).
        # LOCAL, for this transaction only: nothing leaks into a pooled connection.
        cursor.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        return {
            message_id: 1.0 - float(found) for message_id, found in nearest if found is not None
        }
