"""A limit on the length of API URLs, answered in the API's JSON shape.

Servers and proxies refuse an over-long request line with a page of their own (gunicorn: a
plain-text 414). gunicorn.conf.py sets gunicorn's limit to its maximum, 8190 bytes, and this
middleware refuses API URLs past MEMORYHUB_MAX_URL_LENGTH, lower, with a JSON 414: a bot then
gets the same error shape for a long URL as for anything else.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from memoryhub.core.errors import json_error_response
from memoryhub.core.limits import limit


class UrlLengthLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/"):
            # As sent (percent-encoded), path and query: what a server's request line holds.
            length = len(request.get_full_path())
            maximum = limit("MAX_URL_LENGTH")
            if length > maximum:
                return json_error_response(
                    status_code=414,
                    code="uri_too_long",
                    message=f"The URL is {length} characters long; the limit is {maximum}.",
                )
        return self.get_response(request)
