"""Fact endpoints: create (deduplicated), list, get, patch, delete, and full-text search."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from facts_app.models import FACT_EXTERNAL_ID_MAX_LENGTH, Fact
from facts_app.recall import MODES
from facts_app.selectors.facts import (
    FactFilters,
    fact_get_for_tenant,
    fact_list_for_tenant,
    fact_search_result,
    fact_search_result_for_person,
)
from facts_app.services.facts import (
    FACT_EXTERNAL_ID_KEY,
    fact_create,
    fact_delete,
    fact_external_id,
    fact_update,
)
from memoryhub.accounts.api import LimitCursorPagination, TenantScopedAPIView
from memoryhub.accounts.models import END_USER_ID_MAX_LENGTH, ApiKeyScope
from memoryhub.accounts.permissions import InsufficientScope
from memoryhub.accounts.redaction import rows_redacted, search_redactor
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.core.fields import StrictCharField, StrictUUIDField, plain_search
from memoryhub.core.limits import validate_json_value, validate_text_size
from memoryhub.core.recall import Mode
from memoryhub.core.search import MAX_QUERY_CHARS, EmptySearchQuery
from memoryhub.core.serializers import StrictInputSerializer

TAG_MAX_LENGTH = 64
TAGS_MAX = 32


def _metadata_validator(value: Any) -> Any:
    return validate_json_value(value, limit_name="METADATA_MAX_BYTES", what="metadata")


class TagListField(serializers.ListField):
    child = StrictCharField(max_length=TAG_MAX_LENGTH, allow_blank=False)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=TAGS_MAX, **kwargs)


class FactInputSerializer(StrictInputSerializer):
    content = StrictCharField(trim_whitespace=False)
    user_id = StrictCharField(required=False, allow_null=True, max_length=END_USER_ID_MAX_LENGTH)
    tags = TagListField(required=False)
    metadata = serializers.DictField(required=False, validators=[_metadata_validator])
    source_session_id = StrictUUIDField(required=False, allow_null=True)
    source_message_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1), required=False, max_length=100
    )
    valid_until = serializers.DateTimeField(required=False, allow_null=True)
    supersedes = serializers.IntegerField(
        required=False, allow_null=True, help_text="Id of an older fact this one replaces."
    )
    external_id = StrictCharField(
        required=False,
        max_length=FACT_EXTERNAL_ID_MAX_LENGTH,
        help_text=(
            "The caller's own id for the fact (an import, a backfill; seed 004's fact ids): "
            "unique per tenant, copied into metadata.external_id. A retry with the same id, person "
            "and text returns the stored fact (200); the id on another fact is a 409 "
            "`fact_id_conflict`."
        ),
    )
    created_at = serializers.DateTimeField(
        required=False,
        help_text=(
            "When the fact was learnt, for a caller that knows (an import, a backfill): ISO "
            "8601, naive = UTC, not in the future (`created_at_in_future`). Default: now."
        ),
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # metadata.external_id is where the id is kept: sent there, it is the id (never a free
        # key that would skip the uniqueness check), and it must agree with `external_id`.
        in_metadata = (attrs.get("metadata") or {}).get(FACT_EXTERNAL_ID_KEY)
        if in_metadata is not None:
            if not isinstance(in_metadata, str) or not in_metadata:
                raise serializers.ValidationError(
                    {"metadata": ["metadata.external_id must be a non-empty string."]},
                    code="invalid",
                )
            if attrs.setdefault("external_id", in_metadata) != in_metadata:
                raise serializers.ValidationError(
                    {
                        "external_id": [
                            serializers.ErrorDetail(
                                "Differs from metadata.external_id.", code="external_id_mismatch"
                            )
                        ]
                    }
                )
        return attrs

    def validate_content(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("Content may not be blank.", code="blank")
        return validate_text_size(value, limit_name="FACT_CONTENT_MAX_BYTES", what="content")


class FactPatchSerializer(StrictInputSerializer):
    content = StrictCharField(required=False, trim_whitespace=False)
    tags = TagListField(required=False)
    metadata = serializers.DictField(required=False, validators=[_metadata_validator])
    valid_until = serializers.DateTimeField(required=False, allow_null=True)

    validate_content = FactInputSerializer.validate_content


class FactOutputSerializer(serializers.ModelSerializer[Fact]):
    user_id = serializers.SerializerMethodField()
    external_id = serializers.SerializerMethodField(
        help_text="The caller's own id for the fact, if it gave one."
    )
    superseded_by: serializers.PrimaryKeyRelatedField[Fact] = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True
    )

    class Meta:
        model = Fact
        fields = [
            "id",
            "external_id",
            "user_id",
            "content",
            "tags",
            "metadata",
            "source_session_id",
            "source_message_ids",
            "created_at",
            "updated_at",
            "valid_until",
            "superseded_by",
        ]
        read_only_fields = fields

    def get_user_id(self, fact: Fact) -> str | None:
        return fact.end_user.external_id if fact.end_user else None

    def get_external_id(self, fact: Fact) -> str | None:
        return fact_external_id(fact)


def _iso(value: dt.datetime | None) -> str | None:
    # DRF's DateTimeField output: ISO 8601 with "Z" for UTC.
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def fact_data(fact: Fact) -> dict[str, Any]:
    """FactOutputSerializer's output, built directly (its `end_user` loaded already).

    A search renders up to 100 facts; DRF builds and deep-copies a ModelSerializer's fields and
    runs a method field per fact, which cost more than the search's own database work. The
    serializer stays the documented shape (OpenAPI); a test keeps the two identical.
    """
    return {
        "id": fact.pk,
        "external_id": fact_external_id(fact),
        "user_id": fact.end_user.external_id if fact.end_user else None,
        "content": fact.content,
        "tags": fact.tags,
        "metadata": fact.metadata,
        "source_session_id": (
            None if fact.source_session_id is None else str(fact.source_session_id)
        ),
        "source_message_ids": fact.source_message_ids,
        "created_at": _iso(fact.created_at),
        "updated_at": _iso(fact.updated_at),
        "valid_until": _iso(fact.valid_until),
        "superseded_by": fact.superseded_by_id,
    }


class FactSearchSignalsSerializer(serializers.Serializer[Any]):
    """Which parts of the ranking matched (the same keys as a message search's signals; a fact
    has no speaker, so `speaker` and `when` stay false)."""

    lexical = serializers.BooleanField()
    semantic = serializers.BooleanField()
    speaker = serializers.BooleanField()
    date = serializers.BooleanField()
    when = serializers.BooleanField()


class FactSearchHitSerializer(serializers.Serializer[Any]):
    score = serializers.FloatField()
    lexical_score = serializers.FloatField(allow_null=True)
    dense_score = serializers.FloatField(allow_null=True)
    signals = FactSearchSignalsSerializer()
    fact = FactOutputSerializer()


class FactSearchResultSerializer(serializers.Serializer[Any]):
    mode = serializers.ChoiceField(choices=MODES, help_text="The mode that ran.")
    results = FactSearchHitSerializer(many=True)


class FactFilterQuerySerializer(serializers.Serializer[Any]):
    user_id = StrictCharField(required=False, max_length=END_USER_ID_MAX_LENGTH)
    tag = serializers.ListField(child=StrictCharField(max_length=TAG_MAX_LENGTH), required=False)
    metadata = serializers.ListField(
        child=serializers.RegexField(r"^[A-Za-z0-9_.\-]{1,64}=.{0,256}$"),
        required=False,
        help_text="`key=value`; repeat for several (all must match).",
    )
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)
    valid_at = serializers.DateTimeField(
        required=False, help_text="Facts as they stood then (created, not yet expired/superseded)."
    )
    include_superseded = serializers.BooleanField(required=False, default=False)

    def to_filters(self) -> FactFilters:
        data = self.validated_data
        return FactFilters(
            user_id=data.get("user_id"),
            tags=tuple(data.get("tag", [])),
            metadata=tuple(_key_value(item) for item in data.get("metadata", [])),
            created_after=data.get("created_after"),
            created_before=data.get("created_before"),
            valid_at=data.get("valid_at"),
            include_superseded=data["include_superseded"],
        )


def _key_value(item: str) -> tuple[str, str]:
    key, _, value = item.partition("=")
    return key, value


def _query_data(request: Request, *, lists: tuple[str, ...]) -> dict[str, Any]:
    # QueryDict -> plain dict, keeping repeated parameters as lists where a list is expected.
    return {
        key: request.query_params.getlist(key) if key in lists else request.query_params[key]
        for key in request.query_params
    }


class FactSearchQuerySerializer(FactFilterQuerySerializer):
    q = StrictCharField(
        max_length=MAX_QUERY_CHARS, help_text="Natural language; any of its words may match."
    )
    top_k = serializers.IntegerField(required=False, min_value=1, max_value=100, default=10)
    mode = serializers.ChoiceField(
        choices=MODES,
        default="hybrid",
        help_text=(
            "hybrid: words (BM25 over the person's facts) fused with meaning (an embedding) and "
            "the dates `q` names; lexical: words only; semantic: meaning only. hybrid and "
            "semantic rank one person's facts: give user_id. Without user_id the search is the "
            "database's full-text search over the tenant (lexical), and semantic is refused."
        ),
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("mode") == "semantic" and not attrs.get("user_id"):
            raise serializers.ValidationError(
                {
                    "mode": [
                        serializers.ErrorDetail(
                            "Semantic search reads one person's facts: give user_id.",
                            code="person_required",
                        )
                    ]
                }
            )
        return attrs


def _plain_search_query(
    params: Mapping[str, str],
) -> tuple[str, int, Mode, FactFilters] | None:
    """FactSearchQuerySerializer's q, top_k, mode and filters for a query string it would take
    as it is (memoryhub.core.fields.plain_search), else None: the serializer decides, so what
    it accepts, and every 400 it answers, stays its own."""
    plain = plain_search(params, user_id_max_length=END_USER_ID_MAX_LENGTH)
    if plain is None:
        return None
    return plain.query, plain.top_k, plain.mode, FactFilters(user_id=plain.user_id)


class FactPagination(LimitCursorPagination):
    ordering = ("-created_at", "-id")


def _needs_global_scope(view: TenantScopedAPIView, user_id: str | None) -> None:
    # Tenant-wide knowledge reaches every person's context: writing it needs its own scope.
    if user_id is None and not view.api_key.has_scope(ApiKeyScope.GLOBAL_MEMORY):
        raise InsufficientScope("Tenant-wide facts (no user_id) need the global-memory scope.")


class FactListView(TenantScopedAPIView):
    pagination_class = FactPagination  # also tells the OpenAPI schema the list is paginated

    @extend_schema(
        operation_id="facts_list",
        summary="List facts, newest first",
        parameters=[FactFilterQuerySerializer],
        responses=FactOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        query = FactFilterQuerySerializer(data=_query_data(request, lists=("tag", "metadata")))
        query.is_valid(raise_exception=True)
        facts = fact_list_for_tenant(tenant=self.tenant, filters=query.to_filters())
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(facts, request, view=self)
        return paginator.get_paginated_response(FactOutputSerializer(page, many=True).data)

    @extend_schema(
        operation_id="facts_create",
        summary="Store a fact (a repeated text for the same person returns the existing fact)",
        request=FactInputSerializer,
        responses={
            200: OpenApiResponse(
                FactOutputSerializer,
                description=(
                    "Existing fact (the same text for the person, or a retry by external_id)"
                ),
            ),
            201: OpenApiResponse(FactOutputSerializer, description="New fact"),
            409: OpenApiResponse(
                description=(
                    "`fact_id_conflict`: external_id is another fact's; `duplicate_fact`: this "
                    "text is already stored for the person under another external_id."
                )
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = FactInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        user_id = fields.pop("user_id", None)
        _needs_global_scope(self, user_id)
        supersedes_id = fields.pop("supersedes", None)
        supersedes = (
            fact_get_for_tenant(tenant=self.tenant, fact_id=supersedes_id)
            if supersedes_id is not None
            else None
        )
        end_user = (
            end_user_get_or_create(tenant=self.tenant, external_id=user_id) if user_id else None
        )
        fact, created = fact_create(
            tenant=self.tenant, end_user=end_user, supersedes=supersedes, **fields
        )
        return Response(
            FactOutputSerializer(fact).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


FACT_ID = OpenApiParameter("fact_id", OpenApiTypes.INT, OpenApiParameter.PATH)


class FactDetailView(TenantScopedAPIView):
    @extend_schema(operation_id="facts_get", parameters=[FACT_ID], responses=FactOutputSerializer)
    def get(self, request: Request, fact_id: str) -> Response:
        fact = fact_get_for_tenant(tenant=self.tenant, fact_id=fact_id)
        return Response(FactOutputSerializer(fact).data)

    @extend_schema(
        operation_id="facts_update",
        parameters=[FACT_ID],
        request=FactPatchSerializer,
        responses={200: FactOutputSerializer, 409: OpenApiResponse()},
    )
    def patch(self, request: Request, fact_id: str) -> Response:
        fact = fact_get_for_tenant(tenant=self.tenant, fact_id=fact_id)
        data = FactPatchSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        clear_valid_until = "valid_until" in fields and fields["valid_until"] is None
        fact = fact_update(fact=fact, clear_valid_until=clear_valid_until, **fields)
        return Response(FactOutputSerializer(fact).data)

    @extend_schema(operation_id="facts_delete", parameters=[FACT_ID], responses={204: None})
    def delete(self, request: Request, fact_id: str) -> Response:
        fact = fact_get_for_tenant(tenant=self.tenant, fact_id=fact_id)
        fact_delete(fact=fact, actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class FactSearchView(TenantScopedAPIView):
    @extend_schema(
        operation_id="facts_search",
        summary="Search facts, best first",
        description=(
            "With `user_id`, hybrid by default: any word of `q` may match (stemmed, weighted by "
            "how rare it is among the person's facts; the tags count too), fused with the "
            "meaning of `q`; a fact not embedded yet is still found by its words, and a fact "
            "found by meaning alone must be close to `q`. Without `user_id`: the database's "
            "full-text search over the tenant's facts (the person's id is searchable too), "
            "`mode` says which ran. Superseded and expired facts are left out unless "
            "`include_superseded=true`."
        ),
        parameters=[FactSearchQuerySerializer],
        responses=FactSearchResultSerializer,
    )
    def get(self, request: Request) -> Response:
        plain = _plain_search_query(request.query_params)
        if plain is not None:
            text, top_k, mode, filters = plain
        else:
            query = FactSearchQuerySerializer(data=_query_data(request, lists=("tag", "metadata")))
            query.is_valid(raise_exception=True)
            filters = query.to_filters()
            text = query.validated_data["q"]
            top_k = query.validated_data["top_k"]
            mode = query.validated_data["mode"]
        try:
            if filters.user_id is not None:
                # An unknown person is a 404, as everywhere else, not an empty result.
                found = fact_search_result_for_person(
                    tenant=self.tenant, query=text, filters=filters, top_k=top_k, mode=mode
                )
            else:
                found = fact_search_result(
                    tenant=self.tenant, query=text, filters=filters, top_k=top_k, mode=mode
                )
        except EmptySearchQuery as error:
            raise serializers.ValidationError({"q": [str(error)]}, code="empty_query") from None
        facts = [fact_data(hit.fact) for hit in found.hits]
        # Facts stored before the policy's redaction was switched on are masked on the way out.
        rows_redacted(list(facts), redact=search_redactor(tenant_id=self.tenant.pk))
        return Response(
            {
                "mode": found.mode,
                "results": [
                    {
                        "score": hit.score,
                        "lexical_score": hit.lexical_score,
                        "dense_score": hit.dense_score,
                        "signals": hit.signals.as_dict(),
                        "fact": fact,
                    }
                    for hit, fact in zip(found.hits, facts, strict=True)
                ],
            }
        )
