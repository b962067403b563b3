"""Plain helpers any test module may import; fixtures stay in conftest.py, which nothing imports."""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient


def client_for(secret: str) -> APIClient:
    """An API client that sends `secret` as its bearer key."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def error_fields(response: Any) -> dict[str, Any]:
    """The per-field messages of an API error response (asserting it is one)."""
    body = response.json()
    assert "error" in body, body
    return body["error"].get("fields", {})


def error_code(response: Any) -> str:
    """The stable code of an API error response (`not_found`, `validation_error`, ...)."""
    return str(response.json()["error"]["code"])


def sessions_with_messages(tenant: Any, *, sessions: int, messages: int) -> list[Any]:
    """`sessions` new sessions of `tenant` with `messages` messages each, written in one
    statement (PostgreSQL): the tables' contents the planner's tests need, quickly."""
    from django.db import connection

    from sessions_app.models import Session

    made = Session.objects.bulk_create(
        Session(tenant=tenant, last_active_at="2026-01-01T00:00:00Z") for _ in range(sessions)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO sessions_app_message (tenant_id, session_id, seq, role, content, name, "
            "tool_call_id, metadata, token_count, created_at) SELECT %s, s, n, 'user', 'x', '', "
            "'', '{}', 1, now() FROM unnest(%s::uuid[]) AS s, generate_series(1, %s) AS n",
            [tenant.pk, [session.pk for session in made], messages],
        )
    return made
