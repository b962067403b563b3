"""Task contexts (seed 002): what a worker parks while sub-agents work for it."""

from __future__ import annotations

from typing import Any

import django_filters  # type: ignore[import-untyped]  # ships no type hints
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from memoryhub.accounts.api import (
    LimitCursorPagination,
    TenantScopedAPIView,
    TenantScopedGenericViewSet,
)
from memoryhub.accounts.idempotency import (
    IDEMPOTENCY_KEY_ERASED_RESPONSE,
    IDEMPOTENCY_KEY_PARAMETER,
    Performed,
    idempotency_key_from,
    idempotent_response,
    request_fingerprint,
    run_idempotent,
)
from sessions_app import task_selectors, task_services
from sessions_app.api.etags import (
    ETAG_HEADER,
    IF_MATCH_OPTIONAL,
    IF_MATCH_REQUIRED,
    PRECONDITION_FAILED,
    PRECONDITION_REQUIRED,
    if_match,
    with_etag,
    work_id_from_path,
)
from sessions_app.api.serializers import (
    TaskContextCreateInputSerializer,
    TaskContextOutputSerializer,
    TaskContextPatchInputSerializer,
    TaskContextPatchOutputSerializer,
    TaskContextReplaceInputSerializer,
)
from sessions_app.models import TaskContext

TASK_ID_PARAMETER = OpenApiParameter(
    "task_id", OpenApiTypes.STR, OpenApiParameter.PATH, description="Your id for the task."
)
SUBTASK_ID_PARAMETER = OpenApiParameter(
    "subtask_id", OpenApiTypes.STR, OpenApiParameter.PATH, description="A sub-task's id."
)
NOT_FOUND = OpenApiResponse(description="No such task context for this API key's tenant.")
SUB_TASK_CONFLICT = OpenApiResponse(
    description=(
        "A sub-task is attached to another task (`sub_task_conflict`), or the task would wait "
        "for more sub-tasks than allowed (`sub_task_limit`)."
    )
)


class TaskContextFilter(django_filters.FilterSet):
    session_id = django_filters.UUIDFilter(field_name="session_id")
    plan_id = django_filters.CharFilter(method="filter_plan_id", help_text="Your id of the plan.")

    class Meta:
        model = TaskContext
        fields = ["session_id", "plan_id"]

    def filter_plan_id(
        self, queryset: QuerySet[TaskContext], name: str, value: str
    ) -> QuerySet[TaskContext]:
        return queryset.filter(plan__plan_id=value)


class TaskContextPagination(LimitCursorPagination):
    ordering = ("-created_at", "-id")


def _task_id(raw: str) -> str:
    return work_id_from_path(raw, what="task context")


