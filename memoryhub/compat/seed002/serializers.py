"""Seed 002's request bodies and answers, field for field (02-MEMORY-SERVICE.md).

Bodies are strict like MemoryHub's own (memoryhub.core.serializers): a field the seed's
contract does not have is a 400, never dropped. Answers are built by hand in the seed's shape.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from rest_framework import serializers

from memoryhub.core.fields import StrictCharField
from memoryhub.core.limits import limit, validate_json_value
from memoryhub.core.serializers import StrictInputSerializer
from sessions_app.api.serializers import work_id_field
from sessions_app.models import (
    AGENT_ID_MAX_LENGTH,
    DEFAULT_RESPONSE_TOPIC,
    EVENT_NAME_MAX_LENGTH,
    EXTERNAL_KEY_MAX_LENGTH,
    PlanStatus,
)

ACTIVE = "active"


def _json_object(*, what: str, limit_name: str = "TASK_DATA_MAX_BYTES") -> serializers.DictField:
    return serializers.DictField(
        required=False,
        validators=[lambda value: validate_json_value(value, limit_name=limit_name, what=what)],
    )


def _event(**kwargs: Any) -> StrictCharField:
    return StrictCharField(max_length=EVENT_NAME_MAX_LENGTH, **kwargs)


def _sub_task_ids() -> serializers.ListField:
    return serializers.ListField(
        child=work_id_field(help_text="A sub-task id."),
        required=False,
        validators=[_sub_task_count],
    )


def _sub_task_count(value: list[str]) -> None:
    maximum = limit("TASK_SUB_TASKS_MAX")
    if len(value) > maximum:
        raise serializers.ValidationError(
            f"At most {maximum} sub-tasks per task.", code="too_many_sub_tasks"
        )


# --- task contexts ------------------------------------------------------------------------------


class TaskContextUpdateSerializer(StrictInputSerializer):
    """PUT /v1/memory/task-context/{task_id}: the fields sent replace the stored ones."""

    plan_id = work_id_field(required=False, allow_null=True, help_text="A grouping string.")
    event_type = _event(required=False, allow_blank=True)
    response_event = _event(required=False, allow_blank=True, allow_null=True)
    response_topic = _event(required=False)
    # DRF's metaclass moves declared fields off the class, so `.data` stays the serializer's.
    data = _json_object(what="data")  # type: ignore[assignment]
    sub_tasks = _sub_task_ids()
    state = _json_object(what="state")


class TaskContextCreateSerializer(TaskContextUpdateSerializer):
    """POST /v1/memory/task-context. The seed's table says `event_type NOT NULL`, but its own
    tests store a task without one: it defaults to ""."""

    task_id = work_id_field(help_text="The worker's id for the task.")
    event_type = _event(required=False, allow_blank=True, default="")
    response_topic = _event(required=False, default=DEFAULT_RESPONSE_TOPIC)


# --- plans --------------------------------------------------------------------------------------


class PlanUpdateSerializer(StrictInputSerializer):
    """PUT /v1/memory/plans/{plan_id}: the fields sent replace the stored ones."""

    goal_event = _event(required=False, allow_blank=True)
    goal_data = _json_object(what="goal_data")
    status = serializers.ChoiceField(choices=PlanStatus.choices, required=False)
    state = _json_object(what="state")


class PlanCreateSerializer(PlanUpdateSerializer):
    """POST /v1/memory/plans. `goal_event` defaults to "" as the seed's tests create plans
    with a status only."""

    plan_id = work_id_field(help_text="The planner's id for the plan.")
    goal_event = _event(required=False, allow_blank=True, default="")
    status = serializers.ChoiceField(choices=PlanStatus.choices, default=PlanStatus.RUNNING)


class PlanListQuerySerializer(serializers.Serializer[Any]):
    status = serializers.ChoiceField(choices=[ACTIVE, *PlanStatus.values], required=False)
    limit = serializers.IntegerField(required=False, min_value=1)

    def validate_limit(self, value: int) -> int:
        return min(value, limit("PAGE_SIZE_MAX"))


# --- sessions -----------------------------------------------------------------------------------


class SessionCreateSerializer(StrictInputSerializer):
    """POST /v1/memory/sessions: the client's own `session_id` is the session's external key."""

    session_id = work_id_field(help_text="The client's id for the session.")
    agent_id = StrictCharField(
        required=False, allow_blank=True, allow_null=True, max_length=AGENT_ID_MAX_LENGTH
    )
    metadata = _json_object(what="metadata", limit_name="METADATA_MAX_BYTES")

    def validate_session_id(self, value: str) -> str:
        if len(value) > EXTERNAL_KEY_MAX_LENGTH:
            raise serializers.ValidationError(
                f"At most {EXTERNAL_KEY_MAX_LENGTH} characters.", code="max_length"
            )
        return value


class SessionUpdateSerializer(StrictInputSerializer):
    """PUT /v1/memory/sessions/{session_id}: touch `last_interaction` (now when not sent)."""

    last_interaction = serializers.DateTimeField(
        required=False, allow_null=True, default_timezone=dt.UTC
    )
    agent_id = StrictCharField(
        required=False, allow_blank=True, allow_null=True, max_length=AGENT_ID_MAX_LENGTH
    )
    metadata = _json_object(what="metadata", limit_name="METADATA_MAX_BYTES")


class SessionListQuerySerializer(serializers.Serializer[Any]):
    limit = serializers.IntegerField(required=False, min_value=1)

    def validate_limit(self, value: int) -> int:
        return min(value, limit("PAGE_SIZE_MAX"))
