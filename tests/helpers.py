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
