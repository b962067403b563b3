"""Tenancy, walked from the URL resolver: every `/api/v1/` route and method, called with another
tenant's key on this tenant's objects, answers 404 (or, for a person id, acts on the caller's own
person of that name), and no list or search shows this tenant's rows.

The routes come from Django's resolver, not from a list kept here: a new endpoint whose path
parameter this module does not know fails `test_every_api_route_is_covered` until it is added
to PATH_VALUES — so no endpoint ships without an outsider test.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from facts_app.models import Fact, Note, UserMemory
from sessions_app.models import Message, Plan, Session, StateEntry, TaskContext
from tests.helpers import client_for

MARK = "zebracorn"  # in every text of the owner's world: an outsider's answer must never hold it
API_PREFIX = "api/v1/"
METHODS = ("get", "post", "put", "patch", "delete")


def _api_routes() -> Iterator[tuple[str, list[str]]]:
    def walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, URLPattern]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            else:
                yield prefix + str(pattern.pattern), pattern

    for route, pattern in walk(get_resolver().url_patterns, ""):
        if not route.startswith(API_PREFIX):
            continue
        callback = pattern.callback
        actions = getattr(callback, "actions", None)
        view_class = getattr(callback, "cls", None)
        methods = (
            list(actions)
            if actions
            else [m for m in METHODS if view_class is not None and hasattr(view_class, m)]
        )
        yield route, methods


ROUTES = sorted(_api_routes())
PARAM = re.compile(r"<(?:\w+:)?(\w+)>")


@pytest.fixture
def world(tenant, make_key) -> dict[str, Any]:
    """One of everything, made through the API by the owner, each text holding MARK."""
    owner = client_for(
        make_key(tenant, scopes=["read", "write", "purge", "global-memory", "mint"])[1]
    )
    made = owner.post(
        "/api/v1/sessions/",
        {"user_id": "alice", "agent_id": "chat", "external_key": f"{MARK}:1"},
        format="json",
    )
    assert made.status_code == 201, made.content
    session_id = made.json()["id"]
    appended = owner.post(
        f"/api/v1/sessions/{session_id}/messages/",
        {
            "messages": [
                {"role": "user", "content": f"my {MARK} is blue"},
                {"role": "assistant", "content": f"noted, the {MARK} is blue"},
            ]
        },
        format="json",
    )
    assert appended.status_code == 201, appended.content
    for path, body in [
        (f"/api/v1/sessions/{session_id}/state/mood/", {"value": MARK}),
        (f"/api/v1/sessions/{session_id}/summary/", {"text": f"talked about the {MARK}"}),
        ("/api/v1/users/alice/memories/pet/", {"content": f"has a {MARK}"}),
        ("/api/v1/memories/house_rule/", {"content": f"never feed the {MARK}"}),
        ("/api/v1/users/alice/notes/long-term/", {"content": f"owns a {MARK}"}),
    ]:
        response = owner.put(path, body, format="json")
        assert response.status_code in (200, 201), (path, response.content)
    daily = owner.post(
        "/api/v1/users/alice/notes/daily/", {"content": f"fed the {MARK}"}, format="json"
    )
    assert daily.status_code in (200, 201), daily.content
    fact = owner.post(
        "/api/v1/facts/", {"user_id": "alice", "content": f"Alice keeps a {MARK}"}, format="json"
    )
    assert fact.status_code == 201, fact.content
    plan = owner.post(
        "/api/v1/plans/",
        {"plan_id": f"plan-{MARK}", "session_id": session_id, "goal_event": MARK},
        format="json",
    )
    assert plan.status_code == 201, plan.content
    task = owner.post(
        "/api/v1/task-contexts/",
        {
            "task_id": f"task-{MARK}",
            "plan_id": f"plan-{MARK}",
            "event_type": MARK,
            "response_event": MARK,
            "sub_tasks": [f"sub-{MARK}"],
        },
        format="json",
    )
    assert task.status_code == 201, task.content
    token = owner.post("/api/v1/users/alice/tokens/", {}, format="json")
    assert token.status_code == 201, token.content
    return {
        "jti": token.json()["jti"],
        "session_id": session_id,
        "user_id": "alice",
        "fact_id": fact.json()["id"],
        "plan_id": f"plan-{MARK}",
        "task_id": f"task-{MARK}",
        "subtask_id": f"sub-{MARK}",
        "day": timezone.localdate().isoformat(),
    }


def _key_for(route: str) -> str:
    if "/state/" in route:
        return "mood"
    if route.startswith(f"{API_PREFIX}users/"):
        return "pet"
    return "house_rule"


# What an outsider sends to each writable route: a body that would be valid for the owner, so
# that a 404 is about the id, not about a missing field.
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("sessions/<str:session_id>/", "patch"): {"metadata": {"x": 1}},
    ("sessions/<str:session_id>/messages/", "post"): {"role": "user", "content": "hi"},
    ("sessions/<str:session_id>/summary/", "put"): {"text": "overwritten"},
    ("sessions/<str:session_id>/state/<str:key>/", "put"): {"value": "overwritten"},
    ("plans/<str:plan_id>/", "put"): {"goal_event": "x", "status": "running"},
    ("plans/<str:plan_id>/", "patch"): {"status": "cancelled"},
    ("task-contexts/<str:task_id>/", "put"): {"event_type": "x", "response_event": "y"},
    ("task-contexts/<str:task_id>/", "patch"): {"state": {"x": 1}},
    ("facts/<str:fact_id>/", "patch"): {"tags": ["x"]},
}

# Routes addressed by a person id: the person is the caller's own of that name, so an outsider's
# write makes (or changes) *their* person "alice", never ours. Reads of ours are 404.
PERSON_WRITES = {
    ("users/<str:user_id>/notes/long-term/", "put"),
    ("users/<str:user_id>/notes/daily/", "post"),
    ("users/<str:user_id>/notes/clear/", "post"),
    ("users/<str:user_id>/memories/<str:key>/", "put"),
    ("users/<str:user_id>/memories/<str:key>/", "delete"),
    ("users/<str:user_id>/tokens/", "post"),
    ("memories/<str:key>/", "put"),
    ("memories/<str:key>/", "delete"),
}
PERSON_BODIES: dict[str, dict[str, Any]] = {
    "users/<str:user_id>/notes/long-term/": {"content": "theirs"},
    "users/<str:user_id>/notes/daily/": {"content": "theirs"},
    "users/<str:user_id>/notes/clear/": {},
    "users/<str:user_id>/memories/<str:key>/": {"content": "theirs"},
    "users/<str:user_id>/tokens/": {},
    "memories/<str:key>/": {"content": "theirs"},
}
# Collection routes: an outsider may call them; the answer must hold nothing of ours.
COLLECTION_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("sessions/", "post"): {"user_id": "alice", "external_key": f"{MARK}:1"},
    ("plans/", "post"): {"plan_id": f"plan-{MARK}", "goal_event": "x"},
    ("task-contexts/", "post"): {
        "task_id": f"task-{MARK}",
        "event_type": "x",
        "response_event": "y",
        "sub_tasks": [f"sub-{MARK}"],
    },
    ("facts/", "post"): {"user_id": "alice", "content": "their own fact"},
    ("tokens/rotate-secret/", "post"): {},
}
COLLECTION_QUERIES: dict[str, dict[str, str]] = {
    "messages/search/": {"q": MARK},
    "facts/search/": {"q": MARK},
}
PATH_VALUES = {
    "session_id",
    "user_id",
    "fact_id",
    "plan_id",
    "task_id",
    "subtask_id",
    "day",
    "key",
    "jti",
}


def _path(route: str, world: dict[str, Any]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        return str(_key_for(route) if name == "key" else world[name])

    return "/" + PARAM.sub(value, route)


def _snapshot(tenant) -> dict[str, Any]:
    return {
        "sessions": list(Session.objects.filter(tenant=tenant).values_list("pk", "metadata")),
        "messages": list(Message.objects.filter(tenant=tenant).values_list("pk", "content")),
        "state": list(StateEntry.objects.filter(tenant=tenant).values_list("key", "value")),
        "memories": list(UserMemory.objects.filter(tenant=tenant).values_list("pk", "content")),
        "notes": list(Note.objects.filter(tenant=tenant).values_list("pk", "content")),
        "facts": list(Fact.objects.filter(tenant=tenant).values_list("pk", "tags")),
        "plans": list(Plan.objects.filter(tenant=tenant).values_list("pk", "status")),
        "tasks": list(TaskContext.objects.filter(tenant=tenant).values_list("pk", "state")),
    }


def test_every_api_route_is_covered():
    unknown = {
        (route, name)
        for route, _ in ROUTES
        for name in PARAM.findall(route)
        if name not in PATH_VALUES
    }
    assert not unknown, f"add these path parameters to the outsider matrix: {sorted(unknown)}"
    assert len(ROUTES) >= 30  # the resolver really was walked


@pytest.mark.parametrize(("route", "methods"), ROUTES, ids=[route for route, _ in ROUTES])
def test_an_outsider_never_reaches_this_tenants_rows(route, methods, world, tenant, outsider_api):
    before = _snapshot(tenant)
    relative = route.removeprefix(API_PREFIX)
    path = _path(route, world)
    has_params = bool(PARAM.search(route))
    for method in methods:
        call = getattr(outsider_api, method)
        if not has_params:
            if method == "get":
                response = call(path, COLLECTION_QUERIES.get(relative, {}))
                assert response.status_code in (200, 400), (method, path, response.content)
            elif relative == "purge/":
                for body in (
                    {"scope": "session", "session_id": world["session_id"]},
                    {"scope": "user", "user_id": world["user_id"]},
                ):
                    response = call(path, body, format="json")
                    assert response.status_code == 404, (body, response.content)
                response = call(path, {"scope": "older_than", "days": 1}, format="json")
                assert response.status_code == 200, response.content
            else:
                body = COLLECTION_BODIES[(relative, method)]
                response = call(path, body, format="json")
                assert response.status_code < 500, (method, path, response.content)
            assert MARK not in json.dumps(_json_or_text(response)).replace(f"{MARK}:1", "").replace(
                f"plan-{MARK}", ""
            ).replace(f"task-{MARK}", "").replace(f"sub-{MARK}", ""), (
                method,
                path,
                "an outsider's answer holds this tenant's text",
            )
            continue
        if (relative, method) in PERSON_WRITES:
            response = call(path, PERSON_BODIES[relative], format="json")
            # Its own person or tenant-wide memory (made by its own PUT), or 403 without the
            # global-memory scope: anything but ours.
            assert response.status_code < 500, (method, path, response.content)
            assert MARK not in response.content.decode(), (method, path)
            continue
        body = BODIES.get((relative, method), {})
        response = call(path, body, format="json", HTTP_IF_MATCH="*")
        assert response.status_code == 404, (method, path, response.status_code, response.content)
        assert MARK not in response.content.decode()
    assert _snapshot(tenant) == before, f"an outsider changed this tenant's rows via {route}"


def _json_or_text(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.content.decode()


def test_the_world_is_what_the_matrix_thinks_it_is(world, tenant):
    # Guards the fixture: if creating any part failed silently, the matrix would test nothing.
    assert Session.objects.filter(tenant=tenant, pk=world["session_id"]).exists()
    assert Message.objects.filter(tenant=tenant).count() == 2
    assert TaskContext.objects.filter(tenant=tenant, task_id=world["task_id"]).exists()
    assert Note.objects.filter(tenant=tenant).count() == 2
    assert dt.date.fromisoformat(world["day"])
