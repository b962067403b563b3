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
    # Any operation: an Accept header that JSON cannot satisfy.
    "406": "The Accept header names no type this API answers in (not_acceptable).",
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


# OpenAPI links: how the id a write answers with addresses the resources under it. Swagger UI
# shows them, and schemathesis's state machine follows them, so fuzzing reaches a real session,
# person, plan or memory instead of stopping at the 404 a random id gets.
# (source operationId, target operationId, {target parameter: expression}, request body or None)
_LinkSpec = tuple[str, str, dict[str, str], dict[str, str] | None]

_SESSION_ID = {"session_id": "$response.body#/id"}
_PERSON_OF_SESSION = {"user_id": "$response.body#/user_id"}
_PERSON = {"user_id": "$response.body#/user_id"}
_USER_MEMORY = {"user_id": "$response.body#/user_id", "key": "$response.body#/key"}
_TENANT_MEMORY = {"key": "$response.body#/key"}
_PLAN = {"plan_id": "$response.body#/plan_id"}
_PLAN_MATCHING = {**_PLAN, "header.If-Match": "$response.body#/etag"}
_TASK = {"task_id": "$response.body#/task_id"}
_TASK_MATCHING = {**_TASK, "header.If-Match": "$response.body#/etag"}
_FACT = {"fact_id": "$response.body#/id"}
_SAME_SESSION = {"session_id": "$request.path.session_id"}
_SAME_PERSON = {"user_id": "$request.path.user_id"}

_SESSION_CHILDREN = (
    "sessions_get",
    "sessions_update",
    "sessions_delete",
    "sessions_context",
    "messages_list",
    "messages_append",
    "state_list",
    "state_get",
    "state_set",
    "state_delete",
    "summary_get",
    "summary_set",
    "summary_force",
    "sessions_jobs",
    "session_storage",
    "working_memory_get",
)
_PERSON_CHILDREN = (
    "users_get",
    "users_export",
    "users_erase",
    "user_memories_list",
    "user_memories_get",
    "user_memories_save",
    "user_memories_delete",
    "user_memories_versions",
    "notes_recall",
    "notes_clear",
    "notes_daily_append",
    "notes_daily_get",
    "notes_long_term_get",
    "notes_long_term_save",
    "notes_long_term_history",
    "notes_show",
    "notes_prune",
    "user_tokens_list",
    "user_tokens_mint",
)

