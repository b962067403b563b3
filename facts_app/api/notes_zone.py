"""Seed 003's zone-wide note calls: `memory.show` (`GET …/notes/show/`) and `prune()`
(`POST …/notes/prune/`), under /api/v1/users/<user_id>/notes/."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from facts_app.api.notes import (
    NOT_FOUND,
    USER_ID_PARAMETER,
    NoteDailyOutputSerializer,
    NoteVersionOutputSerializer,
)
from facts_app.selectors import notes as selectors
from facts_app.services import notes as services
from memoryhub.accounts.api import TenantScopedAPIView
from memoryhub.accounts.selectors import end_user_get_for_tenant, memory_policy_for
from memoryhub.core.serializers import StrictInputSerializer

SHOW_RECENT_DAYS = selectors.RECALL_DAYS_DEFAULT


class NoteCountsSerializer(serializers.Serializer[Any]):
    long_term_versions = serializers.IntegerField()
    daily_notes = serializers.IntegerField(
        help_text="Days with a daily note (cleared ones too: their history is kept)."
    )
    daily_versions = serializers.IntegerField()


class NoteShowOutputSerializer(serializers.Serializer[Any]):
    long_term = NoteVersionOutputSerializer(
        allow_null=True, help_text="The current long-term document; null if never saved."
    )
    today = NoteDailyOutputSerializer(
        allow_null=True, help_text="Today's note (UTC; a note dated tomorrow counts); null if none."
    )
    recent = NoteDailyOutputSerializer(
        many=True,
        help_text=f"The {SHOW_RECENT_DAYS} days before today, newest first; empty days left out.",
    )
    counts = NoteCountsSerializer()
    latest_change_at = serializers.DateTimeField(
        allow_null=True, help_text="When the newest version of any note was written."
    )


class NotePruneInputSerializer(StrictInputSerializer):
    dry_run = serializers.BooleanField(required=False, default=False)


class NotePruneOutputSerializer(serializers.Serializer[Any]):
    pruned = serializers.IntegerField(
        help_text="Daily note versions removed (with dry_run: that would be)."
    )
    dry_run = serializers.BooleanField()
    retention_days = serializers.IntegerField(
        allow_null=True, help_text="The tenant policy's daily_note_retention_days; null: forever."
    )
    cutoff = serializers.DateField(
        allow_null=True, help_text="Days before this one go; null when nothing expires."
    )


class NoteShowView(TenantScopedAPIView):
    @extend_schema(
        operation_id="notes_show",
        summary="Show a person's notes at a glance: long-term, today, recent days, counts",
        description=(
            "Seed 003's memory.show in one answer: the long-term document, today's note, the "
            f"notes of the {SHOW_RECENT_DAYS} days before today, how many notes and versions "
            "are kept, and the latest change. Three queries whatever the history holds."
        ),
        parameters=[USER_ID_PARAMETER],
        responses={200: NoteShowOutputSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, user_id: str) -> Response:
        end_user = end_user_get_for_tenant(tenant=self.tenant, external_id=user_id)
        shown = selectors.note_show(
            tenant=self.tenant,
            end_user=end_user,
            today=services.today_utc(),
            days=SHOW_RECENT_DAYS,
        )
        return Response(
            NoteShowOutputSerializer(
                {
                    "long_term": shown.long_term,
                    "today": shown.today,
                    "recent": shown.recent,
                    "counts": {
                        "long_term_versions": shown.long_term_versions,
                        "daily_notes": shown.daily_days,
                        "daily_versions": shown.daily_versions,
                    },
                    "latest_change_at": shown.latest_change_at,
                }
            ).data
        )


class NotePruneView(TenantScopedAPIView):
    @extend_schema(
        operation_id="notes_prune",
        summary="Prune a person's daily notes past the retention days now (seed 003's prune)",
        description=(
            "Removes every version of the person's daily notes dated more than the tenant "
            "policy's `daily_note_retention_days` (default 30) days ago — what the hourly "
            "retention would remove, now. Audited (`purge`, `daily_notes`). `dry_run` only "
            "counts. The long-term note is never pruned; with no retention (null) nothing goes."
        ),
        parameters=[USER_ID_PARAMETER],
        request=NotePruneInputSerializer,
        responses={200: NotePruneOutputSerializer, 404: NOT_FOUND},
    )
    def post(self, request: Request, user_id: str) -> Response:
        data = NotePruneInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        dry_run: bool = data.validated_data["dry_run"]
        end_user = end_user_get_for_tenant(tenant=self.tenant, external_id=user_id)
        days = memory_policy_for(tenant=self.tenant).daily_note_retention_days
        if days is None:
            pruned, cutoff = 0, None
        else:
            pruned = services.note_daily_prune_for_person(
                tenant=self.tenant,
                end_user=end_user,
                actor=self.actor,
                older_than_days=days,
                dry_run=dry_run,
            )
            cutoff = services.note_prune_cutoff(older_than_days=days)
        return Response(
            NotePruneOutputSerializer(
                {"pruned": pruned, "dry_run": dry_run, "retention_days": days, "cutoff": cutoff}
            ).data
        )
