"""Input that was a 500 once: each is now a 400 with a code, or simply works."""

from __future__ import annotations

import base64
import json

import pytest

from memoryhub.accounts.models import EndUser
from sessions_app.services import session_create_or_get
from tests.helpers import error_code

DEEP = 2000  # past Python's recursion limit in the JSON decoder


def nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def post_raw(api, path: str, body: str):
    return api.generic("POST", path, body.encode("utf-8"), content_type="application/json")


def put_raw(api, path: str, body: str):
    return api.generic("PUT", path, body.encode("utf-8"), content_type="application/json")


@pytest.mark.parametrize("depth", [65, 200, 924, DEEP])
def test_deeply_nested_json_is_refused(api, session, depth):
    body = f'{{"role": "user", "content": "hi", "metadata": {nested(depth)}}}'

    response = post_raw(api, f"/api/v1/sessions/{session.pk}/messages/", body)

    assert response.status_code == 400
    assert error_code(response) == "json_too_deep"
    assert session.messages.count() == 0


def test_nesting_within_the_limit_is_stored(api, session):
    body = f'{{"role": "user", "content": "hi", "metadata": {nested(30)}}}'

    assert post_raw(api, f"/api/v1/sessions/{session.pk}/messages/", body).status_code == 201


@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"])
def test_numbers_that_are_not_finite_are_refused(api, session, number):
    body = f'{{"value": {{"x": {number}}}}}'

    response = put_raw(api, f"/api/v1/sessions/{session.pk}/state/k/", body)

    assert response.status_code == 400
    assert error_code(response) == "number_out_of_range"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/users/ana/notes/long-term/", '{"content": "x \\ud800 y"}'),
        ("/api/v1/users/ana/notes/daily/", '{"content": "\\udfff"}'),
        ("/api/v1/facts/", '{"user_id": "ana", "content": "likes \\ud83d tea"}'),
        ("/api/v1/users/ana/memories/pet/", '{"content": "a \\ud800 dog"}'),
    ],
)
def test_a_lone_surrogate_is_refused_everywhere_text_is_stored(api, path, body):
    method = put_raw if path.endswith(("long-term/", "pet/")) else post_raw

    response = method(api, path, body)

    assert response.status_code == 400
    assert error_code(response) == "invalid_unicode"


def test_a_surrogate_pair_is_fine(api, session):
    body = '{"role": "user", "content": "a smile \\ud83d\\ude00"}'

    response = post_raw(api, f"/api/v1/sessions/{session.pk}/messages/", body)

    assert response.status_code == 201
    assert response.json()["content"] == "a smile \U0001f600"


@pytest.mark.parametrize("user_id", ["ana\nbob", "tab\there", "bell\x07", "del\x7f"])
def test_control_characters_in_a_new_person_id_are_refused(api, user_id):
    response = api.post("/api/v1/sessions/", {"user_id": user_id}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"]["user_id"][0]["code"] == "control_characters"
    assert not EndUser.objects.filter(external_id=user_id).exists()


def test_a_stored_id_with_a_newline_still_shows_on_the_people_page(tenant, editor):
    EndUser.objects.create(tenant=tenant, external_id="old\nid")

    response = editor.get("/people/")

    assert response.status_code == 200
    assert "old" in response.content.decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "bm90IGEgY3Vyc29y",
        "%%%",
        base64.b64encode(b"o=1&p=").decode(),
        base64.b64encode(b"r=1&p=\xff\xfe").decode(),
        base64.b64encode(b"p=" + b"9" * 400).decode(),
        base64.b64encode(b"o=-5").decode(),
        base64.b64encode(json.dumps({"p": "x"}).encode()).decode(),
    ],
)
def test_hand_made_cursors_are_never_a_500(api, session, cursor):
    # One that does not decode is a 400; one that decodes to a harmless position may page.
    for path in ("/api/v1/sessions/", "/api/v1/users/", "/api/v1/plans/"):
        response = api.get(path, {"cursor": cursor})
        assert response.status_code in (200, 400), (path, response.content)
        if response.status_code == 400:
            assert response.json()["error"]["fields"]["cursor"][0]["code"] == "invalid_cursor"


@pytest.mark.parametrize(
    ("path", "method", "body"),
    [
        ("/api/v1/facts/", "post", {"user_id": "ana", "content": "likes tea"}),
        ("/api/v1/users/ana/memories/drink/", "put", {"content": "tea"}),
    ],
)
def test_a_source_session_must_be_a_session_of_the_callers_tenant(
    api, session, other_tenant, path, method, body
):
    foreign, _ = session_create_or_get(tenant=other_tenant, user_id="ana")
    call = getattr(api, method)

    for bad, code in [
        (str(foreign.pk), "not_found"),
        ("00000000-0000-0000-0000-000000000000", "not_found"),
        (False, "invalid"),
        (0, "invalid"),
    ]:
        response = call(path, {**body, "source_session_id": bad}, format="json")
        assert response.status_code == 400, (bad, response.content)
        fields = response.json()["error"]["fields"]
        assert fields["source_session_id"][0]["code"] == code, bad

    ok = call(path, {**body, "source_session_id": str(session.pk)}, format="json")
    assert ok.status_code in (200, 201), ok.content
    assert ok.json()["source_session_id"] == str(session.pk)
