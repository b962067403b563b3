"""One error shape for every 4xx/5xx the API returns:

    {"error": {"code": "validation_error", "message": "...",
               "fields": {"role": [{"code": "invalid_choice", "message": "..."}]}}}

`code` is stable and machine-readable; `message` is for people; `fields` comes with validation
errors.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template import loader
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response

logger = logging.getLogger(__name__)


# --- domain errors: plain Python, raised by services and selectors, translated below -----------


class ResourceNotFound(Exception):
    """A missing or foreign id: the API answers 404 either way."""


class InvalidInput(ValueError):
    """Input a service refuses; the API answers 400 with `field`'s message."""

    def __init__(self, *, field: str, message: str, code: str = "invalid") -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.code = code


class DomainError(Exception):
    """A refusal with a fixed HTTP meaning (409, 412, 428…); subclasses set the status, code and
    default message, and the API's exception handler answers with them."""

    http_status = 400
    default_code = "invalid"
    default_message = "The request cannot be carried out."
    # Optional, set by a subclass: per-field errors ({"field": [{"code", "message"}]}) and
    # further keys of the error object (a redaction refusal's classes).
    fields: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None

    def __init__(self, message: str | None = None, code: str | None = None) -> None:
        self.message = message or self.default_message
        self.code = code or self.default_code
        super().__init__(self.message)


class Conflict(DomainError):
    """The request conflicts with the current state of a resource."""

    http_status = 409
    default_code = "conflict"
    default_message = "The request conflicts with the current state of the resource."


class PreconditionFailed(DomainError):
    http_status = 412
    default_code = "precondition_failed"
    default_message = (
        "The resource changed since you read it (If-Match does not match its ETag). "
        "Read it again, reapply your change and retry."
    )


class PreconditionRequired(DomainError):
    http_status = 428
    default_code = "precondition_required"
    default_message = (
        "Send If-Match with the ETag you read: a blind replacement could undo someone "
        "else's change."
    )


# --- HTTP-only errors ---------------------------------------------------------------------------


def _api_exception_for(error: DomainError) -> exceptions.APIException:
    exc = exceptions.APIException(error.message, error.code)
    exc.status_code = error.http_status
    return exc


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "payload_too_large"


