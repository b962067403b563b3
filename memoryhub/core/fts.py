"""SQL for the full-text indexes that FullTextRanker (memoryhub.core.search) expects, per vendor.

Used by migrations: a GIN expression index on PostgreSQL; on SQLite an FTS5 external-content
table over the column (rowid = the row's integer pk) with triggers that keep it in step.
"""

from __future__ import annotations

from typing import Any


def fulltext_index_sql(*, table: str, column: str, fts_table: str, index: str) -> dict[str, Any]:
    """Forward and backward SQL per vendor, for a RunPython migration step."""
    return {
        "postgresql": (
            [
                f"CREATE INDEX {index} ON {table} USING GIN "
                f"(to_tsvector('english'::regconfig, {column}))"
            ],
            [f"DROP INDEX IF EXISTS {index}"],
        ),
        "sqlite": (
            [
                f"CREATE VIRTUAL TABLE {fts_table} USING fts5({column}, content='{table}', "
                f"content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
                f"CREATE TRIGGER {fts_table}_ai AFTER INSERT ON {table} BEGIN "
                f"INSERT INTO {fts_table}(rowid, {column}) VALUES (new.id, new.{column}); END",
                f"CREATE TRIGGER {fts_table}_ad AFTER DELETE ON {table} BEGIN "
                f"INSERT INTO {fts_table}({fts_table}, rowid, {column}) "
                f"VALUES ('delete', old.id, old.{column}); END",
                f"CREATE TRIGGER {fts_table}_au AFTER UPDATE OF {column} ON {table} BEGIN "
                f"INSERT INTO {fts_table}({fts_table}, rowid, {column}) "
                f"VALUES ('delete', old.id, old.{column}); "
                f"INSERT INTO {fts_table}(rowid, {column}) VALUES (new.id, new.{column}); END",
                f"INSERT INTO {fts_table}({fts_table}) VALUES ('rebuild')",
            ],
            [
                f"DROP TRIGGER IF EXISTS {fts_table}_ai",
                f"DROP TRIGGER IF EXISTS {fts_table}_ad",
                f"DROP TRIGGER IF EXISTS {fts_table}_au",
                f"DROP TABLE IF EXISTS {fts_table}",
            ],
        ),
    }


def run_for_vendor(sql: dict[str, Any], *, backward: bool = False) -> Any:
    """A RunPython function executing the statements for the connection's vendor."""

    def run(apps: Any, schema_editor: Any) -> None:
        forward_sql, backward_sql = sql[schema_editor.connection.vendor]
        for statement in backward_sql if backward else forward_sql:
            schema_editor.execute(statement)

    return run