LINKS: tuple[_LinkSpec, ...] = (
    # A session: its messages, state, context and summary; its person; what can hang off it.
    *(("sessions_create", target, _SESSION_ID, None) for target in _SESSION_CHILDREN),
    *(("sessions_create", target, _PERSON_OF_SESSION, None) for target in _PERSON_CHILDREN),
    ("sessions_create", "sessions_list", {"query.user_id": "$response.body#/user_id"}, None),
    ("sessions_create", "messages_search", {"query.session_id": "$response.body#/id"}, None),
    ("sessions_create", "plans_create", {}, {"session_id": "$response.body#/id"}),
    ("sessions_create", "purge", {}, {"scope": "session", "session_id": "$response.body#/id"}),
    ("sessions_create", "task_contexts_create", {}, {"session_id": "$response.body#/id"}),
    (
        "sessions_create",
        "facts_create",
        {},
        {"user_id": "$response.body#/user_id", "source_session_id": "$response.body#/id"},
    ),
    # A person (an end user): memories, notes, facts, export and erasure.
    *(("users_get", target, _PERSON, None) for target in _PERSON_CHILDREN),
    ("users_get", "facts_list", {"query.user_id": "$response.body#/user_id"}, None),
    ("users_get", "facts_search", {"query.user_id": "$response.body#/user_id"}, None),
    ("users_get", "facts_create", {}, {"user_id": "$response.body#/user_id"}),
    ("users_get", "plans_list", {"query.user_id": "$response.body#/user_id"}, None),
    ("users_get", "purge", {}, {"scope": "user", "user_id": "$response.body#/user_id"}),
    # A person's token: revoke it.
    ("user_tokens_mint", "tokens_revoke", {"jti": "$response.body#/jti"}, None),
    # A memory, per person and tenant-wide.
    *(
        ("user_memories_save", target, _USER_MEMORY, None)
        for target in (
            "user_memories_get",
            "user_memories_save",
            "user_memories_delete",
            "user_memories_versions",
        )
    ),
    *(
        ("tenant_memories_save", target, _TENANT_MEMORY, None)
        for target in (
            "tenant_memories_get",
            "tenant_memories_save",
            "tenant_memories_delete",
            "tenant_memories_versions",
        )
    ),
    # A plan and its tasks.
    ("plans_create", "plans_get", _PLAN, None),
    ("plans_create", "plans_replace", _PLAN_MATCHING, None),
    ("plans_create", "plans_update", _PLAN_MATCHING, None),
    ("plans_create", "plans_delete", _PLAN_MATCHING, None),
    ("plans_create", "task_contexts_list", {"query.plan_id": "$response.body#/plan_id"}, None),
    ("plans_create", "task_contexts_create", {}, {"plan_id": "$response.body#/plan_id"}),
    # A task context and its sub-tasks.
    ("task_contexts_create", "task_contexts_get", _TASK, None),
    ("task_contexts_create", "task_contexts_replace", _TASK_MATCHING, None),
    ("task_contexts_create", "task_contexts_update", _TASK_MATCHING, None),
    ("task_contexts_create", "task_contexts_delete", _TASK_MATCHING, None),
    (
        "task_contexts_create",
        "task_contexts_by_subtask",
        {"subtask_id": "$response.body#/sub_tasks/0"},
        None,
    ),
    # A fact: read, correct, delete, supersede.
    ("facts_create", "facts_get", _FACT, None),
    ("facts_create", "facts_update", _FACT, None),
    ("facts_create", "facts_delete", _FACT, None),
    ("facts_create", "facts_create", {}, {"supersedes": "$response.body#/id"}),
    # A write answers with the key or day it wrote: read it back, overwrite it, delete it.
    *(
        ("state_set", target, {**_SAME_SESSION, "key": "$response.body#/key"}, None)
        for target in ("state_get", "state_set", "state_delete")
    ),
    *(
        ("messages_append", target, _SAME_SESSION, None)
        for target in ("messages_list", "sessions_context", "summary_force", "summary_get")
    ),
    ("notes_daily_append", "notes_daily_get", {**_SAME_PERSON, "day": "$response.body#/day"}, None),
    *(
        ("notes_long_term_save", target, _SAME_PERSON, None)
        for target in ("notes_long_term_get", "notes_long_term_history", "notes_recall")
    ),
)


def _link_name(target: str, parameters: dict[str, str], body: dict[str, str] | None) -> str:
    # Unique per response: the target, and for a source with two links to it, what they carry.
    name = "".join(part.capitalize() for part in target.split("_"))
    if body is not None:
        name += "With" + "".join(part.capitalize() for key in body for part in key.split("_"))
    elif "header.If-Match" in parameters:
        name += "IfMatch"
    return name


def add_links(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    operations = {
        operation["operationId"]: operation
        for methods in result.get("paths", {}).values()
        for operation in methods.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    for source, target, parameters, body in LINKS:
        if source not in operations or target not in operations:
            # tests/test_api_schema.py fails on a renamed operation; the schema still serves.
            continue
        link: dict[str, Any] = {"operationId": target}
        if parameters:
            link["parameters"] = parameters
        if body is not None:
            link["requestBody"] = body
        for status, response in operations[source].get("responses", {}).items():
            # Links read the body a success answers with (202 "memory off" carries none of it).
            if status in ("200", "201") and "content" in response:
                response.setdefault("links", {})[_link_name(target, parameters, body)] = link
    return result