class IdempotencyKeyReused(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "This Idempotency-Key was already used with a different request body."
    default_code = "idempotency_key_reused"


class RateLimited(exceptions.Throttled):
    """An API key past its request rate (MEMORYHUB_RATE_LIMIT_PER_KEY); DRF's own `Throttled`
    is answered as this, so every 429 of a throttle says `rate_limited`."""

    default_detail = "Too many requests for this API key."
    default_code = "rate_limited"
    extra_detail_singular = "Retry in {wait} second."
    extra_detail_plural = "Retry in {wait} seconds."


class TooManyFailedAuthentications(exceptions.Throttled):
    """Too many wrong API keys from one client address: refused before the key is looked at."""

    default_detail = "Too many failed authentications from this address."
    default_code = "too_many_failed_authentications"
    extra_detail_singular = "Retry in {wait} second."
    extra_detail_plural = "Retry in {wait} seconds."


class ServiceUnavailable(exceptions.APIException):
    """Something MemoryHub needs (the database, the task queue) does not answer: 503 with
    Retry-After (MEMORYHUB_RETRY_AFTER_SECONDS), so that a client retries instead of giving up."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The service is unavailable for a moment. Retry after Retry-After seconds."
    default_code = "service_unavailable"

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail)
        # DRF's exception handler turns `wait` into the Retry-After header (as for a 429).
        self.wait = settings.MEMORYHUB_RETRY_AFTER_SECONDS


# Connection refused or lost, too many connections, a server shutting down, a deadlock or a
# lock timeout: the database's transient failures. (SQLite also says OperationalError for a
# missing table; that too is logged with its message.)
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)
DATABASE_UNAVAILABLE_MESSAGE = (
    "The database is unavailable for a moment. Retry after Retry-After seconds."
)


def _field_errors(detail: Any) -> Any:
    """Turn DRF's nested ErrorDetail structure into {"field": [{"code", "message"}]}."""
    if isinstance(detail, dict):
        return {str(key): _field_errors(value) for key, value in detail.items()}
    if isinstance(detail, list):
        if all(isinstance(item, exceptions.ErrorDetail) for item in detail):
            return [{"code": item.code, "message": str(item)} for item in detail]
        return [_field_errors(item) for item in detail]
    if isinstance(detail, exceptions.ErrorDetail):
        return [{"code": detail.code, "message": str(detail)}]
    return [{"code": "invalid", "message": str(detail)}]


def _error_body(
    code: str, message: str, fields: Any = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if fields is not None:
        error["fields"] = fields
    if extra:
        error.update({key: value for key, value in extra.items() if key not in error})
    return {"error": error}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    domain_error: DomainError | None = None
    if isinstance(exc, DATABASE_UNAVAILABLE):
        # Raised anywhere in the view, authentication included (the key is looked up there).
        logger.warning("database unavailable, answering 503: %s", exc)
        exc = ServiceUnavailable(DATABASE_UNAVAILABLE_MESSAGE)
    elif isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge()
    elif isinstance(exc, ResourceNotFound):
        exc = Http404(str(exc))
    elif isinstance(exc, DomainError):
        domain_error = exc
        exc = _api_exception_for(exc)
    elif type(exc) is exceptions.Throttled:
        exc = RateLimited(wait=getattr(exc, "wait", None))
    elif isinstance(exc, InvalidInput):
        exc = exceptions.ValidationError(
            {exc.field: [exceptions.ErrorDetail(exc.message, exc.code)]}
        )
    # Imported here: rest_framework.views loads the authentication classes, which import the
    # domain errors above (a cycle at import time).
    from rest_framework.views import exception_handler

    response = exception_handler(exc, context)
    if response is None:
        # Unexpected: let Django log it, but still answer in our shape rather than an HTML page.
        logger.exception("Unhandled API error", exc_info=exc)
        return Response(
            _error_body("server_error", "An unexpected error occurred."),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )

    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail
        if isinstance(detail, dict):
            non_field: Any = detail.get("non_field_errors")
            message = str(non_field[0]) if non_field else "The request has invalid fields."
            fields = _field_errors(detail)
        else:
            items: list[Any] = detail if isinstance(detail, list) else [detail]
            message = str(items[0]) if items else "The request is invalid."
            fields = {"non_field_errors": _field_errors(items)}
        response.data = _error_body("validation_error", message, fields)
    elif isinstance(exc, Http404):
        response.data = _error_body("not_found", "Not found.")
    elif isinstance(exc, PermissionDenied):
        response.data = _error_body("permission_denied", "You do not have permission.")
    elif isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        api_detail: Any = exc.detail
        message = (
            str(api_detail) if not isinstance(api_detail, dict | list) else str(exc.default_detail)
        )
        if domain_error is not None:
            response.data = _error_body(str(code), message, domain_error.fields, domain_error.extra)
        else:
            response.data = _error_body(str(code), message)
    return response


def json_error_response(*, status_code: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(_error_body(code, message), status=status_code)


# --- Django's error handlers (memoryhub/urls.py): what happens outside DRF's views --------------
# Under /api/ they answer in the API's shape; pages keep Django's pages (and a plain one for 503).


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def page_or_api_400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """A request Django refuses before any view (a bad Host header, too many form fields, a body
    read outside DRF that is too large)."""
    if not _is_api(request):
        return defaults.bad_request(request, exception or Exception())
    if isinstance(exception, RequestDataTooBig):
        return json_error_response(
            status_code=413,
            code=PayloadTooLarge.default_code,
            message=PayloadTooLarge.default_detail,
        )
    return json_error_response(
        status_code=400, code="bad_request", message="The request is malformed."
    )


def page_or_api_403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return json_error_response(
            status_code=403, code="permission_denied", message="You do not have permission."
        )
    return defaults.permission_denied(request, exception or PermissionDenied())


def page_or_api_404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Unknown URLs under /api/ answer in the API's JSON shape; pages keep Django's 404 page."""
    if _is_api(request):
        return json_error_response(status_code=404, code="not_found", message="Not found.")
    return defaults.page_not_found(request, exception or Http404())


def page_or_api_500(request: HttpRequest) -> HttpResponse:
    """An exception no view handled. Django calls this inside its `except`, so the exception is
    at hand: a database outage is a 503 with Retry-After (JSON, or a plain page that needs
    nothing from the database), anything else a 500."""
    if isinstance(sys.exc_info()[1], DATABASE_UNAVAILABLE):
        return service_unavailable_response(request, message=DATABASE_UNAVAILABLE_MESSAGE)
    if _is_api(request):
        return json_error_response(
            status_code=500, code="server_error", message="An unexpected error occurred."
        )
    return defaults.server_error(request)


def service_unavailable_response(request: HttpRequest, *, message: str) -> HttpResponse:
    seconds = settings.MEMORYHUB_RETRY_AFTER_SECONDS
    response: HttpResponse
    if _is_api(request):
        response = json_error_response(
            status_code=503, code=ServiceUnavailable.default_code, message=message
        )
    else:
        # Rendered without the request: context processors would ask the database.
        page = loader.render_to_string("503.html", {"retry_after": seconds})
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(seconds)
    return response
