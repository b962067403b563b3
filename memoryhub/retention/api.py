"""`POST /api/v1/purge/`: remove a session, a person, or history older than N days, now."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memoryhub.accounts.api import TenantScopedAPIView
from memoryhub.accounts.models import END_USER_ID_MAX_LENGTH, ApiKeyScope
from memoryhub.core.fields import StrictCharField
from memoryhub.core.serializers import StrictInputSerializer
from memoryhub.retention import purge

PURGE_DAYS_MAX = 36_500


class PurgeInputSerializer(StrictInputSerializer):
    scope = serializers.ChoiceField(choices=["session", "user", "older_than"])
    session_id = serializers.UUIDField(required=False, help_text='scope "session": the session.')
    user_id = StrictCharField(
        required=False,
        max_length=END_USER_ID_MAX_LENGTH,
        help_text='scope "user": the person; scope "older_than": only this person (optional).',
    )
    days = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=PURGE_DAYS_MAX,
        help_text='scope "older_than": history older than this many days.',
    )
    dry_run = serializers.BooleanField(
        default=False, help_text="Count what would be removed; remove nothing."
    )

    REQUIRED = {"session": ("session_id",), "user": ("user_id",), "older_than": ("days",)}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        scope = attrs["scope"]
        missing = {
            name: [f'Required with scope "{scope}".']
            for name in self.REQUIRED[scope]
            if attrs.get(name) in (None, "")
        }
        if missing:
            raise serializers.ValidationError(missing)
        allowed = {"scope", "dry_run", *self.REQUIRED[scope]} | (
            {"user_id"} if scope == "older_than" else set()
        )
        stray = {
            name: [f'Not used with scope "{scope}".']
            for name in set(self.initial_data) - allowed
            if name in self.fields
        }
        if stray:
            # A purge that silently ignored a narrowing field would remove more than asked.
            raise serializers.ValidationError(stray)
        return attrs


class PurgeOutputSerializer(serializers.Serializer[Any]):
    scope = serializers.CharField()
    dry_run = serializers.BooleanField()
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Rows removed (or that would be) per kind."
    )
    total = serializers.IntegerField()


class PurgeView(TenantScopedAPIView):
    required_scopes = {"POST": [ApiKeyScope.PURGE]}

    @extend_schema(
        operation_id="purge",
        summary="Purge a session, a person, or history older than N days (needs `purge`)",
        description=(
            "Counts per kind in the response and in the audit log. `dry_run: true` counts the "
            "same rows without removing them. What each scope removes, and what survives it, "
            "is in the README (*Retention and purge*)."
        ),
        request=PurgeInputSerializer,
        responses={
            200: PurgeOutputSerializer,
            403: OpenApiResponse(description="The key lacks the `purge` scope."),
            404: OpenApiResponse(description="No such session or user for this tenant."),
        },
        examples=[
            OpenApiExample("A session", value={"scope": "session", "session_id": "0190…"}),
            OpenApiExample(
                "A person, dry run",
                value={"scope": "user", "user_id": "telegram:42", "dry_run": True},
            ),
            OpenApiExample("Older than 30 days", value={"scope": "older_than", "days": 30}),
        ],
    )
    def post(self, request: Request) -> Response:
        data = PurgeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        actor = self.actor
        scope, dry_run = params["scope"], params["dry_run"]
        if scope == "session":
            counts = purge.purge_session(
                tenant=self.tenant, session_id=params["session_id"], dry_run=dry_run, actor=actor
            )
        elif scope == "user":
            counts = purge.purge_user(
                tenant=self.tenant, user_id=params["user_id"], dry_run=dry_run, actor=actor
            )
        else:
            counts = purge.purge_older_than(
                tenant=self.tenant,
                days=params["days"],
                user_id=params.get("user_id"),
                dry_run=dry_run,
                actor=actor,
            )
        return Response(
            {"scope": scope, "dry_run": dry_run, "counts": counts, "total": sum(counts.values())}
        )
