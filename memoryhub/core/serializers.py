"""The base of every request-body serializer: a field the endpoint does not take is a 400.

DRF drops keys a serializer does not declare. For a memory service that is data loss the
client never hears about: a seed's `sub_tasks` sent to a PATCH that takes `add_sub_tasks`, or a
client's own `session_id` sent to `POST /sessions/`, was accepted and thrown away. So every
input serializer of the API derives from StrictInputSerializer, and a key it does not declare
is refused with one message per key:

- `unknown_field`: the serializer has no such field (the message lists the ones it takes);
- `read_only_field`: the field exists but only in answers (an `id`, a `created_at` echoed back
  from a read): refused too rather than compared, since an input serializer has no stored
  object to compare with, and "accepted if equal" would still hide a client that means to set it.

Nested serializers derive from it too (each message of a batch); a shape another system owns,
whose extra keys are kept rather than dropped (OpenAI's tool calls), stays a plain serializer.
The OpenAPI schema says the same: request bodies of these serializers have
`additionalProperties: false` (the extension below).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers

UNKNOWN_FIELD = "unknown_field"
READ_ONLY_FIELD = "read_only_field"


def refused_fields(
    *, serializer: serializers.Serializer[Any], data: Mapping[str, Any]
) -> dict[str, list[serializers.ErrorDetail]]:
    """The keys of `data` that `serializer` would silently ignore, each with its error."""
    fields = serializer.fields
    writable = sorted(
        name
        for name, field in fields.items()
        if not field.read_only and not isinstance(field, serializers.HiddenField)
    )
    accepted = ", ".join(writable) or "no fields"
    refused: dict[str, list[serializers.ErrorDetail]] = {}
    for key in data:
        name = str(key)
        if name in writable:
            continue
        if name in fields:
            refused[name] = [
                serializers.ErrorDetail(
                    f"`{name}` is read-only: it is in answers, but cannot be sent.",
                    code=READ_ONLY_FIELD,
                )
            ]
        else:
            refused[name] = [
                serializers.ErrorDetail(
                    f"Unknown field `{name}`: this request takes {accepted}.", code=UNKNOWN_FIELD
                )
            ]
    return refused


class StrictInputSerializer(serializers.Serializer[Any]):
    """A request body's serializer that refuses keys it does not declare (see the module)."""

    def to_internal_value(self, data: Any) -> Any:
        refused = refused_fields(serializer=self, data=data) if isinstance(data, Mapping) else {}
        try:
            validated = super().to_internal_value(data)
        except serializers.ValidationError as error:
            # Report everything wrong at once: the declared fields' errors and the refused keys.
            if refused and isinstance(error.detail, dict):
                raise serializers.ValidationError({**error.detail, **refused}) from None
            raise
        if refused:
            raise serializers.ValidationError(refused)
        return validated


class StrictInputSerializerExtension(OpenApiSerializerExtension):
    """Documents the refusal: a strict serializer's request schema allows no other properties."""

    target_class = StrictInputSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> Any:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request" and isinstance(schema, dict):
            schema["additionalProperties"] = False
        return schema
