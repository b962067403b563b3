"""Seed 002's Memory Service API (`/v1/memory/...`), served over MemoryHub's own services.

The seed's SDK sends its token as `Authorization: Bearer …`: here that is a MemoryHub API key
(or a person-bound token), so the tenant is the key's, exactly as on /api/v1/. The seed's JWT
also carries a `user_id`, which narrows its plans and sessions: here that person is the one a
person-bound token is bound to, else the `X-User-Id` header, else `seed002:default`.

Not in the OpenAPI schema (/api/schema/): this is another platform's contract, documented by
that platform's SDK and pinned by tests/compat, which replay the seed's own test cases over
HTTP. MemoryHub's schema describes MemoryHub's API, and the clients generated from it should
not grow a second API for the same rows.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from memoryhub.accounts.api import TenantScopedAPIView
from memoryhub.compat.seed002 import selectors, services
from memoryhub.compat.seed002.models import TaskPlanRef
from memoryhub.compat.seed002.serializers import (
    PlanCreateSerializer,
    PlanListQuerySerializer,
    PlanUpdateSerializer,
    SessionCreateSerializer,
    SessionListQuerySerializer,
    SessionUpdateSerializer,
    TaskContextCreateSerializer,
    TaskContextUpdateSerializer,
)
from memoryhub.core.errors import ResourceNotFound, json_error_response
from memoryhub.core.limits import limit
from sessions_app.api.etags import work_id_from_path
from sessions_app.models import Plan, Session, TaskContext

USER_HEADER = "X-User-Id"
DEFAULT_PERSON = "seed002:default"

_time = serializers.DateTimeField()


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else _time.to_representation(value)


def _plan_ref(task: TaskContext) -> str | None:
    if task.plan is not None:
        return task.plan.plan_id
    try:
        return task.seed002_plan_ref.plan_id
    except TaskPlanRef.DoesNotExist:
        return None


def task_context_answer(task: TaskContext) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "plan_id": _plan_ref(task),
        "event_type": task.event_type,
        "response_event": task.response_event,
        "response_topic": task.response_topic,
        "data": task.data,
        # Prefetched by the selector or the service: no query per task.
        "sub_tasks": [sub_task.subtask_id for sub_task in task.sub_tasks.all()],
        "state": task.state,
        "created_at": _iso(task.created_at),
        "updated_at": _iso(task.updated_at),
    }


def plan_answer(plan: Plan, *, with_state: bool) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "plan_id": plan.plan_id,
        "goal_event": plan.goal_event,
        "goal_data": plan.goal_data,
        "status": plan.status,
    }
    # The seed lists plans without their state machine and shows it on the plan itself.
    if with_state:
        answer["state"] = plan.state
    answer["created_at"] = _iso(plan.created_at)
    answer["updated_at"] = _iso(plan.updated_at)
    return answer


def session_answer(session: Session) -> dict[str, Any]:
    return {
        "session_id": session.external_key,
        "agent_id": session.agent_id,
        "created_at": _iso(session.created_at),
        "last_interaction": _iso(session.last_active_at),
        "metadata": session.metadata,
    }


def _valid(serializer_class: type[serializers.Serializer[Any]], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _page_size(value: int | None) -> int:
    return value if value is not None else limit("PAGE_SIZE_DEFAULT")


@extend_schema(exclude=True)
class Seed002View(TenantScopedAPIView):
    """What every seed-002 endpoint shares: the person its plans and sessions belong to."""

    def person(self) -> str:
        bound = getattr(self.tenant, "person", None)
        named = self.request.headers.get(USER_HEADER)
        if bound is not None:
            own: str = bound.end_user.external_id
            # A token bound to one person names no other: the same 404 as another's id.
            if named is not None and named != own:
                raise ResourceNotFound("No such person.")
            return own
        return named or DEFAULT_PERSON


# --- task contexts ------------------------------------------------------------------------------


def _task_id(raw: str) -> str:
    return work_id_from_path(raw, what="task context")


@extend_schema(exclude=True)
class TaskContextsView(Seed002View):
    def post(self, request: Request) -> Response:
        fields = _valid(TaskContextCreateSerializer, request.data)
        task = services.task_context_store(tenant=self.tenant, **fields)
        return Response(
            {"task_id": task.task_id, "created_at": _iso(task.created_at)},
            status=status.HTTP_201_CREATED,
        )


@extend_schema(exclude=True)
class TaskContextView(Seed002View):
    def get(self, request: Request, task_id: str) -> Response:
        task = selectors.task_context_get(tenant=self.tenant, task_id=_task_id(task_id))
        return Response(task_context_answer(task))

    def put(self, request: Request, task_id: str) -> Response:
        key = _task_id(task_id)
        selectors.task_context_get(tenant=self.tenant, task_id=key)  # 404 before 400
        changes = _valid(TaskContextUpdateSerializer, request.data)
        services.task_context_update(tenant=self.tenant, task_id=key, changes=changes)
        task = selectors.task_context_get(tenant=self.tenant, task_id=key)
        return Response(task_context_answer(task))

    def delete(self, request: Request, task_id: str) -> Response:
        services.task_context_remove(tenant=self.tenant, task_id=_task_id(task_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(exclude=True)
class TaskContextBySubtaskView(Seed002View):
    def get(self, request: Request, subtask_id: str) -> Response:
        task = selectors.task_context_by_subtask(
            tenant=self.tenant, subtask_id=work_id_from_path(subtask_id, what="sub-task")
        )
        return Response(task_context_answer(task))


# --- plans --------------------------------------------------------------------------------------


def _plan_id(raw: str) -> str:
    return work_id_from_path(raw, what="plan")


@extend_schema(exclude=True)
class PlansView(Seed002View):
    def get(self, request: Request) -> Response:
        query = _valid(PlanListQuerySerializer, request.query_params)
        plans = selectors.plan_list(
            tenant=self.tenant,
            person=self.person(),
            status=query.get("status"),
            limit=_page_size(query.get("limit")),
        )
        return Response(
            {"plans": [plan_answer(plan, with_state=False) for plan in plans], "count": len(plans)}
        )

    def post(self, request: Request) -> Response:
        fields = _valid(PlanCreateSerializer, request.data)
        plan = services.plan_store(tenant=self.tenant, person=self.person(), **fields)
        return Response(plan_answer(plan, with_state=True), status=status.HTTP_201_CREATED)


@extend_schema(exclude=True)
class PlanView(Seed002View):
    def get(self, request: Request, plan_id: str) -> Response:
        plan = selectors.plan_get(
            tenant=self.tenant, person=self.person(), plan_id=_plan_id(plan_id)
        )
        return Response(plan_answer(plan, with_state=True))

    def put(self, request: Request, plan_id: str) -> Response:
        key, person = _plan_id(plan_id), self.person()
        selectors.plan_get(tenant=self.tenant, person=person, plan_id=key)  # 404 before 400
        changes = _valid(PlanUpdateSerializer, request.data)
        plan = services.plan_update(tenant=self.tenant, person=person, plan_id=key, changes=changes)
        return Response(plan_answer(plan, with_state=True))

    def delete(self, request: Request, plan_id: str) -> Response:
        plan = selectors.plan_get(
            tenant=self.tenant, person=self.person(), plan_id=_plan_id(plan_id)
        )
        services.plan_remove(tenant=self.tenant, plan=plan, actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- sessions -----------------------------------------------------------------------------------


def _session_id(raw: str) -> str:
    return work_id_from_path(raw, what="session")


@extend_schema(exclude=True)
class SessionsView(Seed002View):
    def get(self, request: Request) -> Response:
        query = _valid(SessionListQuerySerializer, request.query_params)
        sessions = selectors.session_list(
            tenant=self.tenant, person=self.person(), limit=_page_size(query.get("limit"))
        )
        return Response(
            {"sessions": [session_answer(item) for item in sessions], "count": len(sessions)}
        )

    def post(self, request: Request) -> Response:
        fields = _valid(SessionCreateSerializer, request.data)
        session, created = services.session_store(
            tenant=self.tenant, person=self.person(), **fields
        )
        return Response(
            session_answer(session),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


@extend_schema(exclude=True)
class SessionView(Seed002View):
    def get(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get(
            tenant=self.tenant, person=self.person(), session_id=_session_id(session_id)
        )
        return Response(session_answer(session))

    def put(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get(
            tenant=self.tenant, person=self.person(), session_id=_session_id(session_id)
        )
        changes = _valid(SessionUpdateSerializer, request.data)
        session = services.session_touch(session=session, **changes)
        return Response(session_answer(session))

    def delete(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get(
            tenant=self.tenant, person=self.person(), session_id=_session_id(session_id)
        )
        services.session_remove(session=session, actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


@csrf_exempt  # a bot's POST to a wrong path is a 404 like its GET, not a CSRF page
def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Unknown paths under /v1/memory/ answer in the API's JSON shape, not Django's page."""
    return json_error_response(status_code=404, code="not_found", message="Not found.")
