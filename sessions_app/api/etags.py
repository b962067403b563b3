"""What the plan and task-context endpoints share: path ids, If-Match in, ETag out."""

from __future__ import annotations

import re

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework.request import Request
from rest_framework.response import Response

from memoryhub.core.errors import ResourceNotFound
from sessions_app.models import WORK_ID_MAX_LENGTH
from sessions_app.preconditions import IF_MATCH, IfMatch, if_match_from

_WORK_ID = re.compile(rf"^[^\x00-\x1f\x7f/]{{1,{WORK_ID_MAX_LENGTH}}}$")


def work_id_from_path(raw: str, *, what: str) -> str:
    """A task, sub-task or plan id from the URL; one no row could have is a 404 like any
    unknown id (and never reaches the database, which could not compare it)."""
    if not _WORK_ID.match(raw):
        raise ResourceNotFound(f"No such {what}.")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise ResourceNotFound(f"No such {what}.") from None
    return raw


def if_match(request: Request) -> IfMatch | None:
    return if_match_from(request.headers.get(IF_MATCH))


def with_etag(response: Response, etag: str) -> Response:
    response["ETag"] = etag
    return response


IF_MATCH_REQUIRED = OpenApiParameter(
    IF_MATCH,
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=True,
    description=(
        "The ETag you read (or `*` to overwrite any version). Missing: 428; stale: 412, and "
        "nothing is changed."
    ),
)
IF_MATCH_OPTIONAL = OpenApiParameter(
    IF_MATCH,
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Optional: only apply if the resource is still at this ETag (412 otherwise).",
)
ETAG_HEADER = OpenApiParameter(
    "ETag",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    response=[200, 201],
    description="The version just read or written (a strong ETag); send it back as If-Match.",
)
PRECONDITION_FAILED = OpenApiResponse(
    description="If-Match does not match the current ETag: nothing was changed."
)
PRECONDITION_REQUIRED = OpenApiResponse(description="If-Match is required for a replacement.")
