"""OpenAPI post-processing: every operation documents the error shape and the 4xx it can return,
so generated clients (and schemathesis) know what a refusal looks like."""

from __future__ import annotations

from typing import Any

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "description": "Stable, machine-readable."},
                "message": {"type": "string", "description": "For people."},
                "fields": {
                    "type": "object",
                    "description": "Per-field errors: {field: [{code, message}]}, nested for "
                    "nested input (batch items are keyed by their index).",
                    "additionalProperties": True,
                },
            },
        }
    },
}

_ALWAYS = {
    "400": "Invalid input: see error.fields.",
    "401": "Missing, unknown, revoked or expired API key.",
    "403": "The API key lacks a scope this operation needs.",
    "404": "No such resource for this API key's tenant.",
    "414": "The URL is longer than MEMORYHUB_MAX_URL_LENGTH (uri_too_long).",
    "429": "Too many requests for this API key (rate_limited), or too many wrong keys from this "
    "address (too_many_failed_authentications): retry after the Retry-After header's seconds.",
    "503": "The database or the task queue is unavailable for a moment (service_unavailable): "
    "retry after the Retry-After header's seconds.",
}
_WITH_BODY = {
    "413": "The request body is too large.",
    "415": "The request body is not JSON.",
}


def add_error_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    error_content = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, methods in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for operation in methods.values():
            responses = operation.setdefault("responses", {})
            expected = dict(_ALWAYS)
            if "requestBody" in operation:
                expected.update(_WITH_BODY)
            if any(p.get("name") == "Idempotency-Key" for p in operation.get("parameters", [])):
                expected["422"] = "This Idempotency-Key was used before with another request."
            for status, description in expected.items():
                responses.setdefault(status, {"description": description})
            for status, response in responses.items():
                if status.startswith(("4", "5")) and "content" not in response:
                    response["content"] = error_content
    return result
