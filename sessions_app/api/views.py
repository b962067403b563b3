"""Conversation-memory endpoints: each translates a request into one selector or service call."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
)
from rest_framework import exceptions, serializers, status
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
from memoryhub.accounts.models import END_USER_ID_MAX_LENGTH
from memoryhub.accounts.redaction import rows_redacted, search_redactor
from memoryhub.accounts.selectors import memory_policy_for
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.fields import StrictCharField, plain_search
from memoryhub.core.limits import limit
from memoryhub.core.search import MAX_QUERY_CHARS, EmptySearchQuery
from sessions_app import recall, selectors, services
from sessions_app.api.filters import SessionFilter
from sessions_app.api.serializers import (
    MessageBatchInputSerializer,
    MessageBatchOutputSerializer,
    MessageInputSerializer,
    MessageListQuerySerializer,
    MessageOutputSerializer,
    MessagePageSerializer,
    SessionCreateInputSerializer,
    SessionOutputSerializer,
    SessionPatchInputSerializer,
    StateEntryOutputSerializer,
    StateEntryWriteOutputSerializer,
    StateListSerializer,
    StateValueInputSerializer,
    last_only_query,
    message_data,
    simple_message_input,
)
from sessions_app.models import STATE_KEY_MAX_LENGTH, MessageRole, Session

SESSION_ID_PARAMETER = OpenApiParameter(
    "session_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The session's id."
)
STATE_KEY_PARAMETER = OpenApiParameter(
    "key", OpenApiTypes.STR, OpenApiParameter.PATH, description="A state key."
)
NOT_FOUND = OpenApiResponse(description="No such session for this API key's tenant.")
_STATE_KEY = re.compile(rf"^[^\x00-\x1f\x7f]{{1,{STATE_KEY_MAX_LENGTH}}}$")


def _session_uuid(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise ResourceNotFound("No such session.") from None


class SessionPagination(LimitCursorPagination):
    # Newest activity first; the id breaks ties so the order is total.
    ordering = ("-last_active_at", "-id")


@extend_schema_view(
    list=extend_schema(
        operation_id="sessions_list",
        summary="List sessions, newest activity first",
        responses=SessionOutputSerializer(many=True),
    ),
    create=extend_schema(
        operation_id="sessions_create",
        summary="Create a session, or get the one holding external_key",
        description=(
            "Send an `Idempotency-Key` header to make a retried create safe when you do not use "
            "an external_key."
        ),
        parameters=[IDEMPOTENCY_KEY_PARAMETER],
        request=SessionCreateInputSerializer,
        responses={
            200: OpenApiResponse(SessionOutputSerializer, description="Existing session"),
            201: OpenApiResponse(SessionOutputSerializer, description="New session"),
            409: OpenApiResponse(description="external_key belongs to another user's session"),
            410: IDEMPOTENCY_KEY_ERASED_RESPONSE,
        },
    ),
    retrieve=extend_schema(
        operation_id="sessions_get",
        summary="Get a session",
        parameters=[SESSION_ID_PARAMETER],
        responses={200: SessionOutputSerializer, 404: NOT_FOUND},
    ),
    partial_update=extend_schema(
        operation_id="sessions_update",
        summary="Update a session's agent, external key or metadata",
        parameters=[SESSION_ID_PARAMETER],
        request=SessionPatchInputSerializer,
        responses={200: SessionOutputSerializer, 404: NOT_FOUND, 409: OpenApiResponse()},
    ),
    destroy=extend_schema(
        operation_id="sessions_delete",
        summary="Delete a session with its messages and state",
        parameters=[SESSION_ID_PARAMETER],
        responses={204: None, 404: NOT_FOUND},
    ),
)
class SessionViewSet(TenantScopedGenericViewSet):
    queryset = Session.objects.all()
    serializer_class = SessionOutputSerializer
    pagination_class = SessionPagination
    filterset_class = SessionFilter
    lookup_url_kwarg = "session_id"

    def list(self, request: Request) -> Response:
        sessions = self.filter_queryset(selectors.session_list_for_tenant(tenant=self.tenant))
        page = self.paginate_queryset(sessions)
        return self.get_paginated_response(SessionOutputSerializer(page, many=True).data)

    def create(self, request: Request) -> Response:
        data = SessionCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)

        def perform() -> Performed:
            session, created = services.session_create_or_get(
                tenant=self.tenant, **data.validated_data
            )
            code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
            return Performed(
                code, SessionOutputSerializer(session).data, session.end_user_id, session.pk
            )

        return idempotent_response(
            run_idempotent(
                tenant=self.tenant,
                key=idempotency_key_from(request),
                scope="sessions.create",
                fingerprint=request_fingerprint(request.data),
                perform=perform,
            )
        )

    def retrieve(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get_for_tenant(tenant=self.tenant, session_id=session_id)
        return Response(SessionOutputSerializer(session).data)

    def partial_update(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get_for_tenant(tenant=self.tenant, session_id=session_id)
        data = SessionPatchInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        clear_external_key = "external_key" in fields and fields["external_key"] is None
        session = services.session_update(
            session=session,
            agent_id=fields.get("agent_id"),
            external_key=fields.get("external_key"),
            clear_external_key=clear_external_key,
            metadata=fields.get("metadata"),
        )
        return Response(SessionOutputSerializer(session).data)

    def destroy(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get_for_tenant(tenant=self.tenant, session_id=session_id)
        services.session_delete(session=session, actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


# Memory off for the session's agent (its memory policy): the write is accepted and dropped,
# so a bot needs no special case (seed 004: memory off never errors).
MEMORY_OFF_BODY = {
    "stored": False,
    "reason": "memory_off",
    "detail": "Memory is off for this agent in the tenant's memory policy; nothing was stored.",
}


class MemoryOffSerializer(serializers.Serializer[Any]):
    stored = serializers.BooleanField()
    reason = serializers.CharField()
    detail = serializers.CharField()


MEMORY_OFF_RESPONSE = OpenApiResponse(
    MemoryOffSerializer, description="Memory is off for this agent: accepted, nothing stored."
)

MESSAGE_APPEND_REQUEST = PolymorphicProxySerializer(
    component_name="MessageAppendRequest",
    serializers=[MessageInputSerializer, MessageBatchInputSerializer],
    resource_type_field_name=None,
)
MESSAGE_APPEND_RESPONSE = PolymorphicProxySerializer(
    component_name="MessageAppendResponse",
    serializers=[MessageOutputSerializer, MessageBatchOutputSerializer],
    resource_type_field_name=None,
)


class SessionMessagesView(TenantScopedAPIView):
    @extend_schema(
        operation_id="messages_list",
        summary="Read the last N messages, or the messages after a seq",
        parameters=[SESSION_ID_PARAMETER, MessageListQuerySerializer],
        responses={200: MessagePageSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, session_id: str) -> Response:
        params = last_only_query(request.query_params)
        if params is None:
            query = MessageListQuerySerializer(data=request.query_params)
            query.is_valid(raise_exception=True)
            params = query.validated_data
        page = selectors.message_page_for_tenant(
            tenant=self.tenant,
            session_id=session_id,
            last=params.get("last"),
            after_seq=params.get("after_seq", 0 if "limit" in params else None),
            limit=params.get("limit", limit("PAGE_SIZE_DEFAULT")),
        )
        return Response(
            {
                "results": [message_data(message) for message in page.messages],
                "has_more": page.has_more,
                "last_seq": page.last_seq,
            }
        )

    @extend_schema(
        operation_id="messages_append",
        summary="Append one message, or a batch as {'messages': [...]}",
        description=(
            "Seqs are assigned in order, gapless, under concurrent appends. Send an "
            "`Idempotency-Key` header to make retries safe: a replay returns the first response "
            "and writes nothing; the same key with a different body is a 422. A message may "
            "carry its own `created_at` (a backfill): times never run backwards in seq order."
        ),
        parameters=[SESSION_ID_PARAMETER, IDEMPOTENCY_KEY_PARAMETER],
        request=MESSAGE_APPEND_REQUEST,
        responses={
            201: MESSAGE_APPEND_RESPONSE,
            202: MEMORY_OFF_RESPONSE,
            404: NOT_FOUND,
            410: IDEMPOTENCY_KEY_ERASED_RESPONSE,
            422: OpenApiResponse(),
        },
        examples=[
            OpenApiExample("One message", value={"role": "user", "content": "Hi!"}),
            OpenApiExample(
                "A batch",
                value={
                    "messages": [
                        {"role": "user", "content": "What's the weather?"},
                        {"role": "assistant", "content": "Sunny."},
                    ]
                },
            ),
        ],
    )
    def post(self, request: Request, session_id: str) -> Response:
        session_pk = _session_uuid(session_id)
        key = idempotency_key_from(request)
        is_batch = isinstance(request.data, dict) and "messages" in request.data
        items = self._validated_messages(request.data, is_batch=is_batch)
        inputs = services.message_inputs_counted(
            messages=[services.MessageInput(**item) for item in items]
        )

        def perform() -> Performed:
            # Only a stored (idempotent) response needs to know whose messages it quotes; it
            # names the person, so they are held before the append locks the session (the
            # order an erasure locks in).
            owner = (
                services.session_owner_hold(tenant=self.tenant, session_id=session_pk)
                if key
                else None
            )
            created = services.message_append_batch(
                tenant=self.tenant, session_id=session_pk, messages=inputs
            )
            if not created:
                return Performed(status.HTTP_202_ACCEPTED, MEMORY_OFF_BODY, None, session_pk)
            rendered = [message_data(message) for message in created]
            body = {"messages": rendered} if is_batch else rendered[0]
            return Performed(status.HTTP_201_CREATED, body, owner, session_pk)

        try:
            outcome = run_idempotent(
                tenant=self.tenant,
                key=key,
                scope=services.MESSAGE_APPEND_SCOPE,
                # Only a keyed append is compared with a stored request: no hash of the body
                # for the usual append without a key.
                fingerprint=(
                    request_fingerprint({"session": str(session_pk), "body": request.data})
                    if key
                    else ""
                ),
                perform=perform,
            )
        except services.MessageInputInvalid as error:
            if not is_batch:
                raise
            # Named like the serializer names a bad message of a batch: messages → index → field.
            raise exceptions.ValidationError(
                {
                    "messages": {
                        str(error.index): {
                            error.field: [exceptions.ErrorDetail(error.message, error.code)]
                        }
                    }
                }
            ) from None
        return idempotent_response(outcome)

    @staticmethod
    def _validated_messages(data: Any, *, is_batch: bool) -> list[dict[str, Any]]:
        if not isinstance(data, dict):
            raise exceptions.ValidationError(
                {"non_field_errors": ["Send a message object or {'messages': [...]}."]}
            )
        if is_batch:
            batch = MessageBatchInputSerializer(data=data)
            batch.is_valid(raise_exception=True)
            return list(batch.validated_data["messages"])
        simple = simple_message_input(data)
        if simple is not None:
            return [simple]
        single = MessageInputSerializer(data=data)
        single.is_valid(raise_exception=True)
        return [dict(single.validated_data)]


def _state_key(raw: str) -> str:
    if not _STATE_KEY.match(raw):
        raise exceptions.ValidationError(
            {"key": [f"Keys are 1-{STATE_KEY_MAX_LENGTH} characters without control characters."]}
        )
    return raw


class SessionStateView(TenantScopedAPIView):
    @extend_schema(
        operation_id="state_list",
        summary="List a session's state, oldest first (the order FIFO eviction follows)",
        parameters=[SESSION_ID_PARAMETER],
        responses={200: StateListSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get_for_tenant(tenant=self.tenant, session_id=session_id)
        entries = list(selectors.state_list_for_session(session=session))
        policy = memory_policy_for(tenant=self.tenant, agent_id=session.agent_id)
        return Response(
            {
                "results": StateEntryOutputSerializer(entries, many=True).data,
                "count": len(entries),
                "cap": max(policy.state_cap, session.state_cap or 0),
            }
        )


class SessionStateKeyView(TenantScopedAPIView):
    @extend_schema(
        operation_id="state_get",
        summary="Get one state key",
        parameters=[SESSION_ID_PARAMETER, STATE_KEY_PARAMETER],
        responses={200: StateEntryOutputSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, session_id: str, key: str) -> Response:
        session = selectors.session_get_for_tenant(tenant=self.tenant, session_id=session_id)
        entry = selectors.state_get_for_session(session=session, key=_state_key(key))
        return Response(StateEntryOutputSerializer(entry).data)

    @extend_schema(
        operation_id="state_set",
        summary="Set a state key: it moves to the end of the FIFO; the oldest past the cap go",
        parameters=[SESSION_ID_PARAMETER, STATE_KEY_PARAMETER],
        request=StateValueInputSerializer,
        responses={
            200: StateEntryWriteOutputSerializer,
            201: StateEntryWriteOutputSerializer,
            202: MEMORY_OFF_RESPONSE,
            404: NOT_FOUND,
        },
    )
    def put(self, request: Request, session_id: str, key: str) -> Response:
        session_pk = _session_uuid(session_id)
        state_key = _state_key(key)
        data = StateValueInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        entry, created, evicted = services.state_set(
            tenant=self.tenant,
            session_id=session_pk,
            key=state_key,
            value=data.validated_data["value"],
        )
        if entry is None:
            return Response(MEMORY_OFF_BODY, status=status.HTTP_202_ACCEPTED)
        body = {**StateEntryOutputSerializer(entry).data, "evicted": evicted}
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(
        operation_id="state_delete",
        summary="Delete a state key",
        parameters=[SESSION_ID_PARAMETER, STATE_KEY_PARAMETER],
        responses={204: None, 404: NOT_FOUND},
    )
    def delete(self, request: Request, session_id: str, key: str) -> Response:
        session_pk = _session_uuid(session_id)
        deleted = services.state_delete(
            tenant=self.tenant, session_id=session_pk, key=_state_key(key)
        )
        if not deleted:
            raise ResourceNotFound("No such state key.")
        return Response(status=status.HTTP_204_NO_CONTENT)


class MessageSearchQuerySerializer(serializers.Serializer[Any]):
    q = StrictCharField(
        max_length=MAX_QUERY_CHARS,
        help_text="Natural language; any of its words may match.",
    )
    user_id = StrictCharField(required=False, max_length=END_USER_ID_MAX_LENGTH)
    session_id = serializers.UUIDField(required=False)
    role = serializers.ChoiceField(choices=MessageRole.choices, required=False)
    top_k = serializers.IntegerField(required=False, min_value=1, max_value=100, default=10)
    mode = serializers.ChoiceField(
        choices=recall.MODES,
        default="hybrid",
        help_text=(
            "hybrid: words (BM25 over each turn with its neighbours) fused with meaning (a "
            "MiniLM embedding) plus priors; lexical: words only; semantic: meaning only. "
            "hybrid and semantic search one person's history: give user_id, or a session_id "
            "of a session that has a person. Without a person the search is lexical."
        ),
    )
    speaker = StrictCharField(
        required=False,
        max_length=128,
        help_text="Favour this participant's turns (a message's `name`, else its role).",
    )
    since = serializers.DateTimeField(required=False, help_text="Only messages at or after.")
    until = serializers.DateTimeField(required=False, help_text="Only messages at or before.")


def message_search_query_validated(params: Mapping[str, str]) -> dict[str, Any]:
    """The search's query string, validated as MessageSearchQuerySerializer validates it (its
    ValidationError, hence the same 400, for what it refuses). The usual one (q, user_id,
    top_k, mode) is read without the serializer: memoryhub.core.fields.plain_search."""
    plain = plain_search(params, user_id_max_length=END_USER_ID_MAX_LENGTH)
    if plain is not None:
        validated: dict[str, Any] = {"q": plain.query, "top_k": plain.top_k, "mode": plain.mode}
        if plain.user_id is not None:
            validated["user_id"] = plain.user_id
        return validated
    serializer = MessageSearchQuerySerializer(data=params)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class MessageSearchSignalsSerializer(serializers.Serializer[Any]):
    lexical = serializers.BooleanField()
    semantic = serializers.BooleanField()
    speaker = serializers.BooleanField()
    date = serializers.BooleanField()
    when = serializers.BooleanField()


class MessageSearchHitSerializer(serializers.Serializer[Any]):
    score = serializers.FloatField()
    lexical_score = serializers.FloatField(allow_null=True)
    dense_score = serializers.FloatField(allow_null=True)
    signals = MessageSearchSignalsSerializer()
    message = MessageOutputSerializer()


class MessageSearchResultSerializer(serializers.Serializer[Any]):
    mode = serializers.ChoiceField(choices=recall.MODES, help_text="The mode that ran.")
    results = MessageSearchHitSerializer(many=True)


class MessageSearchView(TenantScopedAPIView):
    @extend_schema(
        operation_id="messages_search",
        summary="Search a person's past turns: which session, which seq",
        description=(
            "Hybrid by default: any word of `q` may match (stemmed, weighted by how rare it is "
            "in this person's history), fused with the meaning of `q`, and lifted by the "
            "turn's neighbours, its conversation, the speaker and the dates `q` names. A turn "
            "not embedded yet is still found by its words. Best match first."
        ),
        parameters=[MessageSearchQuerySerializer],
        responses=MessageSearchResultSerializer,
    )
    def get(self, request: Request) -> Response:
        params = message_search_query_validated(request.query_params)
        try:
            found = recall.messages_search(
                tenant=self.tenant,
                query=params["q"],
                mode=params["mode"],
                top_k=params["top_k"],
                user_id=params.get("user_id"),
                session_id=params.get("session_id"),
                role=params.get("role"),
                speaker=params.get("speaker"),
                since=params.get("since"),
                until=params.get("until"),
            )
        except EmptySearchQuery as error:
            raise exceptions.ValidationError({"q": [str(error)]}) from None
        # Turns stored before the policy's redaction was switched on are masked on the way out.
        redact = search_redactor(tenant_id=self.tenant.pk)
        return Response(
            {
                "mode": found.mode,
                "results": [
                    {
                        "score": item.hit.score,
                        "lexical_score": item.hit.lexical_score,
                        "dense_score": item.hit.dense_score,
                        "signals": item.hit.signals.as_dict(),
                        "message": rows_redacted([message_data(item.message)], redact=redact)[0],
                    }
                    for item in found.hits
                ],
            }
        )
