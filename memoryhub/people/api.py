"""`/users/`: the people a tenant's bots talk to — list, show, export, erase."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from facts_app.models import Fact, Note, UserMemory
from memoryhub.accounts.api import LimitCursorPagination, TenantScopedAPIView
from memoryhub.accounts.models import ApiKeyScope, EndUser
from memoryhub.accounts.selectors import end_user_get_for_tenant
from memoryhub.accounts.services import end_user_erase
from memoryhub.people.services import end_user_export
from sessions_app.models import Message, Session
from sessions_app.recall import messages_embedded_count


class EndUserOutputSerializer(serializers.ModelSerializer[EndUser]):
    user_id = serializers.CharField(source="external_id")

    class Meta:
        model = EndUser
        fields = ["user_id", "display_name", "metadata", "created_at"]
        read_only_fields = fields


class RecallStatusSerializer(serializers.Serializer[Any]):
    messages = serializers.IntegerField(help_text="The person's messages.")
    messages_embedded = serializers.IntegerField(
        help_text=(
            "Those with a vector of the current embedding model: what the semantic part of "
            "the search sees yet (a worker embeds after each append)."
        )
    )


class EndUserDetailSerializer(EndUserOutputSerializer):
    counts = serializers.SerializerMethodField()
    recall = serializers.SerializerMethodField()

    class Meta(EndUserOutputSerializer.Meta):
        fields = [*EndUserOutputSerializer.Meta.fields, "counts", "recall"]
        read_only_fields = fields

    @extend_schema_field(RecallStatusSerializer)
    def get_recall(self, end_user: EndUser) -> dict[str, int]:
        return {
            "messages": Message.objects.filter(
                tenant_id=end_user.tenant_id, session__end_user=end_user
            ).count(),
            "messages_embedded": messages_embedded_count(end_user=end_user),
        }

    def get_counts(self, end_user: EndUser) -> dict[str, int]:
        return {
            "sessions": Session.objects.filter(end_user=end_user).count(),
            "memories": UserMemory.objects.filter(end_user=end_user).count(),
            "facts": Fact.objects.filter(end_user=end_user).count(),
            "notes": Note.objects.filter(end_user=end_user).count(),
        }


class ErasureSerializer(serializers.Serializer[Any]):
    erased = serializers.DictField(child=serializers.IntegerField(), help_text="Rows per kind.")


class EndUserPagination(LimitCursorPagination):
    ordering = ("-created_at", "-id")


USER_ID = OpenApiParameter("user_id", OpenApiTypes.STR, OpenApiParameter.PATH)


class EndUserListView(TenantScopedAPIView):
    pagination_class = EndUserPagination  # also tells the OpenAPI schema the list is paginated

    @extend_schema(
        operation_id="users_list",
        summary="The people this tenant's bots talk to, newest first",
        responses=EndUserOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(
            EndUser.objects.for_tenant(self.tenant), request, view=self
        )
        return paginator.get_paginated_response(EndUserOutputSerializer(page, many=True).data)


class EndUserDetailView(TenantScopedAPIView):
    # Erasing a person is destructive and irreversible: it takes the purge scope, not just write.
    required_scopes = {"DELETE": [ApiKeyScope.PURGE]}

    @extend_schema(
        operation_id="users_get",
        summary="One person, with how much memory MemoryHub keeps about them",
        parameters=[USER_ID],
        responses=EndUserDetailSerializer,
    )
    def get(self, request: Request, user_id: str) -> Response:
        end_user = end_user_get_for_tenant(tenant=self.tenant, external_id=user_id)
        return Response(EndUserDetailSerializer(end_user).data)

    @extend_schema(
        operation_id="users_erase",
        summary="Erase a person: sessions, messages, state, memories, facts, notes (audited)",
        description="Needs the `purge` scope. One transaction; the response counts rows per kind.",
        parameters=[USER_ID],
        # A 200 with the counts (drf-spectacular would document a bare serializer on DELETE as
        # a 204 with no body).
        responses={200: ErasureSerializer},
    )
    def delete(self, request: Request, user_id: str) -> Response:
        end_user = end_user_get_for_tenant(tenant=self.tenant, external_id=user_id)
        counts = end_user_erase(end_user=end_user, actor=self.actor)
        return Response({"erased": counts})


class EndUserExportView(TenantScopedAPIView):
    @extend_schema(
        operation_id="users_export",
        summary="Everything kept about a person, as one versioned JSON document (audited)",
        parameters=[USER_ID],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request: Request, user_id: str) -> Response:
        end_user = end_user_get_for_tenant(tenant=self.tenant, external_id=user_id)
        document = end_user_export(end_user=end_user, actor=self.actor)
        response = Response(document)
        response["Content-Disposition"] = 'attachment; filename="memoryhub-user-export.json"'
        return response
