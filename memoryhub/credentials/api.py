"""Minting, listing and revoking a person's tokens, and rotating the tenant's signing key.

All need the `mint` scope on a tenant's key: a person-bound token never holds it."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from memoryhub.accounts.api import TenantScopedAPIView
from memoryhub.accounts.models import ApiKeyScope
from memoryhub.accounts.selectors import end_user_get_for_tenant
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.core.fields import StrictCharField
from memoryhub.core.serializers import StrictInputSerializer
from memoryhub.credentials import selectors, services
from memoryhub.credentials.models import PersonToken

MINT = [ApiKeyScope.MINT]


class TokenMintInputSerializer(StrictInputSerializer):
    ttl_seconds = serializers.IntegerField(
        required=False, help_text="Lifetime (default MEMORYHUB_PERSON_TOKEN_TTL_SECONDS)."
    )
    scopes = serializers.ListField(
        child=serializers.CharField(max_length=32),
        required=False,
        max_length=8,
        help_text=(
            "read, write, purge (erase only this person), global-memory (write tenant-wide "
            "memory); each held by the minting key. Default: read and write."
        ),
    )
    session_id = serializers.UUIDField(required=False, help_text="Bind to this session too.")
    agent_id = StrictCharField(required=False, max_length=128, help_text="Bind to this agent.")


class TokenOutputSerializer(serializers.ModelSerializer[PersonToken]):
    user_id = serializers.CharField(source="end_user.external_id")

    class Meta:
        model = PersonToken
        fields = ["jti", "user_id", "session_id", "agent_id", "scopes", "created_at", "expires_at"]
        read_only_fields = fields


class TokenMintedSerializer(TokenOutputSerializer):
    token = serializers.CharField(help_text="Shown once; send it as `Authorization: Bearer`.")

    class Meta(TokenOutputSerializer.Meta):
        fields = ["token", *TokenOutputSerializer.Meta.fields]
        read_only_fields = fields


class RotateInputSerializer(StrictInputSerializer):
    grace_seconds = serializers.IntegerField(
        required=False,
        default=0,
        help_text="How long tokens signed with the old secret keep working (default 0).",
    )


class RotateOutputSerializer(serializers.Serializer[Any]):
    version = serializers.IntegerField()
    previous_valid_until = serializers.DateTimeField(allow_null=True)


class PersonTokenListView(TenantScopedAPIView):
    required_scopes = {"GET": MINT, "POST": MINT}

    @extend_schema(
        operation_id="user_tokens_list",
        summary="A person's tokens that still work (not expired, not revoked)",
        responses=inline_serializer(
            name="TokenList", fields={"results": TokenOutputSerializer(many=True)}
        ),
    )
    def get(self, request: Request, user_id: str) -> Response:
        end_user = end_user_get_for_tenant(tenant=self.tenant, external_id=user_id)
        tokens = selectors.person_tokens_active(tenant=self.tenant, end_user=end_user)[:200]
        return Response({"results": TokenOutputSerializer(tokens, many=True).data})

    @extend_schema(
        operation_id="user_tokens_mint",
        summary="Mint a short-lived token bound to this person (audited)",
        request=TokenMintInputSerializer,
        responses={201: TokenMintedSerializer},
    )
    def post(self, request: Request, user_id: str) -> Response:
        data = TokenMintInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        end_user = end_user_get_or_create(tenant=self.tenant, external_id=user_id)
        minted = services.person_token_mint(
            tenant=self.tenant,
            end_user=end_user,
            scopes=services.token_scopes_choose(
                held=self.api_key.scopes,
                requested=params.get("scopes"),
            ),
            ttl_seconds=params.get("ttl_seconds", settings.MEMORYHUB_PERSON_TOKEN_TTL_SECONDS),
            session_id=params.get("session_id"),
            agent_id=params.get("agent_id", ""),
            actor=self.actor,
        )
        body = {"token": minted.token, **TokenOutputSerializer(minted.row).data}
        return Response(body, status=status.HTTP_201_CREATED)


class PersonTokenDetailView(TenantScopedAPIView):
    required_scopes = {"DELETE": MINT}

    @extend_schema(
        operation_id="tokens_revoke",
        summary="Revoke a person token by its id (jti); audited",
        responses={204: None},
    )
    def delete(self, request: Request, jti: str) -> Response:
        token = selectors.person_token_get(tenant=self.tenant, jti=jti)
        services.person_token_revoke(token=token, actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SigningKeyRotateView(TenantScopedAPIView):
    required_scopes = {"POST": MINT}

    @extend_schema(
        operation_id="tokens_rotate_secret",
        summary="Rotate the tenant's token-signing secret (audited)",
        request=RotateInputSerializer,
        responses=RotateOutputSerializer,
    )
    def post(self, request: Request) -> Response:
        data = RotateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        key = services.signing_key_rotate(
            tenant=self.tenant,
            grace_seconds=data.validated_data["grace_seconds"],
            actor=self.actor,
        )
        return Response({"version": key.version, "previous_valid_until": key.previous_valid_until})
