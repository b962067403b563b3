"""MemoryHub's error answers as exceptions.

The server answers every error as `{"error": {"code", "message", "fields"?}}`; `code` is stable
and machine-readable. The HTTP status picks the class, so `except NotFoundError` works whatever
the code; `.code` tells finer cases apart (`insufficient_scope`, `idempotency_key_reused`, …).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any


class MemoryHubError(Exception):
    """Every error this package raises. `status` is None when no HTTP answer came back."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        status: int | None = None,
        fields: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.fields: dict[str, Any] = dict(fields or {})
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"{self.status} " if self.status is not None else ""
        return f"{where}{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status!r})"


class APIConnectionError(MemoryHubError):
    """No answer: the connection failed or timed out (after the retries that were safe)."""


class ValidationError(MemoryHubError):
    """400 (and 413, 415): the request was refused as sent. `fields` maps each bad field to its
    errors: `{"role": [{"code": "invalid_choice", "message": "…"}]}`; a batch item's errors are
    keyed by its index under `messages`."""


class PayloadTooLargeError(ValidationError):
    """413: the body is over the server's limit."""


class AuthenticationError(MemoryHubError):
    """401: no key or a wrong one; 403: the key lacks the scope (a PermissionDeniedError)."""


class PermissionDeniedError(AuthenticationError):
    """403: the key is valid but lacks the scope (`insufficient_scope`)."""


class NotFoundError(MemoryHubError):
    """404: missing, or another tenant's (the server never tells the two apart)."""


class ConflictError(MemoryHubError):
    """409: the request conflicts with what is stored (e.g. an external key held by another
    person's session, a finished plan changing status)."""


class IdempotencyKeyReusedError(ConflictError):
    """422: the Idempotency-Key was already used with a different body."""


class PreconditionFailedError(MemoryHubError):
    """412: `If-Match` no longer matches (read again, reapply, retry); 428: a replacement
    needs `if_match=`."""


class RateLimitedError(MemoryHubError):
    """429: too many requests; `retry_after` is the seconds the server asked to wait."""


class ServerError(MemoryHubError):
    """5xx."""


class ServiceUnavailableError(ServerError):
    """503: the server or its database is not ready; `retry_after` when the server said."""


_BY_STATUS: dict[int, type[MemoryHubError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    412: PreconditionFailedError,
    413: PayloadTooLargeError,
    415: ValidationError,
    422: IdempotencyKeyReusedError,
    428: PreconditionFailedError,
    429: RateLimitedError,
    503: ServiceUnavailableError,
}


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_for(
    *, status: int, body: Any, reason: str = "", retry_after: str | None = None
) -> MemoryHubError:
    """The exception for an error answer (any body: a proxy's HTML page gets a generic one)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = str(error.get("code") or f"http_{status}")
        message = str(error.get("message") or reason or code)
        fields = error.get("fields") if isinstance(error.get("fields"), dict) else None
    else:
        code, message, fields = f"http_{status}", reason or f"HTTP {status}", None
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else MemoryHubError)
    return cls(
        message,
        code=code,
        status=status,
        fields=fields,
        retry_after=parse_retry_after(retry_after),
    )
