"""Input and output shapes of the conversation-memory API. They translate; services decide."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from django.core.validators import RegexValidator
from rest_framework import serializers

from memoryhub.accounts.models import END_USER_ID_MAX_LENGTH
from memoryhub.core.fields import StrictCharField
from memoryhub.core.limits import limit, validate_json_value, validate_text_size
from memoryhub.core.serializers import StrictInputSerializer
from sessions_app.models import (
    AGENT_ID_MAX_LENGTH,
    DEFAULT_RESPONSE_TOPIC,
    EVENT_NAME_MAX_LENGTH,
    EXTERNAL_KEY_MAX_LENGTH,
    WORK_ID_MAX_LENGTH,
    Message,
    MessageRole,
    Plan,
    PlanStatus,
    Session,
    StateEntry,
    TaskContext,
)
from sessions_app.selectors import MessageRecord
from sessions_app.services import CREATED_AT_CLOCK_SKEW


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


class SessionCreateInputSerializer(StrictInputSerializer):
    user_id = StrictCharField(required=False, allow_null=True, max_length=END_USER_ID_MAX_LENGTH)
    agent_id = StrictCharField(
        required=False, allow_blank=True, max_length=AGENT_ID_MAX_LENGTH, default=""
    )
    external_key = StrictCharField(
        required=False, allow_null=True, max_length=EXTERNAL_KEY_MAX_LENGTH
    )
    metadata = _metadata_field()


class SessionPatchInputSerializer(StrictInputSerializer):
    agent_id = StrictCharField(required=False, allow_blank=True, max_length=AGENT_ID_MAX_LENGTH)
    external_key = StrictCharField(
        required=False, allow_null=True, max_length=EXTERNAL_KEY_MAX_LENGTH
    )
    metadata = _metadata_field()


class SessionOutputSerializer(serializers.ModelSerializer[Session]):
    user_id = serializers.SerializerMethodField()
    plan_count = serializers.SerializerMethodField(
        help_text="Plans in this session: GET /plans/?session_id=…"
    )
    task_context_count = serializers.SerializerMethodField(
        help_text="Task contexts in this session: GET /task-contexts/?session_id=…"
    )

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
            "plan_count",
            "task_context_count",
        ]
        read_only_fields = fields

    def get_user_id(self, session: Session) -> str | None:
        return session.end_user.external_id if session.end_user_id else None  # type: ignore[union-attr]

    # The list annotates the counts onto its one query (selectors.session_list_for_tenant); a
    # single session counts them here, two probes of the session foreign-key indexes.
    def get_plan_count(self, session: Session) -> int:
        count = getattr(session, "plan_count", None)
        return session.plans.count() if count is None else int(count)

    def get_task_context_count(self, session: Session) -> int:
        count = getattr(session, "task_context_count", None)
        return session.task_contexts.count() if count is None else int(count)


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


class MessageInputSerializer(StrictInputSerializer):
    role = serializers.ChoiceField(choices=MessageRole.choices)
    # Whitespace is part of what was said: never trimmed.
    content = StrictCharField(
        required=False, allow_blank=True, allow_null=True, trim_whitespace=False
    )
    name = StrictCharField(required=False, allow_blank=True, max_length=128, default="")
    tool_call_id = StrictCharField(required=False, allow_blank=True, max_length=128, default="")
    tool_calls = ToolCallSerializer(many=True, required=False, allow_null=True)
    metadata = _metadata_field()
    # Naive values are taken as UTC, like every other time the API reads (USE_TZ, TIME_ZONE=UTC).
    created_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default_timezone=dt.UTC,
        help_text=(
            "When it was said, for a backfill or an import (ISO 8601; without an offset it is "
            "UTC); omitted or null means now. Not in the future (a time up to "
            f"{CREATED_AT_CLOCK_SKEW.seconds // 60} minutes ahead, clock skew, is stored as now), "
            "and not before the message before it, in the batch or already in the session "
            "(`created_at_in_future`, `created_at_out_of_order`)."
        ),
    )

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


# The roles a message of only {"role", "content"} may have (a tool message needs tool_call_id).
_SIMPLE_ROLES = frozenset(
    {MessageRole.SYSTEM.value, MessageRole.USER.value, MessageRole.ASSISTANT.value}
)
_SIMPLE_KEYS = frozenset({"role", "content"})


def simple_message_input(data: Any) -> dict[str, Any] | None:
    """MessageInputSerializer's validated data for the usual append, `{"role": …, "content":
    …}` and nothing else, with a role, content and size it accepts; None for anything else,
    which the serializer then validates (and words any error of). An append's fields
    deep-copied per request cost more than the rest of its validation: this checks the same
    rules directly (StrictCharField's type, CharField's NUL and surrogate validators,
    validate_content's size, validate()'s defaults)."""
    if type(data) is not dict or data.keys() != _SIMPLE_KEYS:
        return None
    role, content = data["role"], data["content"]
    if type(role) is not str or role not in _SIMPLE_ROLES:
        return None
    if type(content) is not str or not content or "\x00" in content:
        return None
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: the serializer's error
        return None
    if size > limit("MESSAGE_CONTENT_MAX_BYTES"):
        return None
    return {"role": role, "content": content, "name": "", "tool_call_id": "", "metadata": {}}


class MessageBatchInputSerializer(StrictInputSerializer):
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


def message_data(message: Message | MessageRecord) -> dict[str, Any]:
    """MessageOutputSerializer's output, built directly.

    Messages are the hottest output (every append, every read of the last N); DRF builds and
    deep-copies serializer fields per call, which cost more than the database work here. The
    serializer stays the documented shape (OpenAPI); a test keeps the two identical.
    """
    return {
        "id": message.id,
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


_PLAIN_COUNT = re.compile(r"[1-9][0-9]{0,8}")


def last_only_query(query: Any) -> dict[str, Any] | None:
    """MessageListQuerySerializer's validated data for the usual read, `?last=N` alone with N
    plain digits within MESSAGES_READ_MAX; None for any other query string, which the
    serializer then validates (and words any error of)."""
    if len(query) != 1:
        return None
    raw = query.get("last")
    if type(raw) is not str or not _PLAIN_COUNT.fullmatch(raw):
        return None
    last = int(raw)
    if last > limit("MESSAGES_READ_MAX"):
        return None
    return {"last": last}


class MessagePageSerializer(serializers.Serializer[Any]):
    results = MessageOutputSerializer(many=True)
    has_more = serializers.BooleanField(
        help_text="With `last`: older messages exist. With `after_seq`: newer messages follow."
    )
    last_seq = serializers.IntegerField(help_text="The session's newest seq.")


# --- state --------------------------------------------------------------------------------------


class StateValueInputSerializer(StrictInputSerializer):
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


# --- plans and task contexts (seed 002) ---------------------------------------------------------

# Ids travel in URL paths: no "/" (it would split the path) and no control characters.
WORK_ID_PATTERN = r"^[^\x00-\x1f\x7f/]+$"


def _storable_text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise serializers.ValidationError(
            "Text that is not valid Unicode.", code="invalid_unicode"
        ) from None


def work_id_field(*, help_text: str, **kwargs: Any) -> StrictCharField:
    return StrictCharField(
        max_length=WORK_ID_MAX_LENGTH,
        trim_whitespace=False,
        validators=[
            RegexValidator(WORK_ID_PATTERN, "No '/' or control characters.", code="invalid"),
            _storable_text,
        ],
        help_text=help_text,
        **kwargs,
    )


def _event_field(*, help_text: str, **kwargs: Any) -> StrictCharField:
    return StrictCharField(
        max_length=EVENT_NAME_MAX_LENGTH, validators=[_storable_text], help_text=help_text, **kwargs
    )


def _task_json_field(*, what: str, help_text: str) -> serializers.DictField:
    return serializers.DictField(
        required=False,
        validators=[
            lambda value: validate_json_value(value, limit_name="TASK_DATA_MAX_BYTES", what=what)
        ],
        help_text=help_text,
    )


def _sub_task_list_field(*, help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=work_id_field(help_text="A sub-task id."),
        required=False,
        validators=[_sub_task_list_length],
        help_text=help_text,
    )


def _sub_task_list_length(value: list[str]) -> None:
    maximum = limit("TASK_SUB_TASKS_MAX")
    if len(value) > maximum:
        raise serializers.ValidationError(
            f"At most {maximum} sub-tasks per request.", code="too_many_sub_tasks"
        )


class PlanCreateInputSerializer(StrictInputSerializer):
    plan_id = work_id_field(help_text="Your id for the plan, unique in the tenant.")
    user_id = StrictCharField(
        required=False,
        allow_null=True,
        max_length=END_USER_ID_MAX_LENGTH,
        help_text="The person the plan is for; defaults to the session's person.",
    )
    session_id = serializers.UUIDField(
        required=False, allow_null=True, help_text="The session the plan belongs to, if any."
    )
    goal_event = _event_field(help_text="The event that set the goal.")
    goal_data = _task_json_field(what="goal_data", help_text="The goal's data.")
    status = serializers.ChoiceField(choices=PlanStatus.choices, default=PlanStatus.RUNNING)
    state = _task_json_field(what="state", help_text="The planner's state machine.")


class PlanReplaceInputSerializer(StrictInputSerializer):
    """PUT: the whole plan but its id, person and session (fixed at creation)."""

    goal_event = _event_field(help_text="The event that set the goal.")
    goal_data = _task_json_field(what="goal_data", help_text="Replaces the goal's data.")
    status = serializers.ChoiceField(
        choices=PlanStatus.choices, help_text="A finished plan cannot go back to running."
    )
    state = _task_json_field(what="state", help_text="Replaces the state.")


class PlanPatchInputSerializer(StrictInputSerializer):
    goal_event = _event_field(required=False, help_text="Replaces the goal event.")
    goal_data = _task_json_field(
        what="goal_data", help_text="Merged into the goal's data (RFC 7396: null removes a key)."
    )
    status = serializers.ChoiceField(
        choices=PlanStatus.choices,
        required=False,
        help_text="running → completed | failed | cancelled; a finished plan stays finished.",
    )
    state = _task_json_field(
        what="state", help_text="Merged into the state (RFC 7396: null removes a key)."
    )


class PlanOutputSerializer(serializers.ModelSerializer[Plan]):
    user_id = serializers.CharField(source="end_user.external_id", read_only=True)
    session_id = serializers.UUIDField(read_only=True, allow_null=True)
    etag = serializers.CharField(
        read_only=True, help_text="The ETag header's value: send it as If-Match to write."
    )

    class Meta:
        model = Plan
        fields = [
            "plan_id",
            "user_id",
            "session_id",
            "goal_event",
            "goal_data",
            "status",
            "state",
            "etag",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class TaskContextReplaceInputSerializer(StrictInputSerializer):
    """PUT: the whole task context but its id, sub-task list included."""

    plan_id = work_id_field(
        required=False, allow_null=True, help_text="The tenant's plan this task works for."
    )
    session_id = serializers.UUIDField(
        required=False, allow_null=True, help_text="The session the task belongs to, if any."
    )
    event_type = _event_field(help_text="The event that started the task.")
    response_event = _event_field(
        required=False, allow_blank=True, default="", help_text="The event to answer with."
    )
    response_topic = _event_field(
        required=False, default=DEFAULT_RESPONSE_TOPIC, help_text="Where to send the answer."
    )
    # DRF's metaclass moves declared fields off the class, so `.data` stays the serializer's.
    data = _task_json_field(what="data", help_text="The original request's data.")  # type: ignore[assignment]
    sub_tasks = _sub_task_list_field(help_text="The sub-tasks the task waits for.")
    state = _task_json_field(what="state", help_text="The worker's own state.")


class TaskContextCreateInputSerializer(TaskContextReplaceInputSerializer):
    task_id = work_id_field(help_text="Your id for the task, unique in the tenant.")


class TaskContextPatchInputSerializer(StrictInputSerializer):
    add_sub_tasks = _sub_task_list_field(
        help_text="Attach these sub-tasks (ones already attached are skipped)."
    )
    remove_sub_tasks = _sub_task_list_field(
        help_text="Detach these sub-tasks (ones not attached are skipped). Applied before adds."
    )
    state = _task_json_field(
        what="state", help_text="Merged into the state (RFC 7396: null removes a key)."
    )
    data = _task_json_field(  # type: ignore[assignment]  # see TaskContextReplaceInputSerializer
        what="data", help_text="Merged into the data (RFC 7396: null removes a key)."
    )
    event_type = _event_field(required=False, help_text="Replaces the event type.")
    response_event = _event_field(
        required=False, allow_blank=True, help_text="Replaces the response event."
    )
    response_topic = _event_field(required=False, help_text="Replaces the response topic.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        both = set(attrs.get("add_sub_tasks", [])) & set(attrs.get("remove_sub_tasks", []))
        if both:
            raise serializers.ValidationError(
                {"add_sub_tasks": [f"Both added and removed: {', '.join(sorted(both))}."]}
            )
        return attrs


class TaskContextOutputSerializer(serializers.ModelSerializer[TaskContext]):
    plan_id = serializers.SerializerMethodField()
    session_id = serializers.UUIDField(read_only=True, allow_null=True)
    sub_tasks = serializers.SerializerMethodField(
        help_text="The sub-tasks the task still waits for, oldest first."
    )
    etag = serializers.CharField(
        read_only=True, help_text="The ETag header's value: send it as If-Match to write."
    )

    class Meta:
        model = TaskContext
        fields = [
            "task_id",
            "plan_id",
            "session_id",
            "event_type",
            "response_event",
            "response_topic",
            "data",
            "sub_tasks",
            "state",
            "etag",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_plan_id(self, task: TaskContext) -> str | None:
        return task.plan.plan_id if task.plan_id else None  # type: ignore[union-attr]

    def get_sub_tasks(self, task: TaskContext) -> list[str]:
        # .all() reads what the selector or service prefetched: no query per task.
        return [sub_task.subtask_id for sub_task in task.sub_tasks.all()]


class TaskContextPatchOutputSerializer(TaskContextOutputSerializer):
    added_sub_tasks = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="The sub-tasks this request attached (not those already attached).",
    )
    removed_sub_tasks = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text=(
            "The sub-tasks this request detached. With `sub_tasks` empty, this request took "
            "the last one: exactly one request sees that."
        ),
    )

    class Meta(TaskContextOutputSerializer.Meta):
        fields = [*TaskContextOutputSerializer.Meta.fields, "added_sub_tasks", "removed_sub_tasks"]
        read_only_fields = fields
