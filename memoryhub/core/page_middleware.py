"""The middleware only pages need, skipped by a bot's requests.

A bot calls the API with a key in the Authorization header and JSON in and out: nothing on its
paths reads or writes a cookie, a session, a CSRF token, a flash message or htmx's headers (the
API's only authentication is the key, memoryhub.accounts.authentication). Yet Django's session,
authentication and messages middleware, htmx's and django-csp's ran for every API request,
and together they were a large part of the cheapest one: on a 2-core machine, `GET /healthz`
through the whole stack cost 1.6-2.1 ms of gunicorn CPU and 0.9 ms without them, and an append
0.8 ms less (bench/README.md, "Seventh round"). So each of them is subclassed here to step
aside on MACHINE_PATH_PREFIXES, and settings.MIDDLEWARE names the subclasses (Django's admin
checks find them as the subclasses they are). CsrfViewMiddleware stays Django's own: the deploy
check looks for it by name, and every API view is csrf_exempt (DRF's), so it does little there.

The API's responses keep a Content-Security-Policy: the fixed one OWASP recommends for an API
(nothing may load, nothing may frame it), set as a constant instead of built per response.
Headers set by SecurityMiddleware, XFrameOptionsMiddleware and PermissionsPolicyMiddleware are
on every response, API or page, as before.

In ASGI's async mode the subclasses behave exactly as their parents (no bypass): MemoryHub runs
under WSGI (gunicorn), where the bypass applies.
"""

from __future__ import annotations

from typing import Any

from csp.constants import HEADER as CSP_HEADER
from csp.middleware import CSPMiddleware
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, HttpResponseBase
from django_htmx.middleware import HtmxMiddleware

# Where a request is a machine's: the API, seed 002's compatibility API, MCP, and the probes and
# the metrics scrape. /api/docs/ and /api/schema/ are not here: the docs are a page.
MACHINE_PATH_PREFIXES = ("/api/v1/", "/v1/memory/", "/mcp/", "/healthz", "/readyz", "/metrics")

# OWASP's REST Security Cheat Sheet: a JSON response needs no source of anything, and no page
# may frame it.
MACHINE_CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'"


def is_machine_request(request: HttpRequest) -> bool:
    return request.path.startswith(MACHINE_PATH_PREFIXES)


class _PagesOnly:
    """Mixed in before a middleware class: a machine's request goes straight past it."""

    get_response: Any
    async_mode: bool

    def __call__(self, request: HttpRequest) -> Any:
        if not self.async_mode and is_machine_request(request):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]


class PageSessionMiddleware(_PagesOnly, SessionMiddleware):
    pass


class PageAuthenticationMiddleware(_PagesOnly, AuthenticationMiddleware):
    pass


class PageMessageMiddleware(_PagesOnly, MessageMiddleware):
    pass


class PageHtmxMiddleware(_PagesOnly, HtmxMiddleware):
    pass


class ContentSecurityPolicyMiddleware(CSPMiddleware):
    """django-csp's policy (settings.CONTENT_SECURITY_POLICY, a view's csp_update, nonces) on
    pages; the fixed MACHINE_CONTENT_SECURITY_POLICY on a machine's responses."""

    async_mode: bool  # MiddlewareMixin's, which django-stubs does not declare

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode or not is_machine_request(request):
            return super().__call__(request)
        response = self.get_response(request)
        assert isinstance(response, HttpResponseBase)  # sync mode: a response, not a coroutine
        response.headers.setdefault(CSP_HEADER, MACHINE_CONTENT_SECURITY_POLICY)
        return response
