"""Input and output shapes of the conversation-memory API. They translate; services decide."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rest_framework import serializers

from memoryhub.accounts.models import END_USER_ID_MAX_LENGTH
from memoryhub.core.fields import StrictCharField
from memoryhub.core.limits import limit, validate_json_value, validate_text_size
from sessions_app.models import (
    AGENT_ID_MAX_LENGTH,
    EXTERNAL_KEY_MAX_LENGTH,
    Message,
    MessageRole,
    Session,
    StateEntry,
)


def _metadata_field() -> serializers.DictField:
    return serializers.DictField(
        required=False,
        validators=[
            lambda value: validate_json_value(
                value, limit_name="METADATA_MAX_BYTES", what="metadata"
            )
        ],
    )


# --- sessions -----------------------------------------------------------------------------------


class SessionCreateInputSerializer(serializers.Serializer[Any]):
    user_id = StrictCharField(required=False, allow_null=True, max_length=END_USER_ID_MAX_LENGTH)
    agent_id = StrictCharField(
        required=False, allow_blank=True, max_length=AGENT_ID_MAX_LENGTH, default=""
    )
    external_key = StrictCharField(
        required=False, allow_null=True, max_length=EXTERNAL_KEY_MAX_LENGTH
    )
    metadata = _metadata_field()


class SessionPatchInputSerializer(serializers.Serializer[Any]):
    agent_id = StrictCharField(required=False, allow_blank=True, max_length=AGENT_ID_MAX_LENGTH)
    external_key = StrictCharField(
        required=False, allow_null=True, max_length=EXTERNAL_KEY_MAX_LENGTH
    )
    metadata = _metadata_field()


class SessionOutputSerializer(serializers.ModelSerializer[Session]):
    user_id = serializers.SerializerMethodField()

    class Meta:
        model = Session
        fields = [
            "id",
            "user_id",
            "agent_id",
            "external_key",
            "metadata",
            "created_at",
            "updated_at",
            "last_active_at",
            "message_count",
            "token_count",
            "last_seq",
        ]
        read_only_fields = fields

    def get_user_id(self, session: Session) -> str | None:
        return session.end_user.external_id if session.end_user_id else None  # type: ignore[union-attr]


# --- messages -----------------------------------------------------------------------------------


class ToolCallSerializer(serializers.Serializer[Any]):
    """OpenAI's tool call shape; extra keys a provider adds are kept as they are."""

    id = StrictCharField(max_length=128)
    type = StrictCharField(max_length=32, default="function")
    function = serializers.DictField()

    def to_internal_value(self, data: Any) -> Any:
        validated = super().to_internal_value(data)
        if isinstance(data, dict):
            return {**data, **validated}
        return validated


class MessageInputSerializer(serializers.Serializer[Any]):
    role = serializers.ChoiceField(choices=MessageRole.choices)
    # Whitespace is part of what was said: never trimmed.
    content = StrictCharField(
        required=False, allow_blank=True, allow_null=True, trim_whitespace=False
    )
    name = StrictCharField(required=False, allow_blank=True, max_length=128, default="")
    tool_call_id = StrictCharField(required=False, allow_blank=True, max_length=128, default="")
    tool_calls = ToolCallSerializer(many=True, required=False, allow_null=True)
    metadata = _metadata_field()

    def validate_content(self, value: str | None) -> str:
        value = value or ""
        return validate_text_size(value, limit_name="MESSAGE_CONTENT_MAX_BYTES", what="content")

    def validate_tool_calls(
        self, value: list[dict[str, Any]] | None
    ) -> list[dict[str, Any]] | None:
        if not value:
            return None
        return validate_json_value(value, limit_name="MESSAGE_CONTENT_MAX_BYTES", what="tool_calls")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        role = attrs["role"]
        content = attrs.get("content") or ""
        tool_calls = attrs.get("tool_calls")
        errors: dict[str, list[serializers.ErrorDetail]] = {}
        if tool_calls and role != MessageRole.ASSISTANT:
            errors["tool_calls"] = [
                serializers.ErrorDetail("Only assistant messages carry tool_calls.", "invalid")
            ]
        if role == MessageRole.TOOL and not attrs.get("tool_call_id"):
            errors["tool_call_id"] = [
                serializers.ErrorDetail(
                    "A tool message needs the tool_call_id it answers.", "required"
                )
            ]
        if not content and not tool_calls:
            errors["content"] = [
                serializers.ErrorDetail(
                    "Content may not be empty (only an assistant message with tool_calls may be).",
                    "blank",
                )
            ]
        if errors:
            raise serializers.ValidationError(errors)
        attrs["content"] = content
        attrs.setdefault("metadata", {})
        return attrs


