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


def search_query_strings(*, person: str, others: tuple[str, ...]) -> Any:
    """A hypothesis strategy of a search's query strings: the four usual parameters and
    `others`, each with text, numbers in and out of range, the modes, padded and oversized
    text, a NUL, a lone surrogate and `person`'s id (the plain readings' parity tests)."""
    from hypothesis import strategies as st

    values = st.one_of(
        st.text(max_size=12),
        st.sampled_from(
            ["hybrid", "lexical", "semantic", "10", "1", "100", "0", "010", " 5", "5.0"]
        ),
        st.sampled_from([" green tea ", person, "tui:bob", "x" * 1001, "a\x00b", "\ud800", "-1"]),
    )
    names = st.sampled_from(["q", "user_id", "top_k", "mode", *others])
    return st.dictionaries(names, values, max_size=5)
