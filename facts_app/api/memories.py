"""Explicit memories: `/users/{user_id}/memories/…` for a person, `/memories/…` tenant-wide."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from facts_app.models import (
    MEMORY_KEY_MAX_LENGTH,
    MEMORY_KEY_PATTERN,
    RESERVED_MEMORY_KEY_PREFIXES,
    UserMemory,
    UserMemoryVersion,
)
from facts_app.selectors.memories import memory_get, memory_list, memory_versions
from facts_app.services.memories import memory_delete, memory_save
from memoryhub.accounts.api import TenantScopedAPIView
from memoryhub.accounts.models import ApiKeyScope, EndUser
from memoryhub.accounts.permissions import InsufficientScope
from memoryhub.accounts.selectors import end_user_get_for_tenant, memory_policy_for
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.core.fields import StrictCharField, StrictUUIDField
from memoryhub.core.limits import validate_text_size
from memoryhub.core.serializers import StrictInputSerializer

_KEY = re.compile(MEMORY_KEY_PATTERN)


def validated_memory_key(key: str) -> str:
    """Seed 001's key rules, each with its own code so a bot can tell them apart."""
    if len(key) > MEMORY_KEY_MAX_LENGTH:
        code, message = "too_long", f"Keys are at most {MEMORY_KEY_MAX_LENGTH} characters."
    elif not _KEY.match(key):
        code, message = "invalid_key", "Keys are lowercase: a letter, then letters, digits or _."
    elif key.startswith(RESERVED_MEMORY_KEY_PREFIXES):
        code = "reserved_key"
        message = f"Keys may not start with {' or '.join(RESERVED_MEMORY_KEY_PREFIXES)}."
    else:
        return key
    raise serializers.ValidationError({"key": [serializers.ErrorDetail(message, code)]})


