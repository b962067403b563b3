"""Every request body of /api/v1/ refuses a field it does not take: 400 with one message per
field (`unknown_field`), never silently dropped (memoryhub.core.serializers)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework import serializers

from memoryhub.core.serializers import StrictInputSerializer
from sessions_app.models import Message, Session, TaskContext
from tests.helpers import client_for, error_code, error_fields


def test_a_seed_clients_sub_tasks_on_a_task_context_patch_is_a_400(api):
    api.post(
        "/api/v1/task-contexts/",
        {"task_id": "task-1", "event_type": "e", "sub_tasks": ["a"]},
        format="json",
    )

    response = api.patch(
        "/api/v1/task-contexts/task-1/", {"sub_tasks": ["a", "b"], "state": {"x": 1}}, format="json"
    )

    assert response.status_code == 400
    assert error_code(response) == "validation_error"
    (problem,) = error_fields(response)["sub_tasks"]
    assert problem["code"] == "unknown_field"
    assert "add_sub_tasks" in problem["message"]  # it names what the request does take
    assert TaskContext.objects.get().state == {}  # the valid part was not applied either


def test_a_clients_session_id_on_create_is_a_400_and_creates_nothing(api):
    response = api.post(
        "/api/v1/sessions/", {"session_id": "sess-456", "user_id": "u"}, format="json"
    )

    assert response.status_code == 400
    assert error_fields(response)["session_id"][0]["code"] == "unknown_field"
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    ("method", "path", "body", "refused"),
    [
        ("patch", "/api/v1/plans/plan-1/", {"sub_tasks": []}, "sub_tasks"),
        ("put", "/api/v1/plans/plan-1/", {"goal_event": "g", "status": "running", "id": 1}, "id"),
        ("post", "/api/v1/facts/", {"content": "likes tea", "user_id": "u", "id": 7}, "id"),
        (
            "put",
            "/api/v1/users/u/memories/diet/",
            {"content": "veg", "created_at": "2025-01-01T00:00:00Z"},
            "created_at",
        ),
        ("put", "/api/v1/sessions/{session}/state/k/", {"value": 1, "key": "k"}, "key"),
        ("post", "/api/v1/purge/", {"scope": "user", "user_id": "u", "dryrun": True}, "dryrun"),
    ],
)
def test_unknown_and_echoed_fields_are_refused_everywhere(
    tenant, make_key, session, method, path, body, refused
):
    api = client_for(make_key(tenant, scopes=["read", "write", "purge"])[1])
    api.post(
        "/api/v1/plans/", {"plan_id": "plan-1", "user_id": "u", "goal_event": "g"}, format="json"
    )

    response = getattr(api, method)(path.format(session=session.id), body, format="json")

    assert response.status_code == 400, response.content
    assert list(error_fields(response)) == [refused]
    assert error_fields(response)[refused][0]["code"] == "unknown_field"


def test_a_batch_names_the_message_with_the_unknown_field(api, session):
    response = api.post(
        f"/api/v1/sessions/{session.id}/messages/",
        {"messages": [{"role": "user", "content": "hi"}, {"role": "user", "text": "oops"}]},
        format="json",
    )

    assert response.status_code == 400
    fields = error_fields(response)
    # A batch item's errors are keyed by its index (README: errors).
    assert fields["messages"]["1"]["text"][0]["code"] == "unknown_field"
    assert not Message.objects.exists()


def test_tool_calls_keep_the_keys_a_provider_adds(api, session):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    response = api.post(
        f"/api/v1/sessions/{session.id}/messages/",
        {"role": "assistant", "content": "", "tool_calls": [{**call, "index": 0}]},
        format="json",
    )

    assert response.status_code == 201, response.content
    assert response.json()["tool_calls"][0]["index"] == 0


def test_every_error_is_reported_at_once(api):
    response = api.post("/api/v1/sessions/", {"user_id": 5, "colour": "red"}, format="json")

    fields = error_fields(response)
    assert fields["user_id"][0]["code"] == "invalid"
    assert fields["colour"][0]["code"] == "unknown_field"


class _WithReadOnly(StrictInputSerializer):
    name = serializers.CharField()
    id = serializers.IntegerField(read_only=True)


def test_a_read_only_field_sent_back_is_refused_as_read_only():
    data = _WithReadOnly(data={"name": "x", "id": 3})

    assert not data.is_valid()
    assert data.errors["id"][0].code == "read_only_field"


def _request_schemas(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    components = schema["components"]["schemas"]

    def resolved(body: dict[str, Any]) -> list[dict[str, Any]]:
        if "$ref" in body:
            return resolved(components[body["$ref"].rsplit("/", 1)[-1]])
        # One message or a batch: a oneOf of two bodies, each of which must be strict.
        if "oneOf" in body:
            return [item for choice in body["oneOf"] for item in resolved(choice)]
        return [body]

    found = []
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                found.extend((path, method, body) for body in resolved(media["schema"]))
    return found


def test_the_schema_says_every_request_body_takes_no_other_fields(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    bodies = _request_schemas(schema)
    assert len(bodies) > 20
    loose = [
        (path, method)
        for path, method, body in bodies
        if path.startswith("/api/v1/") and body.get("additionalProperties") is not False
    ]
    assert loose == []
