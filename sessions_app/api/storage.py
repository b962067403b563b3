"""Seed 000's session reads: `working_memory_read()` (`GET /sessions/{id}/working-memory/`, ""
when unset) and `list_files()` (`GET /sessions/{id}/storage/`, what the session stores)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memoryhub.accounts.api import TenantScopedAPIView
from memoryhub.accounts.selectors import memory_policy_for
from sessions_app import selectors
from sessions_app.api.views import NOT_FOUND, SESSION_ID_PARAMETER
from sessions_app.models import StateEntry

WORKING_MEMORY_KEY = "working_memory"


class WorkingMemorySerializer(serializers.Serializer[Any]):
    key = serializers.CharField(help_text=f'Always "{WORKING_MEMORY_KEY}": a state key.')
    value = serializers.JSONField(
        help_text='The value of the `working_memory` state key, or "" when it is not set.'
    )
    is_set = serializers.BooleanField()
    updated_at = serializers.DateTimeField(allow_null=True)


class StoredKindSerializer(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(
        choices=["messages", "state", "summaries", "plans", "task_contexts"]
    )
    count = serializers.IntegerField()
    bytes = serializers.IntegerField(
        help_text=(
            "UTF-8 bytes of what the rows hold: message content, state values (as JSON), "
            "summary text, plan and task state and data (as JSON)."
        )
    )
    last_changed_at = serializers.DateTimeField(allow_null=True)
    tokens = serializers.IntegerField(
        required=False, help_text="messages only: their tokens (o200k_base)."
    )
    cap = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text=(
            "messages: the transcript cap of the session's policy (null: none); state: the "
            "state cap; null for the other kinds."
        ),
    )


class SessionStorageSerializer(serializers.Serializer[Any]):
    session_id = serializers.UUIDField()
    results = StoredKindSerializer(many=True)


class SessionWorkingMemoryView(TenantScopedAPIView):
    @extend_schema(
        operation_id="working_memory_get",
        summary='Read the session\'s working memory: the `working_memory` state key, "" if unset',
        description=(
            "Seed 000's `working_memory_read()`: never a 404 for an unset key (a missing "
            "session still is). Write it with `PUT …/state/working_memory/`."
        ),
        parameters=[SESSION_ID_PARAMETER],
        responses={200: WorkingMemorySerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get_for_tenant(tenant=self.tenant, session_id=session_id)
        entry: StateEntry | None = (
            StateEntry.objects.filter(
                tenant_id=session.tenant_id, session=session, key=WORKING_MEMORY_KEY
            )
            .only("value", "updated_at")
            .first()
        )
        return Response(
            {
                "key": WORKING_MEMORY_KEY,
                "value": "" if entry is None else entry.value,
                "is_set": entry is not None,
                "updated_at": None if entry is None else entry.updated_at,
            }
        )


class SessionStorageView(TenantScopedAPIView):
    @extend_schema(
        operation_id="session_storage",
        summary="What the session stores: per kind, rows, bytes and the latest change",
        description=(
            "Seed 000's `list_files()`: its `kv.json` is `state` here and its `transcript.md` "
            "is `messages`; MemoryHub adds `summaries`, `plans` and `task_contexts`. Every kind "
            "is listed, with zeros when empty. A bounded number of queries (one per kind)."
        ),
        parameters=[SESSION_ID_PARAMETER],
        responses={200: SessionStorageSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get_for_tenant(tenant=self.tenant, session_id=session_id)
        policy = memory_policy_for(tenant=self.tenant, agent_id=session.agent_id)
        caps: dict[str, int | None] = {
            "messages": policy.transcript_cap,
            "state": policy.state_cap,
        }
        results = []
        for stored in selectors.session_storage(session=session):
            item: dict[str, Any] = {
                "kind": stored.kind,
                "count": stored.count,
                "bytes": stored.bytes,
                "last_changed_at": stored.last_changed_at,
            }
            if stored.tokens is not None:
                item["tokens"] = stored.tokens
            if stored.kind in caps:
                item["cap"] = caps[stored.kind]
            results.append(item)
        return Response(
            SessionStorageSerializer({"session_id": session.pk, "results": results}).data
        )