class MemoryInputSerializer(StrictInputSerializer):
    content = StrictCharField(trim_whitespace=False)
    pinned = serializers.BooleanField(required=False)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    source_session_id = StrictUUIDField(required=False, allow_null=True)

    def validate_content(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("Content may not be blank.", code="blank")
        return validate_text_size(value, limit_name="MEMORY_CONTENT_MAX_BYTES", what="content")


class MemoryOutputSerializer(serializers.ModelSerializer[UserMemory]):
    user_id = serializers.SerializerMethodField()

    class Meta:
        model = UserMemory
        fields = [
            "key",
            "user_id",
            "content",
            "pinned",
            "expires_at",
            "source_session_id",
            "version",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_user_id(self, memory: UserMemory) -> str | None:
        return memory.end_user.external_id if memory.end_user else None


class MemoryVersionSerializer(serializers.ModelSerializer[UserMemoryVersion]):
    class Meta:
        model = UserMemoryVersion
        fields = ["version", "content", "source_session_id", "created_at"]
        read_only_fields = fields


class MemoryListSerializer(serializers.Serializer[Any]):
    results = MemoryOutputSerializer(many=True)


class MemoryVersionListSerializer(serializers.Serializer[Any]):
    current = MemoryOutputSerializer()
    versions = MemoryVersionSerializer(many=True)


USER_ID = OpenApiParameter("user_id", OpenApiTypes.STR, OpenApiParameter.PATH)
KEY = OpenApiParameter("key", OpenApiTypes.STR, OpenApiParameter.PATH)


USER_MEMORIES_OFF_BODY = {
    "stored": False,
    "reason": "user_memories_off",
    "detail": (
        "Personal memories are off in the tenant's memory policy (enable_user_memories); "
        "nothing was stored."
    ),
}


class StoredNotSerializer(serializers.Serializer[Any]):
    stored = serializers.BooleanField()
    reason = serializers.CharField()
    detail = serializers.CharField()


class _MemoryView(TenantScopedAPIView):
    """Shared by the per-person and the tenant-wide routes: `user_id` None means tenant-wide."""

    tenant_wide = False

    def person(self, user_id: str | None, *, create: bool) -> EndUser | None:
        if self.tenant_wide or user_id is None:
            return None
        if create:
            return end_user_get_or_create(tenant=self.tenant, external_id=user_id)
        return end_user_get_for_tenant(tenant=self.tenant, external_id=user_id)

    def check_global_write(self) -> None:
        if self.tenant_wide and not self.api_key.has_scope(ApiKeyScope.GLOBAL_MEMORY):
            raise InsufficientScope("Tenant-wide memories need the global-memory scope to change.")


class UserMemoryListView(_MemoryView):
    @extend_schema(
        operation_id="user_memories_list",
        summary="A person's memories, pinned first (expired ones left out)",
        parameters=[USER_ID],
        responses=MemoryListSerializer,
    )
    def get(self, request: Request, user_id: str | None = None) -> Response:
        end_user = self.person(user_id, create=False)
        memories = memory_list(tenant=self.tenant, end_user=end_user)
        return Response({"results": MemoryOutputSerializer(memories, many=True).data})


class UserMemoryDetailView(_MemoryView):
    @extend_schema(
        operation_id="user_memories_get",
        parameters=[USER_ID, KEY],
        responses=MemoryOutputSerializer,
    )
    def get(self, request: Request, key: str, user_id: str | None = None) -> Response:
        memory = memory_get(
            tenant=self.tenant,
            end_user=self.person(user_id, create=False),
            key=validated_memory_key(key),
        )
        return Response(MemoryOutputSerializer(memory).data)

    @extend_schema(
        operation_id="user_memories_save",
        summary="Save a memory under a key; an earlier text is kept in its versions",
        parameters=[USER_ID, KEY],
        request=MemoryInputSerializer,
        responses={
            200: MemoryOutputSerializer,
            201: MemoryOutputSerializer,
            202: OpenApiResponse(
                StoredNotSerializer,
                description=(
                    "`user_memories_off`: the tenant's policy turns personal memories off "
                    "(seed 001's enable_user_memories): accepted, nothing stored."
                ),
            ),
        },
    )
    def put(self, request: Request, key: str, user_id: str | None = None) -> Response:
        self.check_global_write()
        memory_key = validated_memory_key(key)
        data = MemoryInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        if not self.tenant_wide and not memory_policy_for(tenant=self.tenant).enable_user_memories:
            # Bad input is still a 400 (above); the person is neither created nor written to.
            return Response(USER_MEMORIES_OFF_BODY, status=status.HTTP_202_ACCEPTED)
        fields = dict(data.validated_data)
        clear_expires_at = "expires_at" in fields and fields["expires_at"] is None
        memory, created = memory_save(
            tenant=self.tenant,
            end_user=self.person(user_id, create=True),
            key=memory_key,
            clear_expires_at=clear_expires_at,
            **fields,
        )
        return Response(
            MemoryOutputSerializer(memory).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(
        operation_id="user_memories_delete", parameters=[USER_ID, KEY], responses={204: None}
    )
    def delete(self, request: Request, key: str, user_id: str | None = None) -> Response:
        self.check_global_write()
        memory = memory_get(
            tenant=self.tenant,
            end_user=self.person(user_id, create=False),
            key=validated_memory_key(key),
        )
        memory_delete(memory=memory, actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class UserMemoryVersionsView(_MemoryView):
    @extend_schema(
        operation_id="user_memories_versions",
        summary="A memory's current text and its earlier versions, newest first",
        parameters=[USER_ID, KEY],
        responses=MemoryVersionListSerializer,
    )
    def get(self, request: Request, key: str, user_id: str | None = None) -> Response:
        memory = memory_get(
            tenant=self.tenant,
            end_user=self.person(user_id, create=False),
            key=validated_memory_key(key),
        )
        return Response(
            {
                "current": MemoryOutputSerializer(memory).data,
                "versions": MemoryVersionSerializer(memory_versions(memory=memory), many=True).data,
            }
        )


# The tenant-wide routes reuse the views; their schema drops the user_id and names them apart.
NO_USER_ID = OpenApiParameter("user_id", OpenApiTypes.STR, OpenApiParameter.PATH, exclude=True)


@extend_schema_view(
    get=extend_schema(
        operation_id="tenant_memories_list",
        summary="Tenant-wide memories (every person's context sees them)",
        parameters=[NO_USER_ID],
    )
)
class TenantMemoryListView(UserMemoryListView):
    tenant_wide = True


@extend_schema_view(
    get=extend_schema(operation_id="tenant_memories_get", parameters=[NO_USER_ID]),
    put=extend_schema(
        operation_id="tenant_memories_save",
        summary="Save a tenant-wide memory (needs the global-memory scope)",
        parameters=[NO_USER_ID],
        # enable_user_memories is about personal memories: tenant-wide ones are always stored.
        responses={200: MemoryOutputSerializer, 201: MemoryOutputSerializer},
    ),
    delete=extend_schema(operation_id="tenant_memories_delete", parameters=[NO_USER_ID]),
)
class TenantMemoryDetailView(UserMemoryDetailView):
    tenant_wide = True


@extend_schema_view(
    get=extend_schema(operation_id="tenant_memories_versions", parameters=[NO_USER_ID])
)
class TenantMemoryVersionsView(UserMemoryVersionsView):
    tenant_wide = True
