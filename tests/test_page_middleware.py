"""The middleware only pages need steps aside for a machine's requests (memoryhub.core.
page_middleware): no session, user, flash messages or htmx details are made for the API, its
responses carry the fixed API policy, and pages keep everything they had."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from memoryhub.accounts.models import MembershipRole
from memoryhub.core.page_middleware import (
    MACHINE_CONTENT_SECURITY_POLICY,
    ContentSecurityPolicyMiddleware,
    PageAuthenticationMiddleware,
    PageHtmxMiddleware,
    PageMessageMiddleware,
    PageSessionMiddleware,
    is_machine_request,
)

PAGE_ONLY = [
    (PageSessionMiddleware, "session"),
    (PageAuthenticationMiddleware, "user"),
    (PageMessageMiddleware, "_messages"),
    (PageHtmxMiddleware, "htmx"),
]


def _seen_by_view(middleware_class: type, path: str) -> HttpRequest:
    seen: list[HttpRequest] = []

    def view(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return HttpResponse("ok")

    # The session middleware first: the authentication and messages ones read the session.
    inner = middleware_class(view)
    chain = inner if middleware_class is PageSessionMiddleware else PageSessionMiddleware(inner)
    chain(RequestFactory().get(path))
    return seen[0]


@pytest.mark.parametrize(
    "path",
    ["/api/v1/sessions/", "/v1/memory/sessions", "/mcp/", "/healthz", "/readyz", "/metrics"],
)
def test_machine_paths(path):
    assert is_machine_request(RequestFactory().get(path))


@pytest.mark.parametrize(
    "path", ["/", "/login/", "/sessions/", "/admin/", "/api/docs/", "/api/schema/"]
)
def test_pages_and_the_api_docs_are_not_machine_paths(path):
    assert not is_machine_request(RequestFactory().get(path))


@pytest.mark.django_db
@pytest.mark.parametrize(("middleware_class", "attribute"), PAGE_ONLY)
def test_an_api_request_goes_past_the_page_middleware(middleware_class, attribute):
    request = _seen_by_view(middleware_class, "/api/v1/sessions/")

    assert not hasattr(request, attribute)


@pytest.mark.django_db
@pytest.mark.parametrize(("middleware_class", "attribute"), PAGE_ONLY)
def test_a_page_request_still_gets_what_the_middleware_gives(middleware_class, attribute):
    request = _seen_by_view(middleware_class, "/sessions/")

    assert hasattr(request, attribute)


def test_the_settings_name_the_subclasses():
    for middleware_class, _ in PAGE_ONLY:
        path = f"{middleware_class.__module__}.{middleware_class.__qualname__}"
        assert path in settings.MIDDLEWARE
    assert "memoryhub.core.page_middleware.ContentSecurityPolicyMiddleware" in settings.MIDDLEWARE


def test_an_api_response_carries_the_fixed_api_policy_and_no_cookie(api):
    response = api.get("/api/v1/sessions/")

    assert response.status_code == 200
    assert response["Content-Security-Policy"] == MACHINE_CONTENT_SECURITY_POLICY
    assert response.cookies == {}
    assert "Cookie" not in response.get("Vary", "")
    # Set by the middleware that stays for every response.
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "camera=()" in response["Permissions-Policy"]


def test_an_api_error_carries_it_too(api):
    response = api.get("/api/v1/sessions/not-a-session/")

    assert response.status_code == 404
    assert response["Content-Security-Policy"] == MACHINE_CONTENT_SECURITY_POLICY


def test_a_policy_a_response_brings_is_kept():
    def view(request: HttpRequest) -> HttpResponse:
        response = HttpResponse("ok")
        response["Content-Security-Policy"] = "default-src 'self'"
        return response

    response = ContentSecurityPolicyMiddleware(view)(RequestFactory().get("/api/v1/x/"))

    assert response["Content-Security-Policy"] == "default-src 'self'"


@pytest.mark.django_db
def test_pages_keep_the_site_policy_the_session_and_the_csrf_cookie(client, tenant, member_client):
    login = client.get("/login/")
    assert "script-src 'self'" in login["Content-Security-Policy"]
    assert "csrftoken" in login.cookies

    owner = member_client(tenant, MembershipRole.OWNER)
    page = owner.get("/")
    assert page.status_code == 200
    assert page.wsgi_request.user.is_authenticated
    assert "script-src 'self'" in page["Content-Security-Policy"]
