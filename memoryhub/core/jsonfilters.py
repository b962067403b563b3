"""JSON list membership that works on both databases (Django's `contains` lookup on JSONField
does not exist on SQLite)."""

from __future__ import annotations

import json
from typing import Any

from django.db import connections
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL


def filter_json_list_contains_all(
    queryset: QuerySet[Any], *, field: str, values: list[str]
) -> QuerySet[Any]:
    """Rows whose JSON list `field` contains every one of `values`."""
    if not values:
        return queryset
    connection = connections[queryset.db]
    quote = connection.ops.quote_name
    column = f"{quote(queryset.model._meta.db_table)}.{quote(field)}"
    if connection.vendor == "postgresql":
        # jsonb containment: '["a","b"]' @> '["a"]' (uses a GIN index if one is added).
        return queryset.filter(
            RawSQL(f"{column} @> %s::jsonb", [json.dumps(values)], output_field=BooleanField())
        )
    for value in values:
        queryset = queryset.filter(
            RawSQL(
                f"EXISTS (SELECT 1 FROM json_each({column}) WHERE json_each.value = %s)",
                [value],
                output_field=BooleanField(),
            )
        )
    return queryset