@extend_schema_view(
    list=extend_schema(
        operation_id="task_contexts_list",
        summary="List task contexts, newest first (`?session_id=`, `?plan_id=`)",
        responses=TaskContextOutputSerializer(many=True),
    ),
    create=extend_schema(
        operation_id="task_contexts_create",
        summary="Store a task context with the sub-tasks it waits for",
        description=(
            "A task_id the tenant already has is a 409 (`duplicate_task_id`); so is a sub-task "
            "attached to another task (`sub_task_conflict`). `Idempotency-Key` makes a retried "
            "store replay its first answer."
        ),
        parameters=[IDEMPOTENCY_KEY_PARAMETER, ETAG_HEADER],
        request=TaskContextCreateInputSerializer,
        responses={
            201: TaskContextOutputSerializer,
            409: OpenApiResponse(
                description="The task_id exists, or a sub-task belongs to another task."
            ),
            410: IDEMPOTENCY_KEY_ERASED_RESPONSE,
        },
        examples=[
            OpenApiExample(
                "A research task",
                value={
                    "task_id": "task-123",
                    "plan_id": None,
                    "event_type": "research.requested",
                    "response_event": "research.completed",
                    "data": {"query": "AI trends"},
                    "sub_tasks": ["sub-1", "sub-2"],
                },
                request_only=True,
            )
        ],
    ),
    retrieve=extend_schema(
        operation_id="task_contexts_get",
        summary="Get a task context",
        parameters=[TASK_ID_PARAMETER, ETAG_HEADER],
        responses={200: TaskContextOutputSerializer, 404: NOT_FOUND},
    ),
    update=extend_schema(
        operation_id="task_contexts_replace",
        summary="Replace a task context, sub-task list included (If-Match required)",
        parameters=[TASK_ID_PARAMETER, IF_MATCH_REQUIRED, ETAG_HEADER],
        request=TaskContextReplaceInputSerializer,
        responses={
            200: TaskContextOutputSerializer,
            404: NOT_FOUND,
            409: SUB_TASK_CONFLICT,
            412: PRECONDITION_FAILED,
            428: PRECONDITION_REQUIRED,
        },
    ),
    partial_update=extend_schema(
        operation_id="task_contexts_update",
        summary="Add and remove sub-tasks; merge into state and data",
        description=(
            "Applied atomically under the task's lock, so no If-Match is needed and concurrent "
            "result handlers never lose each other's change: `remove_sub_tasks` then "
            "`add_sub_tasks` (ids already absent or present are skipped, so a retry is "
            "harmless); `state` and `data` are JSON merge patches (RFC 7396: the keys you send "
            "are set, `null` removes one). The answer lists what this request really removed "
            "and added, and the sub-tasks left: `removed_sub_tasks` non-empty with `sub_tasks` "
            "empty means this request removed the last one — exactly one handler sees that, and "
            "completes the task. If-Match is optional (412 when stale)."
        ),
        parameters=[TASK_ID_PARAMETER, IF_MATCH_OPTIONAL, ETAG_HEADER],
        request=TaskContextPatchInputSerializer,
        responses={
            200: TaskContextPatchOutputSerializer,
            404: NOT_FOUND,
            409: SUB_TASK_CONFLICT,
            412: PRECONDITION_FAILED,
        },
        examples=[
            OpenApiExample(
                "A sub-task's result arrived",
                value={"remove_sub_tasks": ["sub-1"], "state": {"results": {"sub-1": "…"}}},
                request_only=True,
            ),
            OpenApiExample(
                "Delegated two more", value={"add_sub_tasks": ["sub-3", "sub-4"]}, request_only=True
            ),
        ],
    ),
    destroy=extend_schema(
        operation_id="task_contexts_delete",
        summary="Delete a task context (the task is done)",
        description="A second DELETE is a 404: of several handlers, exactly one deletes it.",
        parameters=[TASK_ID_PARAMETER, IF_MATCH_OPTIONAL],
        responses={204: None, 404: NOT_FOUND, 412: PRECONDITION_FAILED},
    ),
)
class TaskContextViewSet(TenantScopedGenericViewSet):
    queryset = TaskContext.objects.all()
    serializer_class = TaskContextOutputSerializer
    pagination_class = TaskContextPagination
    filterset_class = TaskContextFilter
    lookup_url_kwarg = "task_id"

    def list(self, request: Request) -> Response:
        tasks = self.filter_queryset(
            task_selectors.task_context_list_for_tenant(tenant=self.tenant)
        )
        page = self.paginate_queryset(tasks)
        return self.get_paginated_response(TaskContextOutputSerializer(page, many=True).data)

    def create(self, request: Request) -> Response:
        data = TaskContextCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)

        def perform() -> Performed:
            task = task_services.task_context_create(tenant=self.tenant, **data.validated_data)
            # The stored response goes with the task's person (its plan's, else its session's)
            # and with its session.
            owner = (
                task.plan.end_user_id
                if task.plan
                else task.session.end_user_id
                if task.session
                else None
            )
            return Performed(
                status.HTTP_201_CREATED,
                TaskContextOutputSerializer(task).data,
                owner,
                task.session_id,
            )

        outcome = run_idempotent(
            tenant=self.tenant,
            key=idempotency_key_from(request),
            scope="task_contexts.create",
            fingerprint=request_fingerprint(request.data),
            perform=perform,
        )
        response = idempotent_response(outcome)
        # A replay of a write deleted since (410) names no resource, so no ETag.
        return with_etag(response, outcome.body["etag"]) if "etag" in outcome.body else response

    def retrieve(self, request: Request, task_id: str) -> Response:
        task = task_selectors.task_context_get_for_tenant(
            tenant=self.tenant, task_id=_task_id(task_id)
        )
        return with_etag(Response(TaskContextOutputSerializer(task).data), task.etag)

    def update(self, request: Request, task_id: str) -> Response:
        key = _task_id(task_id)
        task_selectors.task_context_get_for_tenant(tenant=self.tenant, task_id=key)  # 404 first
        data = TaskContextReplaceInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        task = task_services.task_context_replace(
            tenant=self.tenant, task_id=key, if_match=if_match(request), **data.validated_data
        )
        return with_etag(Response(TaskContextOutputSerializer(task).data), task.etag)

    def partial_update(self, request: Request, task_id: str) -> Response:
        key = _task_id(task_id)
        task_selectors.task_context_get_for_tenant(tenant=self.tenant, task_id=key)  # 404 first
        data = TaskContextPatchInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields: dict[str, Any] = dict(data.validated_data)
        patched = task_services.task_context_patch(
            tenant=self.tenant,
            task_id=key,
            if_match=if_match(request),
            add_sub_tasks=fields.get("add_sub_tasks", []),
            remove_sub_tasks=fields.get("remove_sub_tasks", []),
            state_patch=fields.get("state"),
            data_patch=fields.get("data"),
            event_type=fields.get("event_type"),
            response_event=fields.get("response_event"),
            response_topic=fields.get("response_topic"),
        )
        body = {
            **TaskContextOutputSerializer(patched.task).data,
            "added_sub_tasks": patched.added_sub_tasks,
            "removed_sub_tasks": patched.removed_sub_tasks,
        }
        return with_etag(Response(body), patched.task.etag)

    def destroy(self, request: Request, task_id: str) -> Response:
        task_services.task_context_delete(
            tenant=self.tenant, task_id=_task_id(task_id), if_match=if_match(request)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class TaskContextBySubtaskView(TenantScopedAPIView):
    @extend_schema(
        operation_id="task_contexts_by_subtask",
        summary="Find the task that waits for a sub-task",
        description="One indexed lookup. 404 once the sub-task was removed (its result handled).",
        parameters=[SUBTASK_ID_PARAMETER, ETAG_HEADER],
        responses={200: TaskContextOutputSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, subtask_id: str) -> Response:
        task = task_selectors.task_context_by_subtask(
            tenant=self.tenant, subtask_id=work_id_from_path(subtask_id, what="sub-task")
        )
        return with_etag(Response(TaskContextOutputSerializer(task).data), task.etag)
