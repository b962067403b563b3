"""`/sessions/{id}/summary/` (read or set the current summary) and `/summarize/` (force one)."""

from __future__ import annotations

from typing import Any

from celery import uuid as celery_task_id
from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from kombu.exceptions import OperationalError as BrokerUnavailable
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from memoryhub.accounts.api import TenantScopedAPIView
from memoryhub.accounts.selectors import memory_policy_for
from memoryhub.core.errors import Conflict, ResourceNotFound, ServiceUnavailable
from memoryhub.core.fields import StrictCharField
from memoryhub.core.limits import validate_text_size
from memoryhub.core.serializers import StrictInputSerializer
from sessions_app import selectors, summaries
from sessions_app.api.views import (
    MEMORY_OFF_BODY,
    MEMORY_OFF_RESPONSE,
    NOT_FOUND,
    SESSION_ID_PARAMETER,
)
from sessions_app.models import Summary
from sessions_app.tasks import summarize_session


class SummaryOutputSerializer(serializers.ModelSerializer[Summary]):
    # Null only in `?empty=ok`'s stand-in for a session without a summary.
    created_at = serializers.DateTimeField(read_only=True, allow_null=True)

    class Meta:
        model = Summary
        fields = ("text", "through_seq", "token_count", "model", "created_at")
        read_only_fields = fields


class SummaryInputSerializer(StrictInputSerializer):
    text = StrictCharField(trim_whitespace=False)

    def validate_text(self, value: str) -> str:
        # A summary stands in for older messages: the same size limit as a note.
        return validate_text_size(value, limit_name="NOTE_CONTENT_MAX_BYTES", what="text")


class SummarizeOutputSerializer(serializers.Serializer[Any]):
    task_id = serializers.CharField()


# What `?empty=ok` answers for a session without a summary: seed 004's GetSummary returns ""
# for none, so a client mapping that contract reads an empty text instead of handling a 404.
EMPTY_SUMMARY = {"text": "", "through_seq": 0, "token_count": 0, "model": "", "created_at": None}

EMPTY_PARAMETER = OpenApiParameter(
    "empty",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    enum=["ok"],
    description=(
        '`ok`: a session without a summary answers 200 with an empty summary (`text` "", '
        '`through_seq` 0, `model` "", `created_at` null) instead of 404 — seed 004\'s '
        "`GetSummary` contract (empty string if none). A missing session is still a 404."
    ),
)


class SessionSummaryView(TenantScopedAPIView):
    @extend_schema(
        operation_id="summary_get",
        summary="Get the session's current summary (the one with the highest through_seq)",
        parameters=[SESSION_ID_PARAMETER, EMPTY_PARAMETER],
        responses={
            200: OpenApiResponse(
                SummaryOutputSerializer,
                description="The current summary; with `?empty=ok` and none, an empty one.",
            ),
            400: OpenApiResponse(description="`empty` is not `ok`."),
            404: OpenApiResponse(
                description="No such session, or it has no summary yet (without `?empty=ok`)."
            ),
        },
    )
    def get(self, request: Request, session_id: str) -> Response:
        empty_ok = _empty_ok(request)
        session = selectors.session_get_for_tenant(tenant=self.tenant, session_id=session_id)
        summary = selectors.summary_current(tenant_id=self.tenant.pk, session_id=session.pk)
        if summary is None:
            if empty_ok:
                return Response(EMPTY_SUMMARY)
            raise ResourceNotFound("This session has no summary yet.")
        return Response(SummaryOutputSerializer(summary).data)

    @extend_schema(
        operation_id="summary_set",
        summary="Set the summary by hand; it covers every message so far",
        description=(
            "The new summary's through_seq is the session's last seq. Setting it again before "
            "anything is appended replaces that summary's text. With memory off for the agent "
            "nothing is stored (202, as for every write)."
        ),
        parameters=[SESSION_ID_PARAMETER],
        request=SummaryInputSerializer,
        responses={200: SummaryOutputSerializer, 202: MEMORY_OFF_RESPONSE, 404: NOT_FOUND},
    )
    def put(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get_for_tenant(tenant=self.tenant, session_id=session_id)
        data = SummaryInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        summary = summaries.summary_set(
            tenant=self.tenant, session_id=session.pk, text=data.validated_data["text"]
        )
        if summary is None:
            return Response(MEMORY_OFF_BODY, status=status.HTTP_202_ACCEPTED)
        return Response(SummaryOutputSerializer(summary).data)


def _empty_ok(request: Request) -> bool:
    value = request.query_params.get("empty")
    if value is None:
        return False
    if value != "ok":
        raise serializers.ValidationError(
            {"empty": [serializers.ErrorDetail('The only value is "ok".', code="invalid_choice")]}
        )
    return True


class SessionSummarizeView(TenantScopedAPIView):
    @extend_schema(
        operation_id="summary_force",
        summary="Summarize now, whatever the threshold (runs in the background)",
        description=(
            "Folds every message except the newest few into the next summary. Poll "
            "`GET …/summary/` for the result; with nothing new to fold, the summary stays as it "
            "is. With the task queue unavailable nothing is queued: 503 `service_unavailable`, "
            "and the client retries after `Retry-After` seconds."
        ),
        parameters=[SESSION_ID_PARAMETER],
        request=None,
        responses={
            202: SummarizeOutputSerializer,
            404: NOT_FOUND,
            409: OpenApiResponse(
                description=(
                    "`summarization_off`: the memory policy turns summaries off for this "
                    "session's agent (enable_summarization); nothing was queued."
                )
            ),
            503: OpenApiResponse(description="The task queue is unavailable; nothing was queued."),
        },
    )
    def post(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get_for_tenant(tenant=self.tenant, session_id=session_id)
        policy = memory_policy_for(tenant=self.tenant, agent_id=session.agent_id)
        if not policy.enable_summarization:
            raise Conflict(
                "Summarization is off in this agent's memory policy.", code="summarization_off"
            )
        task_id = celery_task_id()
        # After commit, like every enqueue; the id is chosen here so the answer can carry it.
        # Outside a transaction (a request) that is at once, so a broker failure lands here.
        # It is a 503, not a 202 left to the beat sweep: the sweep takes over only sessions
        # past their threshold, and never forces a summary, so it would not do what was asked.
        try:
            transaction.on_commit(
                lambda: summarize_session.apply_async(
                    args=(str(session.pk),), kwargs={"force": True}, task_id=task_id
                )
            )
        except BrokerUnavailable as error:
            raise ServiceUnavailable(
                "The task queue is unavailable; nothing was queued. "
                "Retry after Retry-After seconds."
            ) from error
        return Response({"task_id": task_id}, status=status.HTTP_202_ACCEPTED)
