"""Plans (seed 002): a planner's state machine, kept between the events that drive it."""

from __future__ import annotations

from typing import Any

import django_filters  # type: ignore[import-untyped]  # ships no type hints
from django.db.models import F, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from memoryhub.accounts.api import LimitCursorPagination, TenantScopedGenericViewSet
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
    PlanCreateInputSerializer,
    PlanOutputSerializer,
    PlanPatchInputSerializer,
    PlanReplaceInputSerializer,
)
from sessions_app.models import Plan, PlanStatus

ACTIVE = "active"

PLAN_ID_PARAMETER = OpenApiParameter(
    "plan_id", OpenApiTypes.STR, OpenApiParameter.PATH, description="Your id for the plan."
)
NOT_FOUND = OpenApiResponse(description="No such plan for this API key's tenant.")
TRANSITION_CONFLICT = OpenApiResponse(
    description="A status change a finished plan cannot make (`invalid_status_transition`)."
)


class PlanFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(
        choices=[(ACTIVE, "Active (running)"), *PlanStatus.choices],
        method="filter_status",
        help_text="`active` is the same as `running`.",
    )
    user_id = django_filters.CharFilter(
        method="filter_user_id", help_text="The bot's id of the person."
    )
    session_id = django_filters.UUIDFilter(field_name="session_id")

    class Meta:
        model = Plan
        fields = ["status", "user_id", "session_id"]

    def filter_status(self, queryset: QuerySet[Plan], name: str, value: str) -> QuerySet[Plan]:
        return queryset.filter(status=PlanStatus.RUNNING if value == ACTIVE else value)

    def filter_user_id(self, queryset: QuerySet[Plan], name: str, value: str) -> QuerySet[Plan]:
        # Naming the person's tenant lets the database use the (tenant, external_id) index.
        return queryset.filter(end_user__tenant_id=F("tenant_id"), end_user__external_id=value)


class PlanPagination(LimitCursorPagination):
    # Newest first; the id breaks ties so the order is total.
    ordering = ("-created_at", "-id")


