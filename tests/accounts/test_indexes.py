"""Indexes a write keeps: no table of ours carries an index on a foreign key alone when another
index already leads with that column (the tenant's and the session's were a third of the plain
btrees every message insert maintained), and the check that keeps every tenant-owned table
reachable by its tenant through some index (memoryhub.E010)."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.core.checks import Error
from django.db import connection, models

from memoryhub.accounts.checks import check_tenant_indexes
from memoryhub.accounts.models import TenantOwnedModel

# Tables written on every append, import, embedding or job: none may keep a covered index.
HOT_TABLES = (
    "sessions_app_message",
    "sessions_app_session",
    "sessions_app_messagevector",
    "sessions_app_stateentry",
    "sessions_app_summary",
    "accounts_enduser",
    "accounts_idempotencyrecord",
    "facts_app_fact",
    "jobs_jobrun",
    "transfer_importedrecord",
)


def _index_columns(table: str) -> dict[str, tuple[list[str], bool, bool]]:
    """Index name -> (its columns in order, unique, plain: neither partial nor expression)."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return {
        name: (
            list(info["columns"]),
            bool(info["unique"] or info["primary_key"]),
            # Expression or partial indexes introspect without (all) their columns.
            None not in info["columns"] and bool(info["columns"]),
        )
        for name, info in constraints.items()
        if info["index"] or info["unique"] or info["primary_key"]
    }


@pytest.mark.django_db
@pytest.mark.parametrize("table", HOT_TABLES)
def test_no_index_on_a_column_another_index_leads_with(table: str) -> None:
    indexes = _index_columns(table)
    covered = [
        (name, other)
        for name, (columns, unique, plain) in indexes.items()
        for other, (longer, _, _) in indexes.items()
        if other != name
        and plain
        and not unique
        and len(longer) > len(columns)
        and longer[: len(columns)] == columns
    ]
    assert covered == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "table", ["sessions_app_message", "sessions_app_session", "facts_app_fact"]
)
def test_tenant_lookups_still_have_an_index(table: str) -> None:
    leading = {columns[0] for columns, _, _ in _index_columns(table).values() if columns}
    assert "tenant_id" in leading


def test_every_tenant_owned_model_passes_the_check() -> None:
    assert check_tenant_indexes(None) == []


def test_a_tenant_owned_model_without_a_tenant_index_is_an_error() -> None:
    class Orphan(TenantOwnedModel):
        name = models.CharField(max_length=10)

        class Meta:
            app_label = "core"

    try:
        errors = check_tenant_indexes(None)
        assert [(type(error), error.id, error.obj) for error in errors] == [
            (Error, "memoryhub.E010", Orphan)
        ]
    finally:
        del apps.all_models["core"]["orphan"]
        apps.clear_cache()


@pytest.mark.django_db
def test_the_full_text_triggers_survive_the_migration_on_sqlite() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's full-text tables are kept by triggers")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN "
            "('sessions_app_message', 'facts_app_fact') ORDER BY name"
        )
        triggers = [row[0] for row in cursor.fetchall()]
    assert triggers == [
        "facts_app_fact_fts_ad",
        "facts_app_fact_fts_ai",
        "facts_app_fact_fts_au",
        "sessions_app_message_fts_ad",
        "sessions_app_message_fts_ai",
        "sessions_app_message_fts_au",
    ]
