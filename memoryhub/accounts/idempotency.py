"""`Idempotency-Key` for writes a bot may retry: a replay returns the first response and writes
nothing; the same key with a different body is refused (422).

The record is inserted *before* the write, in the same transaction. A concurrent request with the
same key therefore blocks on the unique index until the first commits, then fails the insert and
replays the stored response — it never reaches the write itself.

A stored response may quote what the write stored (a message's text), so it goes when that does:
- erasing a person deletes their records (`end_user`, ON DELETE CASCADE) with the rest of them;
- deleting or purging a session, and retention or a purge by age taking a session or messages,
  blank the records of writes to it (`session_id`; idempotency_responses_erase) in the same
  transaction: the body goes, and so does the request's digest.
A replay of a blanked record answers 410 `idempotency_key_erased` and writes nothing. It must
not replay the deleted answer, and it must not run the write again either: that would bring
back what was deleted (a message appended again to a live session whose old messages a purge
took, a session created again). The blank record keeps the key taken until it expires with the
others (MEMORYHUB_IDEMPOTENCY_TTL_HOURS); a new write takes a new key. After an erasure the
person's records are gone with them, so a replay is a new request: a write to one of their
sessions finds no session (404), and nothing erased is returned.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction
from django.db.models import Q
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from memoryhub.accounts.models import IdempotencyRecord, Tenant
from memoryhub.accounts.services import end_user_hold
from memoryhub.core.errors import IdempotencyKeyReused

HEADER = "Idempotency-Key"
_VALID_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


# What a replay of a write whose data has been deleted since answers (see the module's docstring).
ERASED_STATUS = 410
ERASED_BODY = {
    "error": {
        "code": "idempotency_key_erased",
        "message": (
            "What was written with this Idempotency-Key has been deleted since (a session "
            "delete, a purge or retention), and its answer with it. Nothing was written now; "
            "send a new key to write again."
        ),
    }
}
# A blanked record keeps no digest of the request it answered.
_ERASED_HASH = ""


class Performed(NamedTuple):
    """What a write returns to run_idempotent: the response, whose data it holds, and the
    session it wrote to (if any): the stored response goes when they do."""

    status: int
    body: Any
    end_user_id: int | None = None
    session_id: uuid.UUID | None = None


@dataclass(frozen=True)
class IdempotentOutcome:
    status: int
    body: Any
    replayed: bool


def idempotency_key_from(request: Request) -> str | None:
    return idempotency_key_checked(request.headers.get(HEADER), field=HEADER)


def idempotency_key_checked(raw: str | None, *, field: str) -> str | None:
    """A key as a client sent it (the header, or a tool's argument named `field`), checked."""
    if raw is None:
        return None
    if not _VALID_KEY.match(raw):
        raise exceptions.ValidationError(
            {field: ["Must be 1-255 printable ASCII characters without spaces."]}
        )
    return raw


class IdempotencyKeyErased(exceptions.APIException):
    """An outcome of ERASED_STATUS as an error, for callers that answer with errors rather than
    HTTP responses (the MCP tools)."""

    status_code = ERASED_STATUS
    default_detail = ERASED_BODY["error"]["message"]
    default_code = ERASED_BODY["error"]["code"]


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
        status, body, *_ = perform()
        return IdempotentOutcome(status=status, body=body, replayed=False)
    if tenant.person is not None:
        # A person-bound token's keys are its person's: never a replay of someone else's answer.
        scope = f"{scope}@person:{tenant.person.end_user.pk}"

    for attempt in range(2):
        try:
            with transaction.atomic():
                existing = IdempotencyRecord.objects.filter(
                    tenant=tenant, scope=scope, key=key
                ).first()
                if existing is not None:
                    if existing.request_hash == _ERASED_HASH:
                        return IdempotentOutcome(
                            status=ERASED_STATUS, body=ERASED_BODY, replayed=True
                        )
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
                status, body, end_user_id, session_id = perform()
                if end_user_id is not None:
                    # The record names the person: hold them, as any write of theirs does
                    # (the write itself normally has already; then this waits for nothing).
                    end_user_hold(end_user_id=end_user_id)
                # Store exactly what a JSON client received (UUIDs and datetimes as strings).
                body = json.loads(json.dumps(body, cls=JSONEncoder))
                record.response_status = status
                record.response_body = body
                record.end_user_id = end_user_id
                record.session_id = session_id
                record.save(
                    update_fields=["response_status", "response_body", "end_user", "session_id"]
                )
                return IdempotentOutcome(status=status, body=body, replayed=False)
        except IntegrityError:
            # Another request with this key committed between our read and our insert: loop once
            # more and replay its response.
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


def idempotency_responses_erase(
    *, tenant: Tenant, session_ids: Iterable[uuid.UUID], where: Q | None = None
) -> int:
    """Blank the stored responses of writes to these sessions (narrowed by `where`, e.g. to
    the appends that stored some messages), in the caller's transaction: a replay then answers
    410 and writes nothing. Returns how many were blanked."""
    records = IdempotencyRecord.objects.for_tenant(tenant).filter(session_id__in=list(session_ids))
    if where is not None:
        records = records.filter(where)
    return records.exclude(request_hash=_ERASED_HASH).update(
        response_status=ERASED_STATUS, response_body=ERASED_BODY, request_hash=_ERASED_HASH
    )


IDEMPOTENCY_KEY_PARAMETER = OpenApiParameter(
    HEADER,
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description=(
        "1-255 printable ASCII characters; a retry with the same key replays the answer. Once "
        "what the write stored has been deleted (a session delete, a purge, retention), a retry "
        "answers 410 `idempotency_key_erased` and writes nothing."
    ),
)


IDEMPOTENCY_KEY_ERASED_RESPONSE = OpenApiResponse(
    description=(
        "A retry whose first write was deleted since (a session delete, a purge, retention): "
        "`idempotency_key_erased`; nothing was written."
    )
)


def idempotent_response(outcome: IdempotentOutcome) -> Response:
    """The HTTP response for an outcome; a replay says so in `Idempotent-Replayed`."""
    response = Response(outcome.body, status=outcome.status)
    if outcome.replayed:
        response["Idempotent-Replayed"] = "true"
    return response
