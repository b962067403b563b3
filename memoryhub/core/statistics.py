"""The planner's statistics of the keys it picks indexes by.

Every query of a tenant's rows says `tenant_id = …`, and most tables have indexes that lead
with it. For a tenant the statistics do not know yet (a new one, or one that grew since the
last ANALYZE) PostgreSQL estimates a few rows, and then prefers those indexes to the one the
query's other keys name: a read of a session's last messages walked the tenant's whole
(tenant_id, created_at) index (109 ms at 87,000 messages, 0.06 ms through (session_id, seq)).
Autovacuum analyses a table only after a tenth of it changed. So an import that wrote much
(transfer.sink) and an hourly beat task (sessions_app.tasks.keys_analyze) analyse the key
columns: 0.13 s for 700 MB of messages, where the whole table's ANALYZE (the texts' statistics
above all) took 2.9 s.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model


def keys_analyze(
    *, of: Mapping[type[Model], tuple[str, ...]], using: str = DEFAULT_DB_ALIAS
) -> bool:
    """ANALYZE these tables' named fields' columns, on PostgreSQL (False elsewhere: SQLite's
    planner keeps no such statistics unless asked, and nothing here asks). A role that does not
    own the tables gets a warning from the server, not an error."""
    db = connections[using]
    if db.vendor != "postgresql":
        return False
    quote = db.ops.quote_name
    tables = []
    for model, names in of.items():
        column = {field.name: str(field.column) for field in model._meta.concrete_fields}
        columns = ", ".join(quote(column[name]) for name in names)
        tables.append(f"{quote(model._meta.db_table)} ({columns})")
    with db.cursor() as cursor:
        cursor.execute(f"ANALYZE {', '.join(tables)}")
    return True
