"""`DELETE /users/{id}/` answers 200 with the counts of what it erased, and the schema says so
(not a 204 without a body)."""

from __future__ import annotations


def test_the_schema_documents_the_200_and_its_body(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    responses = schema["paths"]["/api/v1/users/{user_id}/"]["delete"]["responses"]

    assert "204" not in responses
    body = responses["200"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/Erasure"}
    erasure = schema["components"]["schemas"]["Erasure"]
    assert erasure["properties"]["erased"]["additionalProperties"] == {"type": "integer"}
