"""pgvector, where the database has it: an `embedding vector(384)` column on the message vectors,
with an HNSW index, so that a person's nearest messages come from the database
(sessions_app/pgvector.py) instead of an in-process copy of their vectors.

The column is deliberately not in the Django model: it exists only where the extension does (never
on SQLite, nor on a PostgreSQL without pgvector), raw SQL writes it and Django never reads it.
So this migration changes no model state and `makemigrations --check` stays clean.

pgvector installed later? `manage.py migrate sessions_app 0007 && manage.py migrate` runs this
again; it also fills the column from the vectors already stored.
"""

import logging

import numpy as np
from django.db import DatabaseError, migrations, transaction

logger = logging.getLogger(__name__)

# The default embedder's size (MiniLM); vectors of another size leave the column NULL. Spelled
# here rather than imported: a migration must not change when the code does.
DIMENSIONS = 384
TABLE = "sessions_app_messagevector"
INDEX = "messagevector_embedding_hnsw"
BACKFILL_BATCH = 500


def add_embedding_column(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cursor.fetchone() is None:
            return
        try:
            # In a savepoint: pgvector is not a trusted extension, so creating it takes a
            # superuser (or a DBA who did it already), and a refusal must not abort the migration.
            with transaction.atomic(using=connection.alias):
                cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except DatabaseError as exc:
            logger.warning(
                "pgvector is available but could not be created (%s); message vectors stay in "
                "the application. To use it: CREATE EXTENSION vector as a superuser, then "
                "`manage.py migrate sessions_app 0007 && manage.py migrate`.",
                str(exc).strip(),
            )
            return
        cursor.execute(
            f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS embedding vector({DIMENSIONS})"
        )
        # Inline, never TOASTed: a row holds the blob too, and PostgreSQL otherwise moves the
        # embedding out of line, which made a person's scan ~5 times slower (6 buffers a row).
        cursor.execute(f"ALTER TABLE {TABLE} ALTER COLUMN embedding SET STORAGE PLAIN")
        # For large tenants; a person's search mostly scans their rows exactly (see
        # sessions_app/pgvector.py for when the planner takes which).
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON {TABLE} "
            "USING hnsw (embedding vector_cosine_ops)"
        )
        _backfill(cursor)


def _backfill(cursor):
    """Fill the column from the float32 blobs already stored, in batches by message id."""
    last = 0
    while True:
        cursor.execute(
            f"SELECT message_id, vector FROM {TABLE} WHERE message_id > %s "
            "AND embedding IS NULL AND octet_length(vector) = %s "
            "ORDER BY message_id LIMIT %s",
            [last, 4 * DIMENSIONS, BACKFILL_BATCH],
        )
        rows = cursor.fetchall()
        if not rows:
            return
        params = []
        for message_id, blob in rows:
            values = np.frombuffer(bytes(blob), dtype="<f4")
            params += [message_id, "[" + ",".join(values.astype(str)) + "]"]
        cursor.execute(
            f"UPDATE {TABLE} AS t SET embedding = d.embedding::vector "
            f"FROM (VALUES {', '.join(['(%s::bigint, %s)'] * len(rows))}) AS d(id, embedding) "
            "WHERE t.message_id = d.id",
            params,
        )
        last = rows[-1][0]


def drop_embedding_column(apps, schema_editor):
    # The extension stays: dropping it takes a superuser, and other tables may use it.
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {TABLE} DROP COLUMN IF EXISTS embedding")


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0007_recall")]

    operations = [migrations.RunPython(add_embedding_column, drop_embedding_column)]
