"""Every error MemoryHub's own code returns under /api/ is JSON in the API's shape, the ones
Django answers outside DRF's views included (400, 403, 500), and an over-long API URL is a JSON
414 (MEMORYHUB_MAX_URL_LENGTH). Pages keep Django's pages."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import RequestDataTooBig
from django.test import RequestFactory

from memoryhub.core import errors
from tests.helpers import error_code

SESSIONS = "/api/v1/sessions/"


def code_of(response: Any) -> str:
    """error_code() for a response a handler returned directly (no test client around it)."""
    assert response["Content-Type"] == "application/json"
    return str(json.loads(response.content)["error"]["code"])


def url_of_length(length: int) -> str:
    prefix = f"{SESSIONS}?agent_id="
    return prefix + "a" * (length - len(prefix))


class TestTheUrlLengthLimit:
    def test_an_api_url_past_the_limit_is_a_json_414(self, api):
        response = api.get(url_of_length(4097))

        assert response.status_code == 414
        assert response["Content-Type"] == "application/json"
        assert error_code(response) == "uri_too_long"
        assert "4097" in response.json()["error"]["message"]

    def test_an_api_url_at_the_limit_goes_through(self, api):
        assert api.get(url_of_length(4096)).status_code == 200

    def test_the_limit_is_a_setting(self, api, limits):
        limits["MAX_URL_LENGTH"] = 100

        assert api.get(url_of_length(101)).status_code == 414
        assert api.get(url_of_length(100)).status_code == 200

    def test_it_is_refused_before_authentication(self, client):
        assert error_code(client.get(url_of_length(5000))) == "uri_too_long"

    @pytest.mark.django_db
    def test_pages_are_left_alone(self, client):
        assert client.get("/search/?q=" + "x" * 5000).status_code != 414


class TestErrorsOutsideDrf:
    def test_a_method_an_endpoint_lacks_is_a_json_405(self, api):
        response = api.put(SESSIONS, {})

        assert response.status_code == 405
        assert error_code(response) == "method_not_allowed"

    @pytest.mark.django_db
    def test_a_host_not_allowed_is_a_json_400_for_the_api(self, client):
        response = client.get(SESSIONS, HTTP_HOST="evil.example")

        assert response.status_code == 400
        assert error_code(response) == "bad_request"

    @pytest.mark.django_db
    def test_a_host_not_allowed_is_djangos_400_page_elsewhere(self, client):
        response = client.get("/login/", HTTP_HOST="evil.example")

        assert response.status_code == 400
        assert response["Content-Type"].startswith("text/html")

    def test_a_body_too_large_read_before_drf_is_a_json_413(self):
        request = RequestFactory().post(SESSIONS)

        response = errors.page_or_api_400(request, RequestDataTooBig("too big"))

        assert response.status_code == 413
        assert code_of(response) == "payload_too_large"

    def test_permission_denied_before_drf_is_a_json_403(self):
        response = errors.page_or_api_403(RequestFactory().get(SESSIONS))

        assert response.status_code == 403
        assert code_of(response) == "permission_denied"

    def test_an_unexpected_error_is_a_json_500_for_the_api_and_a_page_elsewhere(self):
        try:
            raise RuntimeError("a bug")
        except RuntimeError:
            api_response = errors.page_or_api_500(RequestFactory().get(SESSIONS))
            page_response = errors.page_or_api_500(RequestFactory().get("/"))

        assert api_response.status_code == 500
        assert code_of(api_response) == "server_error"
        assert page_response.status_code == 500
        assert page_response["Content-Type"].startswith("text/html")
