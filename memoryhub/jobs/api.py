"""`GET /sessions/{id}/jobs/`: the state of the session's background work."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memoryhub.accounts.api import TenantScopedAPIView
from memoryhub.jobs.models import JobKind, JobState
from memoryhub.jobs.selectors import IDLE, session_jobs
from sessions_app.api.views import NOT_FOUND, SESSION_ID_PARAMETER
from sessions_app.selectors import session_get_for_tenant


class JobStatusSerializer(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=JobKind.choices)
    state = serializers.ChoiceField(
        choices=[(IDLE, "Idle"), *JobState.choices],
        help_text=(
            "idle: never requested; requested: queued (or waiting to retry after `error`); "
            "running; done; failed (see `error`; the beat sweep retries it later)."
        ),
    )
    requested_at = serializers.DateTimeField(
        allow_null=True, help_text="When the pending run was requested; null when none is."
    )
    started_at = serializers.DateTimeField(allow_null=True, help_text="The last run's start.")
    finished_at = serializers.DateTimeField(allow_null=True, help_text="The last run's end.")
    attempt = serializers.IntegerField(allow_null=True, help_text="1, or more after retries.")
    error = serializers.CharField(allow_blank=True, help_text="The last run's error, if any.")
    result = serializers.IntegerField(
        allow_null=True,
        help_text="What the last run returned: the summary's through_seq, facts or vectors made.",
    )


class SessionJobsOutputSerializer(serializers.Serializer[Any]):
    session_id = serializers.UUIDField()
    jobs = JobStatusSerializer(many=True)


class SessionJobsView(TenantScopedAPIView):
    @extend_schema(
        operation_id="sessions_jobs",
        summary="The state of the session's summary, fact extraction and embedding work",
        parameters=[SESSION_ID_PARAMETER],
        responses={200: SessionJobsOutputSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, session_id: str) -> Response:
        session = session_get_for_tenant(tenant=self.tenant, session_id=session_id)
        output = {"session_id": session.pk, "jobs": session_jobs(session=session)}
        return Response(SessionJobsOutputSerializer(output).data)
