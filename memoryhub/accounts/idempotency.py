"""`Idempotency-Key` for writes a bot may retry: a replay returns the first response and writes
nothing; the same key with a different body is refused (422).

The record is inserted *before* the write, in the same transaction. A concurrent request with the
same key therefore blocks on the unique index until the first commits, then fails the insert and
replays the stored response — it never reaches the write itself.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from memoryhub.accounts.models import IdempotencyRecord, Tenant
from memoryhub.core.errors import IdempotencyKeyReused

HEADER = "Idempotency-Key"
_VALID_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


class Performed(NamedTuple):
    """What a write returns to run_idempotent: the response, and whose data it holds."""

    status: int
    body: Any
    end_user_id: int | None = None


@dataclass(frozen=True)
class IdempotentOutcome:
    status: int
    body: Any
    replayed: bool


def idempotency_key_from(request: Request) -> str | None:
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    if not _VALID_KEY.match(raw):
        raise exceptions.ValidationError(
            {HEADER: ["Must be 1-255 printable ASCII characters without spaces."]}
        )
    return raw


def request_fingerprint(payload: Any) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def run_idempotent(
    *,
    tenant: Tenant,
    key: str | None,
    scope: str,
    fingerprint: str,
    perform: Callable[[], Performed],
) -> IdempotentOutcome:
    """Run `perform` (which must return a JSON-ready body) at most once per (tenant, scope, key)."""
    if key is None:
        status, body, _ = perform()
        return IdempotentOutcome(status=status, body=body, replayed=False)

    for attempt in range(2):
        try:
            with transaction.atomic():
                existing = IdempotencyRecord.objects.filter(
                    tenant=tenant, scope=scope, key=key
                ).first()
                if existing is not None:
                    if existing.request_hash != fingerprint:
                        raise IdempotencyKeyReused()
                    return IdempotentOutcome(
                        status=existing.response_status,
                        body=existing.response_body,
                        replayed=True,
                    )
                record = IdempotencyRecord.objects.create(
                    tenant=tenant,
                    scope=scope,
                    key=key,
                    request_hash=fingerprint,
                    response_status=0,
                    response_body={},
                )
                status, body, end_user_id = perform()
                # Store exactly what a JSON client received (UUIDs and datetimes as strings).
                body = json.loads(json.dumps(body, cls=JSONEncoder))
                record.response_status = status
                record.response_body = body
                record.end_user_id = end_user_id
                record.save(update_fields=["response_status", "response_body", "end_user"])
                return IdempotentOutcome(status=status, body=body, replayed=False)
        except IntegrityError:
            # Another request with this key committed between our read and our insert: loop once
            # more and replay its response.
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


IDEMPOTENCY_KEY_PARAMETER = OpenApiParameter(
    HEADER,
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="1-255 printable ASCII characters; a retry with the same key replays the answer.",
)


def idempotent_response(outcome: IdempotentOutcome) -> Response:
    """The HTTP response for an outcome; a replay says so in `Idempotent-Replayed`."""
    response = Response(outcome.body, status=outcome.status)
    if outcome.replayed:
        response["Idempotent-Replayed"] = "true"
    return response
