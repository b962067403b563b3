"""Notes endpoints (seed 003): a person's long-term document and daily notes, append-only.

Each view translates a request into one selector or service call. Reads of an unknown (or
another tenant's) person are 404; writes create the person in the key's tenant.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from facts_app.models import Note
from facts_app.selectors import notes as selectors
from facts_app.services import notes as services
from memoryhub.accounts.api import LimitCursorPagination, TenantScopedAPIView
from memoryhub.accounts.idempotency import (
    IDEMPOTENCY_KEY_PARAMETER,
    Performed,
    idempotency_key_from,
    idempotent_response,
    request_fingerprint,
    run_idempotent,
)
from memoryhub.accounts.models import EndUser
from memoryhub.accounts.selectors import end_user_get_for_tenant
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.fields import StrictCharField
from memoryhub.core.limits import limit, validate_text_size
from memoryhub.core.serializers import StrictInputSerializer

QUERY_MAX_LENGTH = 1000

# --- serializers --------------------------------------------------------------------------------


def _content_size(value: str) -> None:
    validate_text_size(value, limit_name="NOTE_CONTENT_MAX_BYTES", what="content")


class NoteLongTermInputSerializer(StrictInputSerializer):
    # Stored exactly as sent (no trimming); "" is allowed and means an empty document.
    content = StrictCharField(allow_blank=True, trim_whitespace=False, validators=[_content_size])


class NoteDailyInputSerializer(StrictInputSerializer):
    content = StrictCharField(trim_whitespace=False, validators=[_content_size])
    day = serializers.DateField(
        required=False, help_text="YYYY-MM-DD; today (UTC) when omitted. At most tomorrow."
    )

    def validate_content(self, value: str) -> str:
        # Appending only whitespace would add a version that says nothing.
        if not value.strip():
            raise serializers.ValidationError("Content may not be blank.", code="blank")
        return value

    def validate_day(self, value: dt.date) -> dt.date:
        # A bot ahead of UTC may write under tomorrow's date; further out is a client bug.
        if value > services.today_utc() + dt.timedelta(days=1):
            raise serializers.ValidationError("The day may not be in the future.", code="future")
        return value


class NoteRecallQuerySerializer(serializers.Serializer[Any]):
    days = serializers.IntegerField(
        required=False,
        default=selectors.RECALL_DAYS_DEFAULT,
        min_value=1,
        max_value=selectors.RECALL_DAYS_MAX,
        help_text="Daily notes of the last N days, today included.",
    )
    q = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=QUERY_MAX_LENGTH,
        help_text=(
            "Keep only notes whose current text contains any of these words (case-insensitive; "
            "words shorter than 2 characters are ignored)."
        ),
    )


class NoteDailyQuerySerializer(serializers.Serializer[Any]):
    history_limit = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="How many versions `history` holds, newest first (default and maximum: the "
        "page size limits).",
    )

    def validate_history_limit(self, value: int) -> int:
        maximum = limit("PAGE_SIZE_MAX")
        if value > maximum:
            raise serializers.ValidationError(f"At most {maximum}.", code="max_value")
        return value


class NoteVersionOutputSerializer(serializers.ModelSerializer[Note]):
    updated_at = serializers.DateTimeField(
        source="created_at", help_text="When this version was written."
    )

    class Meta:
        model = Note
        fields = ["content", "version", "updated_at"]
        read_only_fields = fields


class NoteDailyOutputSerializer(NoteVersionOutputSerializer):
    day = serializers.DateField(read_only=True)

    class Meta(NoteVersionOutputSerializer.Meta):
        fields = ["day", *NoteVersionOutputSerializer.Meta.fields]
        read_only_fields = fields


class NoteDailyDetailOutputSerializer(NoteDailyOutputSerializer):
    history = NoteVersionOutputSerializer(
        many=True, read_only=True, help_text="Versions of this day, newest (current) first."
    )
    has_more_history = serializers.BooleanField(
        read_only=True, help_text="Older versions exist beyond `history_limit`."
    )

    class Meta(NoteDailyOutputSerializer.Meta):
        fields = [*NoteDailyOutputSerializer.Meta.fields, "history", "has_more_history"]
        read_only_fields = fields


class NoteRecallOutputSerializer(serializers.Serializer[Any]):
    long_term = NoteVersionOutputSerializer(
        allow_null=True, help_text="The current long-term document; null if none (or no match)."
    )
    daily = NoteDailyOutputSerializer(
        many=True, help_text="Current daily notes, newest day first; cleared days are left out."
    )


class NoteVersionPageSerializer(serializers.Serializer[Any]):
    next = serializers.CharField(allow_null=True, help_text="URL of the next (older) page.")
    previous = serializers.CharField(allow_null=True, help_text="URL of the previous page.")
    results = NoteVersionOutputSerializer(many=True)


class NoteClearOutputSerializer(serializers.Serializer[Any]):
    cleared = serializers.IntegerField(help_text="How many notes got a new, empty version.")


# --- helpers ------------------------------------------------------------------------------------

USER_ID_PARAMETER = OpenApiParameter(
    "user_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The bot's own id for the person (`whatsapp:+4912…`).",
)
DAY_PARAMETER = OpenApiParameter(
    "day", OpenApiTypes.DATE, OpenApiParameter.PATH, description="YYYY-MM-DD."
)
NOT_FOUND = OpenApiResponse(description="No such user (or note) for this API key's tenant.")


def _existing_user(view: TenantScopedAPIView, user_id: str) -> EndUser:
    return end_user_get_for_tenant(tenant=view.tenant, external_id=user_id)


def _user_for_write(view: TenantScopedAPIView, user_id: str) -> EndUser:
    return end_user_get_or_create(tenant=view.tenant, external_id=user_id)


def _day(raw: str) -> dt.date:
    try:
        parsed: dt.date = serializers.DateField().run_validation(raw)
    except exceptions.ValidationError as error:
        raise exceptions.ValidationError({"day": error.detail}) from None
    return parsed


def _valid(serializer_class: type[serializers.Serializer[Any]], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class NoteHistoryPagination(LimitCursorPagination):
    # The version is unique per note, so it alone is a total order.
    ordering = ("-version",)


# --- views --------------------------------------------------------------------------------------


class NotesRecallView(TenantScopedAPIView):
    @extend_schema(
        operation_id="notes_recall",
        summary="Recall a person's notes: the long-term document and recent daily notes",
        description=(
            "Seed 003's memory.recall / memory.show. Daily notes of the last `days` days "
            "(today in UTC included), newest day first; `q` keeps only notes whose current text "
            "contains any of its words."
        ),
        parameters=[USER_ID_PARAMETER, NoteRecallQuerySerializer],
        responses={200: NoteRecallOutputSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, user_id: str) -> Response:
        params = _valid(NoteRecallQuerySerializer, request.query_params)
        end_user = _existing_user(self, user_id)
        recall = selectors.note_recall(
            tenant=self.tenant,
            end_user=end_user,
            today=services.today_utc(),
            days=params["days"],
            query=params["q"],
        )
        return Response(
            NoteRecallOutputSerializer({"long_term": recall.long_term, "daily": recall.daily}).data
        )


class NoteLongTermView(TenantScopedAPIView):
    @extend_schema(
        operation_id="notes_long_term_get",
        summary="Get the current long-term note",
        parameters=[USER_ID_PARAMETER],
        responses={
            200: NoteVersionOutputSerializer,
            404: OpenApiResponse(description="No such user, or no long-term note saved yet."),
        },
    )
    def get(self, request: Request, user_id: str) -> Response:
        end_user = _existing_user(self, user_id)
        note = selectors.note_long_term_current(tenant=self.tenant, end_user=end_user)
        if note is None:
            raise ResourceNotFound("No long-term note.")
        return Response(NoteVersionOutputSerializer(note).data)

    @extend_schema(
        operation_id="notes_long_term_save",
        summary="Replace the long-term note (a new version; the old ones are kept)",
        description=(
            'Creates the person if needed. `""` saves an empty document. Saving the text that '
            "is already current writes no new version and returns the current one."
        ),
        parameters=[USER_ID_PARAMETER],
        request=NoteLongTermInputSerializer,
        responses={200: NoteVersionOutputSerializer},
        examples=[
            OpenApiExample(
                "Preferences", value={"content": "Prefers Python 3.12. Always use type hints."}
            )
        ],
    )
    def put(self, request: Request, user_id: str) -> Response:
        data = _valid(NoteLongTermInputSerializer, request.data)
        end_user = _user_for_write(self, user_id)
        note = services.note_long_term_save(
            tenant=self.tenant, end_user=end_user, content=data["content"]
        )
        return Response(NoteVersionOutputSerializer(note).data)


class NoteLongTermHistoryView(TenantScopedAPIView):
    @extend_schema(
        operation_id="notes_long_term_history",
        summary="Every version of the long-term note, newest first (cursor-paginated)",
        parameters=[
            USER_ID_PARAMETER,
            OpenApiParameter("cursor", OpenApiTypes.STR, description="From `next`/`previous`."),
            OpenApiParameter("limit", OpenApiTypes.INT, description="Versions per page."),
        ],
        responses={200: NoteVersionPageSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, user_id: str) -> Response:
        paginator = NoteHistoryPagination()
        # The page size is checked before the lookup: bad input is a 400 for anyone's user id.
        paginator.get_page_size(request)
        end_user = _existing_user(self, user_id)
        versions = selectors.note_long_term_history(tenant=self.tenant, end_user=end_user)
        page = paginator.paginate_queryset(versions, request, view=self) or []
        return paginator.get_paginated_response(NoteVersionOutputSerializer(page, many=True).data)


class NoteDailyView(TenantScopedAPIView):
    @extend_schema(
        operation_id="notes_daily_append",
        summary="Append to a day's note (a new version holding the whole day's text)",
        description=(
            "Joins `content` onto the day's current text with a newline. `day` defaults to "
            "today in UTC. Creates the person if needed. A result past the note size limit is a "
            "400. Send an `Idempotency-Key` header to make a retried append safe."
        ),
        parameters=[USER_ID_PARAMETER, IDEMPOTENCY_KEY_PARAMETER],
        request=NoteDailyInputSerializer,
        responses={201: NoteDailyOutputSerializer, 422: OpenApiResponse()},
        examples=[
            OpenApiExample(
                "A work note",
                value={"content": "- Fixed the model_runner tests", "day": "2026-02-10"},
            )
        ],
    )
    def post(self, request: Request, user_id: str) -> Response:
        key = idempotency_key_from(request)
        data = _valid(NoteDailyInputSerializer, request.data)
        end_user = _user_for_write(self, user_id)

        def perform() -> Performed:
            note = services.note_daily_append(
                tenant=self.tenant,
                end_user=end_user,
                content=data["content"],
                day=data.get("day"),
            )
            return Performed(
                status.HTTP_201_CREATED, NoteDailyOutputSerializer(note).data, end_user.pk
            )

        outcome = run_idempotent(
            tenant=self.tenant,
            key=key,
            scope="notes.daily.append",
            fingerprint=request_fingerprint({"user_id": user_id, "body": request.data}),
            perform=perform,
        )
        return idempotent_response(outcome)


class NoteDailyDayView(TenantScopedAPIView):
    @extend_schema(
        operation_id="notes_daily_get",
        summary="Get one day's note with its versions, newest first",
        parameters=[USER_ID_PARAMETER, DAY_PARAMETER, NoteDailyQuerySerializer],
        responses={
            200: NoteDailyDetailOutputSerializer,
            404: OpenApiResponse(description="No such user, or no note that day."),
        },
    )
    def get(self, request: Request, user_id: str, day: str) -> Response:
        note_day = _day(day)
        params = _valid(NoteDailyQuerySerializer, request.query_params)
        history_limit = params.get("history_limit") or limit("PAGE_SIZE_DEFAULT")
        end_user = _existing_user(self, user_id)
        versions = selectors.note_daily_history(tenant=self.tenant, end_user=end_user, day=note_day)
        # One more than shown tells whether older versions exist, without a count.
        found = list(versions[: history_limit + 1])
        if not found:
            raise ResourceNotFound("No note that day.")
        body = {
            **NoteDailyOutputSerializer(found[0]).data,
            "history": NoteVersionOutputSerializer(found[:history_limit], many=True).data,
            "has_more_history": len(found) > history_limit,
        }
        return Response(body)


class NoteClearView(TenantScopedAPIView):
    @extend_schema(
        operation_id="notes_clear",
        summary="Clear a person's notes: an empty new version of each (history is kept)",
        description=(
            "Seed 003's memory.clear. Idempotent: a second clear finds nothing to clear. An "
            "unknown user has nothing to clear (`cleared: 0`) and is not created."
        ),
        parameters=[USER_ID_PARAMETER],
        request=None,
        responses={200: NoteClearOutputSerializer},
    )
    def post(self, request: Request, user_id: str) -> Response:
        try:
            end_user = _existing_user(self, user_id)
        except ResourceNotFound:
            return Response({"cleared": 0})
        cleared = services.note_clear(tenant=self.tenant, end_user=end_user)
        return Response(NoteClearOutputSerializer({"cleared": cleared}).data)