@extend_schema_view(
    list=extend_schema(
        operation_id="plans_list",
        summary="List plans, newest first (`?status=active` for the running ones)",
        responses=PlanOutputSerializer(many=True),
    ),
    create=extend_schema(
        operation_id="plans_create",
        summary="Create a plan",
        description=(
            "The plan belongs to a person: `user_id`, or the person of `session_id`. A plan_id "
            "the tenant already has is a 409 (`duplicate_plan_id`). `Idempotency-Key` makes a "
            "retried create replay its first answer."
        ),
        parameters=[IDEMPOTENCY_KEY_PARAMETER, ETAG_HEADER],
        request=PlanCreateInputSerializer,
        responses={
            201: PlanOutputSerializer,
            409: OpenApiResponse(description="The plan_id exists (`duplicate_plan_id`)."),
            410: IDEMPOTENCY_KEY_ERASED_RESPONSE,
        },
    ),
    retrieve=extend_schema(
        operation_id="plans_get",
        summary="Get a plan",
        parameters=[PLAN_ID_PARAMETER, ETAG_HEADER],
        responses={200: PlanOutputSerializer, 404: NOT_FOUND},
    ),
    update=extend_schema(
        operation_id="plans_replace",
        summary="Replace a plan's goal, status and state (If-Match required)",
        parameters=[PLAN_ID_PARAMETER, IF_MATCH_REQUIRED, ETAG_HEADER],
        request=PlanReplaceInputSerializer,
        responses={
            200: PlanOutputSerializer,
            404: NOT_FOUND,
            409: TRANSITION_CONFLICT,
            412: PRECONDITION_FAILED,
            428: PRECONDITION_REQUIRED,
        },
    ),
    partial_update=extend_schema(
        operation_id="plans_update",
        summary="Change a plan's status; merge into its state and goal data",
        description=(
            "Applied atomically: `state` and `goal_data` are JSON merge patches (RFC 7396: "
            "the keys you send are set, `null` removes one, the rest stay), so two planners "
            "writing different keys both keep theirs. `status` moves only from running to "
            "completed, failed or cancelled. If-Match is optional (412 when stale)."
        ),
        parameters=[PLAN_ID_PARAMETER, IF_MATCH_OPTIONAL, ETAG_HEADER],
        request=PlanPatchInputSerializer,
        responses={
            200: PlanOutputSerializer,
            404: NOT_FOUND,
            409: TRANSITION_CONFLICT,
            412: PRECONDITION_FAILED,
        },
    ),
    destroy=extend_schema(
        operation_id="plans_delete",
        summary="Delete a plan with its task contexts (audited)",
        parameters=[PLAN_ID_PARAMETER, IF_MATCH_OPTIONAL],
        responses={204: None, 404: NOT_FOUND, 412: PRECONDITION_FAILED},
    ),
)
class PlanViewSet(TenantScopedGenericViewSet):
    queryset = Plan.objects.all()
    serializer_class = PlanOutputSerializer
    pagination_class = PlanPagination
    filterset_class = PlanFilter
    lookup_url_kwarg = "plan_id"

    def list(self, request: Request) -> Response:
        plans = self.filter_queryset(task_selectors.plan_list_for_tenant(tenant=self.tenant))
        page = self.paginate_queryset(plans)
        return self.get_paginated_response(PlanOutputSerializer(page, many=True).data)

    def create(self, request: Request) -> Response:
        data = PlanCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)

        def perform() -> Performed:
            plan = task_services.plan_create(tenant=self.tenant, **data.validated_data)
            return Performed(
                status.HTTP_201_CREATED,
                PlanOutputSerializer(plan).data,
                plan.end_user_id,
                plan.session_id,
            )

        outcome = run_idempotent(
            tenant=self.tenant,
            key=idempotency_key_from(request),
            scope="plans.create",
            fingerprint=request_fingerprint(request.data),
            perform=perform,
        )
        response = idempotent_response(outcome)
        # A replay of a write deleted since (410) names no resource, so no ETag.
        return with_etag(response, outcome.body["etag"]) if "etag" in outcome.body else response

    def retrieve(self, request: Request, plan_id: str) -> Response:
        plan = task_selectors.plan_get_for_tenant(
            tenant=self.tenant, plan_id=work_id_from_path(plan_id, what="plan")
        )
        return with_etag(Response(PlanOutputSerializer(plan).data), plan.etag)

    def update(self, request: Request, plan_id: str) -> Response:
        key = work_id_from_path(plan_id, what="plan")
        task_selectors.plan_get_for_tenant(tenant=self.tenant, plan_id=key)  # 404 before 400
        data = PlanReplaceInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        plan = task_services.plan_replace(
            tenant=self.tenant, plan_id=key, if_match=if_match(request), **data.validated_data
        )
        return with_etag(Response(PlanOutputSerializer(plan).data), plan.etag)

    def partial_update(self, request: Request, plan_id: str) -> Response:
        key = work_id_from_path(plan_id, what="plan")
        task_selectors.plan_get_for_tenant(tenant=self.tenant, plan_id=key)  # 404 before 400
        data = PlanPatchInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields: dict[str, Any] = dict(data.validated_data)
        plan = task_services.plan_patch(
            tenant=self.tenant,
            plan_id=key,
            if_match=if_match(request),
            goal_event=fields.get("goal_event"),
            goal_data_patch=fields.get("goal_data"),
            status=fields.get("status"),
            state_patch=fields.get("state"),
        )
        return with_etag(Response(PlanOutputSerializer(plan).data), plan.etag)

    def destroy(self, request: Request, plan_id: str) -> Response:
        task_services.plan_delete(
            tenant=self.tenant,
            plan_id=work_id_from_path(plan_id, what="plan"),
            if_match=if_match(request),
            actor=self.actor,
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
