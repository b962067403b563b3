"""Person-bound tokens, walked from the URL resolver: for every `/api/v1/` route and method, a
token bound to Alice answers 404 for Bob's objects (and changes nothing of his), keeps lists
and searches to Alice (and tenant-wide memory), and works on Alice's own objects.

The routes come from Django's resolver (the tenant outsider matrix's walk). A route whose path
names a person-owned object (PERSON_PARAMS) is covered without anyone listing it; a route with
another parameter, or a collection route (no parameter) not in COLLECTIONS, fails
`test_every_api_route_is_classified` until someone says what a person may do there.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db.models import Q
from django.utils import timezone

from facts_app.models import Fact, Note, UserMemory
from memoryhub.accounts.models import EndUser
from memoryhub.credentials.models import PersonToken
from sessions_app.models import Message, Plan, Session, StateEntry, TaskContext
from tests.accounts.test_outsider_matrix import (
    API_PREFIX,
    BODIES,
    PARAM,
    PERSON_BODIES,
    ROUTES,
)
from tests.helpers import client_for

MARK_A, MARK_B = "aardvarkalice", "quokkabob"
# Path parameters that name one person's object: Bob's is a 404, Alice's works.
PERSON_PARAMS = {"session_id", "user_id", "fact_id", "plan_id", "task_id", "subtask_id", "jti"}
# Parameters that only say which part of such an object (or of tenant-wide memory).
PART_PARAMS = {"key", "day"}
# Tenant-wide memory: readable by a person, writable only with the global-memory grant.
SHARED_ROUTES = {"memories/<str:key>/", "memories/<str:key>/versions/"}
# What a person's token may not do at all, even on its own objects (minting is the tenant's).
OWN_REFUSED = {
    ("users/<str:user_id>/tokens/", "get"): 403,
    ("users/<str:user_id>/tokens/", "post"): 403,
    ("tokens/<str:jti>/", "delete"): 403,
}

# A person's task context is theirs through its plan or session: a replacement keeps naming it.
OWN_BODIES = {
    ("task-contexts/<str:task_id>/", "put"): {
        "event_type": "x",
        "response_event": "y",
        "plan_id": "plan-alice",
    },
}

# Collection routes (no path parameter): {route: {method: [(body or query, expected status)]}}
# Each call naming Bob is a 404; the others must hold nothing of Bob's.
COLLECTIONS: dict[str, dict[str, list[tuple[dict[str, Any], int]]]] = {
    "sessions/": {
        "get": [({}, 200), ({"user_id": "bob"}, 404)],
        "post": [({"external_key": "a:new"}, 201), ({"user_id": "bob"}, 404)],
    },
    "plans/": {
        "get": [({}, 200), ({"user_id": "bob"}, 404), ({"session_id": "<bob:session>"}, 404)],
        "post": [
            ({"plan_id": "plan-a-new", "goal_event": "x", "user_id": "alice"}, 201),
            ({"plan_id": "plan-b-new", "goal_event": "x", "user_id": "bob"}, 404),
            ({"plan_id": "plan-b-2", "goal_event": "x", "session_id": "<bob:session>"}, 404),
            ({"plan_id": "<bob:plan>", "goal_event": "x", "user_id": "alice"}, 404),
        ],
    },
    "task-contexts/": {
        "get": [
            ({}, 200),
            ({"session_id": "<bob:session>"}, 404),
            ({"plan_id": "<bob:plan>"}, 404),
        ],
        "post": [
            (
                {
                    "task_id": "t-a-new",
                    "event_type": "x",
                    "response_event": "y",
                    "plan_id": "<alice:plan>",
                },
                201,
            ),
            (
                {
                    "task_id": "t-b-new",
                    "event_type": "x",
                    "response_event": "y",
                    "plan_id": "<bob:plan>",
                },
                404,
            ),
            (
                {
                    "task_id": "<bob:task>",
                    "event_type": "x",
                    "response_event": "y",
                    "plan_id": "<alice:plan>",
                },
                404,
            ),
        ],
    },
    "facts/": {
        "get": [({}, 200), ({"user_id": "bob"}, 404)],
        "post": [
            ({"user_id": "alice", "content": "a new fact"}, 201),
            ({"user_id": "bob", "content": "a new fact"}, 404),
            ({"user_id": "alice", "content": "x", "supersedes": "<bob:fact>"}, 404),
            ({"user_id": "alice", "content": "y", "source_session_id": "<bob:session>"}, 404),
            ({"content": "tenant-wide"}, 403),
        ],
    },
    "facts/search/": {
        "get": [({"q": MARK_B}, 200), ({"q": MARK_B, "user_id": "bob"}, 404)],
    },
    "messages/search/": {
        "get": [
            ({"q": MARK_B}, 200),
            ({"q": MARK_B, "mode": "lexical"}, 200),
            ({"q": MARK_B, "user_id": "bob"}, 404),
            ({"q": MARK_B, "session_id": "<bob:session>"}, 404),
        ],
    },
    "memories/": {"get": [({}, 200)]},
    "users/": {"get": [({}, 200), ({"user_id": "bob"}, 404)]},
    "purge/": {
        "post": [
            ({"scope": "session", "session_id": "<bob:session>"}, 404),
            ({"scope": "user", "user_id": "bob"}, 404),
            ({"scope": "older_than", "days": 1, "user_id": "bob"}, 404),
            ({"scope": "older_than", "days": 1}, 200),
            ({"scope": "user", "user_id": "alice", "dry_run": True}, 200),
        ],
    },
    "tokens/rotate-secret/": {"post": [({}, 403)]},
}


def _person_world(owner: Any, who: str, mark: str) -> dict[str, Any]:
    made = owner.post(
        "/api/v1/sessions/", {"user_id": who, "external_key": f"{who}:1"}, format="json"
    )
    assert made.status_code == 201, made.content
    session_id = made.json()["id"]
    calls: list[tuple[str, str, dict[str, Any]]] = [
        (
            "post",
            f"/api/v1/sessions/{session_id}/messages/",
            {
                "messages": [
                    {"role": "user", "content": f"my {mark} is blue"},
                    {"role": "assistant", "content": f"noted, the {mark} is blue"},
                ]
            },
        ),
        ("put", f"/api/v1/sessions/{session_id}/state/mood/", {"value": mark}),
        ("put", f"/api/v1/sessions/{session_id}/summary/", {"text": f"about the {mark}"}),
        ("put", f"/api/v1/users/{who}/memories/pet/", {"content": f"has a {mark}"}),
        ("put", f"/api/v1/users/{who}/notes/long-term/", {"content": f"owns a {mark}"}),
        ("post", f"/api/v1/users/{who}/notes/daily/", {"content": f"fed the {mark}"}),
        (
            "post",
            "/api/v1/plans/",
            {"plan_id": f"plan-{who}", "session_id": session_id, "goal_event": mark},
        ),
        (
            "post",
            "/api/v1/task-contexts/",
            {
                "task_id": f"task-{who}",
                "plan_id": f"plan-{who}",
                "event_type": mark,
                "response_event": mark,
                "sub_tasks": [f"sub-{who}"],
            },
        ),
    ]
    for method, path, body in calls:
        response = getattr(owner, method)(path, body, format="json")
        assert response.status_code in (200, 201), (path, response.content)
    fact = owner.post("/api/v1/facts/", {"user_id": who, "content": f"keeps a {mark}"})
    assert fact.status_code == 201, fact.content
    token = owner.post(
        f"/api/v1/users/{who}/tokens/", {"scopes": ["read", "write", "purge"]}, format="json"
    )
    assert token.status_code == 201, token.content
    return {
        "session_id": session_id,
        "user_id": who,
        "fact_id": fact.json()["id"],
        "plan_id": f"plan-{who}",
        "task_id": f"task-{who}",
        "subtask_id": f"sub-{who}",
        "jti": token.json()["jti"],
        "token": token.json()["token"],
        "day": timezone.localdate().isoformat(),
    }


@pytest.fixture
def world(tenant, make_key) -> dict[str, Any]:
    owner = client_for(
        make_key(tenant, scopes=["read", "write", "purge", "global-memory", "mint"])[1]
    )
    shared = owner.put("/api/v1/memories/house_rule/", {"content": "be kind"}, format="json")
    assert shared.status_code in (200, 201), shared.content
    return {
        "alice": _person_world(owner, "alice", MARK_A),
        "bob": _person_world(owner, "bob", MARK_B),
    }


def _bobs_rows(tenant) -> dict[str, Any]:
    bob = EndUser.objects.get(tenant=tenant, external_id="bob")
    in_his = Q(session__end_user=bob)
    return {
        "sessions": list(Session.objects.filter(end_user=bob).values_list("pk", "metadata")),
        "messages": list(Message.objects.filter(in_his).values_list("pk", "content")),
        "state": list(StateEntry.objects.filter(in_his).values_list("key", "value")),
        "memories": list(UserMemory.objects.filter(end_user=bob).values_list("pk", "content")),
        "notes": list(Note.objects.filter(end_user=bob).values_list("pk", "content")),
        "facts": list(Fact.objects.filter(end_user=bob).values_list("pk", "tags", "content")),
        "plans": list(Plan.objects.filter(end_user=bob).values_list("pk", "status")),
        "tasks": list(TaskContext.objects.filter(plan__end_user=bob).values_list("pk", "state")),
        "tokens": list(PersonToken.objects.filter(end_user=bob).values_list("pk", "revoked_at")),
    }


def _path(route: str, ids: dict[str, Any]) -> str:
    def value(match: Any) -> str:
        name = match.group(1)
        if name == "key":
            return "mood" if "/state/" in route else ("pet" if "users/" in route else "house_rule")
        return str(ids[name])

    return "/" + PARAM.sub(value, route)


def _filled(data: dict[str, Any], world: dict[str, Any]) -> dict[str, Any]:
    def fill(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
            who, name = value[1:-1].split(":")
            return world[who][
                {"session": "session_id", "plan": "plan_id", "task": "task_id", "fact": "fact_id"}[
                    name
                ]
            ]
        return value

    return {key: fill(value) for key, value in data.items()}


def _text(response: Any) -> str:
    try:
        return json.dumps(response.json())
    except (ValueError, TypeError):  # a 204 has no content type
        return response.content.decode()


def _route_class(route: str) -> str:
    relative = route.removeprefix(API_PREFIX)
    params = set(PARAM.findall(route))
    if params & PERSON_PARAMS and params <= PERSON_PARAMS | PART_PARAMS:
        return "person"
    if relative in SHARED_ROUTES:
        return "shared"
    if not params and relative in COLLECTIONS:
        return "collection"
    return "unclassified"


def test_every_api_route_is_classified():
    unclassified = [route for route, _ in ROUTES if _route_class(route) == "unclassified"]
    assert not unclassified, f"say what a person-bound token may do on: {unclassified}"
    for route, methods in ROUTES:
        if _route_class(route) == "collection":
            relative = route.removeprefix(API_PREFIX)
            assert set(methods) == set(COLLECTIONS[relative]), route


PERSON_ROUTES = [(r, m) for r, m in ROUTES if _route_class(r) == "person"]
OTHER_ROUTES = [(r, m) for r, m in ROUTES if _route_class(r) != "person"]


@pytest.mark.parametrize(("route", "methods"), PERSON_ROUTES, ids=[r for r, _ in PERSON_ROUTES])
def test_bobs_objects_are_404_to_alices_token(route, methods, world, tenant):
    alice = client_for(world["alice"]["token"])
    before = _bobs_rows(tenant)
    relative = route.removeprefix(API_PREFIX)
    path = _path(route, world["bob"])
    for method in methods:
        body = BODIES.get((relative, method)) or PERSON_BODIES.get(relative, {})
        response = getattr(alice, method)(path, body, format="json", HTTP_IF_MATCH="*")
        assert response.status_code == 404, (method, path, response.status_code, response.content)
        assert MARK_B not in _text(response)
    assert _bobs_rows(tenant) == before, f"Alice's token changed Bob's rows via {route}"


@pytest.mark.parametrize(("route", "methods"), PERSON_ROUTES, ids=[r for r, _ in PERSON_ROUTES])
def test_alices_own_objects_work_with_her_token(route, methods, world, tenant):
    alice = client_for(world["alice"]["token"])
    before = _bobs_rows(tenant)
    relative = route.removeprefix(API_PREFIX)
    path = _path(route, world["alice"])
    for method in methods:  # get, post, put, patch, then delete: the delete comes last
        known = (
            OWN_BODIES.get((relative, method))
            or BODIES.get((relative, method))
            or PERSON_BODIES.get(relative)
        )
        response = getattr(alice, method)(path, known or {}, format="json", HTTP_IF_MATCH="*")
        refused = OWN_REFUSED.get((relative, method))
        if refused is not None:
            assert response.status_code == refused, (method, path, response.content)
        elif method == "get" or known is not None:
            assert response.status_code < 300, (
                method,
                path,
                response.status_code,
                response.content,
            )
        else:  # a body this module does not know: past the person check, whatever the view says
            assert response.status_code not in (401, 403, 404), (method, path, response.content)
            assert response.status_code < 500, (method, path, response.content)
        assert MARK_B not in _text(response)
    assert _bobs_rows(tenant) == before


@pytest.mark.parametrize(("route", "methods"), OTHER_ROUTES, ids=[r for r, _ in OTHER_ROUTES])
def test_collections_and_tenant_memory_keep_to_alice(route, methods, world, tenant):
    alice = client_for(world["alice"]["token"])
    before = _bobs_rows(tenant)
    relative = route.removeprefix(API_PREFIX)
    if _route_class(route) == "shared":
        path = _path(route, world["alice"])
        for method in methods:
            response = getattr(alice, method)(path, {"content": "x"}, format="json")
            expected = 200 if method == "get" else 403
            assert response.status_code == expected, (method, path, response.content)
        assert _bobs_rows(tenant) == before
        return
    for method in methods:
        for data, expected in COLLECTIONS[relative][method]:
            filled = _filled(data, world)
            call = getattr(alice, method)
            if method == "get":
                response = call("/" + route, filled)
            else:
                response = call("/" + route, filled, format="json")
            assert response.status_code == expected, (method, filled, response.content)
            assert MARK_B not in _text(response), (method, filled, "Bob's text in Alice's answer")
            assert "bob" not in _text(response).replace(MARK_B, ""), (method, filled)
    assert _bobs_rows(tenant) == before, f"Alice's token changed Bob's rows via {route}"


def test_the_world_has_both_people(world, tenant):
    assert Session.objects.filter(tenant=tenant).count() == 2
    assert Message.objects.filter(tenant=tenant, content__contains=MARK_B).count() == 2
    assert PersonToken.objects.filter(tenant=tenant).count() == 2
