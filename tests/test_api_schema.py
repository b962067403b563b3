"""The OpenAPI schema is valid, documented, and true: schemathesis generates requests from it and
checks that nothing answers 5xx and every response matches the schema."""

from __future__ import annotations

import itertools
import os

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis import checks as st_checks

from memoryhub.accounts.services import api_key_create
from memoryhub.wsgi import application
from sessions_app.models import Session
from sessions_app.services import session_create_or_get
from tests.factories import TenantFactory

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)

ROUNDS = itertools.count()


def test_the_schema_and_the_docs_are_served(client):
    schema_response = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    docs = client.get("/api/docs/")

    assert schema_response.status_code == 200
    paths = schema_response.json()["paths"]
    assert "/api/v1/sessions/{session_id}/messages/" in paths
    assert docs.status_code == 200
    assert b"swagger-ui" in docs.content


@pytest.fixture
def fuzz_target(db):
    # Requests go through the real WSGI app; like Django's test client, keep the test's database
    # connection open across them (Django would close it at the end of every request).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    tenant = TenantFactory(slug="fuzz")
    _, secret = api_key_create(tenant=tenant, name="fuzz", scopes=["read", "write"])
    yield {"tenant": tenant, "secret": secret}
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def _real_session(tenant) -> Session:
    session = Session.objects.for_tenant(tenant).select_related("end_user").first()
    if session is None or session.end_user is None:
        session, _ = session_create_or_get(tenant=tenant, user_id="fuzz:user")
    return session


@pytest.mark.slow
@schema.parametrize()
@settings(
    # ~40 per operation keeps `make test` quick; FUZZ_EXAMPLES=500 digs deeper.
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "40")),
    # CI replays the same examples every run, so a landing never hinges on a lucky draw;
    # locally each run explores new ones.
    derandomize=os.environ.get("CI") == "true",
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_the_api_never_errors_and_always_matches_its_schema(case, fuzz_target):
    # Half the cases aim at a real session and person so the fuzzing reaches past the 404.
    params = case.path_parameters or {}
    if ("session_id" in params or "user_id" in params) and next(ROUNDS) % 2 == 0:
        session = _real_session(fuzz_target["tenant"])
        if "session_id" in params:
            params["session_id"] = str(session.pk)
        if "user_id" in params:
            params["user_id"] = session.end_user.external_id
    # Not checked: positive_data_acceptance / negative_data_rejection. The schema cannot say
    # everything validation enforces (byte limits, no NUL characters, content required unless
    # tool_calls), so schema-valid requests are rightly refused with a 400 now and then.
    case.call_and_validate(
        headers={"Authorization": f"Bearer {fuzz_target['secret']}"},
        checks=[
            st_checks.not_a_server_error,
            st_checks.status_code_conformance,
            st_checks.content_type_conformance,
            st_checks.response_schema_conformance,
            st_checks.response_headers_conformance,
        ],
    )