class MessageBatchInputSerializer(serializers.Serializer[Any]):
    messages = MessageInputSerializer(many=True, allow_empty=False)

    def validate_messages(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        maximum = limit("MESSAGE_BATCH_MAX")
        if len(value) > maximum:
            raise serializers.ValidationError(
                f"At most {maximum} messages per request.", code="batch_too_large"
            )
        return value


class MessageOutputSerializer(serializers.ModelSerializer[Message]):
    session_id = serializers.UUIDField(read_only=True)

    class Meta:
        model = Message
        fields = [
            "id",
            "session_id",
            "seq",
            "role",
            "content",
            "name",
            "tool_call_id",
            "tool_calls",
            "metadata",
            "token_count",
            "created_at",
        ]
        read_only_fields = fields


def _iso(value: dt.datetime) -> str:
    # DRF's DateTimeField output: ISO 8601 with "Z" for UTC.
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def message_data(message: Message) -> dict[str, Any]:
    """MessageOutputSerializer's output, built directly.

    Messages are the hottest output (every append, every read of the last N); DRF builds and
    deep-copies serializer fields per call, which cost more than the database work here. The
    serializer stays the documented shape (OpenAPI); a test keeps the two identical.
    """
    return {
        "id": message.pk,
        "session_id": str(message.session_id),
        "seq": message.seq,
        "role": message.role,
        "content": message.content,
        "name": message.name,
        "tool_call_id": message.tool_call_id,
        "tool_calls": message.tool_calls,
        "metadata": message.metadata,
        "token_count": message.token_count,
        "created_at": _iso(message.created_at),
    }


class MessageBatchOutputSerializer(serializers.Serializer[Any]):
    messages = MessageOutputSerializer(many=True)


class MessageListQuerySerializer(serializers.Serializer[Any]):
    last = serializers.IntegerField(required=False, min_value=1)
    after_seq = serializers.IntegerField(required=False, min_value=0)
    limit = serializers.IntegerField(required=False, min_value=1)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        maximum = limit("MESSAGES_READ_MAX")
        if "last" in attrs and ("after_seq" in attrs or "limit" in attrs):
            raise serializers.ValidationError(
                {"last": ["Use either `last` or `after_seq`/`limit`, not both."]}
            )
        for name in ("last", "limit"):
            if attrs.get(name, 0) > maximum:
                raise serializers.ValidationError({name: [f"At most {maximum}."]})
        return attrs


class MessagePageSerializer(serializers.Serializer[Any]):
    results = MessageOutputSerializer(many=True)
    has_more = serializers.BooleanField(
        help_text="With `last`: older messages exist. With `after_seq`: newer messages follow."
    )
    last_seq = serializers.IntegerField(help_text="The session's newest seq.")


# --- state --------------------------------------------------------------------------------------


class StateValueInputSerializer(serializers.Serializer[Any]):
    value = serializers.JSONField(
        allow_null=True,
        validators=[
            lambda value: validate_json_value(
                value, limit_name="STATE_VALUE_MAX_BYTES", what="value"
            )
        ],
    )


class StateEntryOutputSerializer(serializers.ModelSerializer[StateEntry]):
    value = serializers.JSONField(allow_null=True)

    class Meta:
        model = StateEntry
        fields = ["key", "value", "updated_at"]
        read_only_fields = fields


class StateEntryWriteOutputSerializer(StateEntryOutputSerializer):
    evicted = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Keys removed (oldest first) to keep the session within its state cap.",
    )

    class Meta(StateEntryOutputSerializer.Meta):
        fields = [*StateEntryOutputSerializer.Meta.fields, "evicted"]
        read_only_fields = fields


class StateListSerializer(serializers.Serializer[Any]):
    results = StateEntryOutputSerializer(many=True)
    count = serializers.IntegerField()
    cap = serializers.IntegerField()
