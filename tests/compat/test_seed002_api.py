"""Seed 002's surface (/v1/memory/...) in detail, with the test client: tenancy (an outsider gets
404 everywhere), the person its plans and sessions belong to, strict bodies, the seed's PUT
semantics, the free `plan_id` grouping string, and that these are MemoryHub's own rows."""

from __future__ import annotations

import pytest

from memoryhub.accounts.models import AuditEvent
from memoryhub.compat.seed002.models import TaskPlanRef
from sessions_app.models import Plan, Session, TaskContext
from tests.helpers import client_for, error_code, error_fields

BASE = "/v1/memory"


def post(api, path, body):
    return api.post(f"{BASE}{path}", body, format="json")


def put(api, path, body):
    return api.put(f"{BASE}{path}", body, format="json")


@pytest.fixture
def stored(api):
    """One of each: a plan, a task waiting for a sub-task, a session."""
    assert post(api, "/plans", {"plan_id": "plan-1", "goal_event": "g"}).status_code == 201
    assert (
        post(api, "/task-context", {"task_id": "task-1", "sub_tasks": ["sub-1"]}).status_code == 201
    )
    assert post(api, "/sessions", {"session_id": "sess-1"}).status_code == 201


# Every route and method of the surface.
ROUTES = [
    ("get", "/task-context/task-1", None),
    ("put", "/task-context/task-1", {"state": {"x": 1}}),
    ("delete", "/task-context/task-1", None),
    ("get", "/task-context/by-subtask/sub-1", None),
    ("get", "/plans/plan-1", None),
    ("put", "/plans/plan-1", {"status": "completed"}),
    ("delete", "/plans/plan-1", None),
    ("get", "/sessions/sess-1", None),
    ("put", "/sessions/sess-1", {}),
    ("delete", "/sessions/sess-1", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_an_outsider_gets_404_on_every_route(stored, outsider_api, api, method, path, body):
    response = getattr(outsider_api, method)(f"{BASE}{path}", body, format="json")

    assert response.status_code == 404, response.content
    assert error_code(response) == "not_found"
    # And nothing of the owner's changed.
    assert TaskContext.objects.get(task_id="task-1").state == {}
    assert Plan.objects.get(plan_id="plan-1").status == "running"
    assert Session.objects.filter(external_key="sess-1").exists()


def test_an_outsiders_lists_are_empty_and_its_writes_are_its_own(stored, outsider_api):
    plans = outsider_api.get(f"{BASE}/plans").json()
    sessions = outsider_api.get(f"{BASE}/sessions").json()
    # The same ids are free in another tenant: nothing leaks, nothing clashes.
    created = post(outsider_api, "/task-context", {"task_id": "task-1", "sub_tasks": ["sub-1"]})

    assert plans == {"plans": [], "count": 0}
    assert sessions == {"sessions": [], "count": 0}
    assert created.status_code == 201
    assert TaskContext.objects.filter(task_id="task-1").count() == 2


def test_without_a_key_it_is_401_and_a_read_only_key_cannot_write(stored, read_only_api):
    anonymous = client_for("mh_nope.nope").get(f"{BASE}/plans")
    reading = read_only_api.get(f"{BASE}/plans/plan-1")
    writing = put(read_only_api, "/plans/plan-1", {"status": "completed"})

    assert anonymous.status_code == 401
    assert reading.status_code == 200
    assert writing.status_code == 403


def test_unknown_paths_answer_in_json(api):
    response = api.get(f"{BASE}/task-contexts/task-1")
    posted = api.post(f"{BASE}/tasks", {"task_id": "t"}, format="json")

    assert (response.status_code, posted.status_code) == (404, 404)
    assert error_code(response) == error_code(posted) == "not_found"


def test_a_trailing_slash_is_the_same_route(api, stored):
    assert api.get(f"{BASE}/plans/plan-1/").json()["plan_id"] == "plan-1"


# --- strict bodies ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("post", "/task-context", {"task_id": "t", "subtasks": ["a"]}, "subtasks"),
        ("put", "/task-context/task-1", {"sub_tasks": [], "add_sub_tasks": ["x"]}, "add_sub_tasks"),
        ("post", "/plans", {"plan_id": "p", "user_id": "someone"}, "user_id"),
        ("put", "/plans/plan-1", {"status": "completed", "plan_id": "other"}, "plan_id"),
        ("post", "/sessions", {"session_id": "s", "user_id": "u"}, "user_id"),
        ("put", "/sessions/sess-1", {"last_active_at": "2026-01-11T10:00:00Z"}, "last_active_at"),
    ],
)
def test_a_field_the_contract_does_not_have_is_a_400(stored, api, method, path, body, field):
    response = getattr(api, method)(f"{BASE}{path}", body, format="json")

    assert response.status_code == 400, response.content
    assert error_fields(response)[field][0]["code"] == "unknown_field"
    assert TaskContext.objects.get(task_id="task-1").version == 1
    assert Plan.objects.get(plan_id="plan-1").status == "running"


# --- the seed's PUT: the fields sent replace the stored ones -------------------------------------


def test_put_replaces_the_fields_sent_and_keeps_the_others(api):
    post(
        api,
        "/task-context",
        {
            "task_id": "task-1",
            "event_type": "research.requested",
            "data": {"query": "AI"},
            "sub_tasks": ["a", "b"],
            "state": {"progress": 0.5, "notes": ["x"]},
        },
    )

    response = put(api, "/task-context/task-1", {"sub_tasks": ["b", "c"], "state": {"p": 1}})

    body = response.json()
    assert response.status_code == 200
    assert body["sub_tasks"] == ["b", "c"]
    assert body["state"] == {"p": 1}  # replaced, not merged
    assert (body["event_type"], body["data"]) == ("research.requested", {"query": "AI"})
    assert api.get(f"{BASE}/task-context/by-subtask/a").status_code == 404
    assert api.get(f"{BASE}/task-context/by-subtask/c").json()["task_id"] == "task-1"


def test_a_sub_task_another_task_waits_for_is_a_409_and_changes_nothing(api):
    post(api, "/task-context", {"task_id": "task-1", "sub_tasks": ["shared"]})
    post(api, "/task-context", {"task_id": "task-2", "state": {"keep": True}})

    response = put(api, "/task-context/task-2", {"sub_tasks": ["shared"], "state": {}})

    assert response.status_code == 409
    assert error_code(response) == "sub_task_conflict"
    assert api.get(f"{BASE}/task-context/task-2").json()["state"] == {"keep": True}


def test_a_taken_task_id_is_a_409(api):
    post(api, "/task-context", {"task_id": "task-1"})

    response = post(api, "/task-context", {"task_id": "task-1"})

    assert response.status_code == 409
    assert error_code(response) == "duplicate_task_id"


def test_a_finished_plan_stays_finished(api):
    post(api, "/plans", {"plan_id": "plan-1", "status": "completed"})

    response = put(api, "/plans/plan-1", {"status": "running"})

    assert response.status_code == 409
    assert error_code(response) == "invalid_status_transition"


# --- plan_id on a task context: a plan of the tenant, or a free grouping string ------------------


def test_a_plan_id_naming_no_plan_is_kept_as_the_tasks_grouping_string(api):
    post(api, "/task-context", {"task_id": "task-1", "plan_id": "group-7"})

    answer = api.get(f"{BASE}/task-context/task-1").json()
    native = api.get("/api/v1/task-contexts/task-1/").json()

    assert answer["plan_id"] == "group-7"
    # No plan appears for it: grouping is not planning.
    assert api.get(f"{BASE}/plans").json()["count"] == 0
    assert native["plan_id"] is None
    assert TaskPlanRef.objects.get().plan_id == "group-7"


def test_a_plan_id_naming_a_plan_links_it_and_the_task_goes_with_the_plan(api):
    post(api, "/plans", {"plan_id": "plan-1", "goal_event": "research.goal"})
    post(api, "/task-context", {"task_id": "task-1", "plan_id": "plan-1"})

    native = api.get("/api/v1/task-contexts/?plan_id=plan-1").json()["results"]
    assert [task["task_id"] for task in native] == ["task-1"]
    assert not TaskPlanRef.objects.exists()

    assert api.delete(f"{BASE}/plans/plan-1").status_code == 204
    assert api.get(f"{BASE}/task-context/task-1").status_code == 404


def test_put_can_move_a_task_between_a_grouping_string_and_a_plan(api):
    post(api, "/plans", {"plan_id": "plan-1"})
    post(api, "/task-context", {"task_id": "task-1", "plan_id": "group-7"})

    linked = put(api, "/task-context/task-1", {"plan_id": "plan-1"}).json()
    kept = put(api, "/task-context/task-1", {"state": {"a": 1}}).json()
    regrouped = put(api, "/task-context/task-1", {"plan_id": "group-8"}).json()
    cleared = put(api, "/task-context/task-1", {"plan_id": None}).json()

    assert (linked["plan_id"], kept["plan_id"]) == ("plan-1", "plan-1")
    assert (regrouped["plan_id"], cleared["plan_id"]) == ("group-8", None)
    assert not TaskPlanRef.objects.exists()


def test_deleting_a_grouped_task_leaves_no_grouping_row(api):
    post(api, "/task-context", {"task_id": "task-1", "plan_id": "group-7"})

    assert api.delete(f"{BASE}/task-context/task-1").status_code == 204
    assert api.delete(f"{BASE}/task-context/task-1").status_code == 404
    assert not TaskPlanRef.objects.exists()


# --- the person: the seed's JWT user_id -----------------------------------------------------------


def test_plans_and_sessions_belong_to_the_person_the_request_names(api):
    alice = {"HTTP_X_USER_ID": "web:alice"}
    api.post(f"{BASE}/plans", {"plan_id": "plan-a"}, format="json", **alice)
    api.post(f"{BASE}/sessions", {"session_id": "sess-a"}, format="json", **alice)

    assert api.get(f"{BASE}/plans", **alice).json()["count"] == 1
    assert api.get(f"{BASE}/plans").json()["count"] == 0  # the default person has none
    assert api.get(f"{BASE}/plans/plan-a", HTTP_X_USER_ID="web:bob").status_code == 404
    assert api.get(f"{BASE}/sessions/sess-a", HTTP_X_USER_ID="web:bob").status_code == 404
    plan = api.get("/api/v1/plans/plan-a/").json()
    session = api.get("/api/v1/sessions/", {"user_id": "web:alice"}).json()["results"][0]
    assert plan["user_id"] == "web:alice"
    assert session["external_key"] == "sess-a"


def test_without_a_person_it_is_the_tenants_default_one(api):
    post(api, "/plans", {"plan_id": "plan-1"})

    assert api.get("/api/v1/plans/plan-1/").json()["user_id"] == "seed002:default"


# --- sessions -----------------------------------------------------------------------------------


def test_a_session_id_is_the_sessions_external_key_and_a_repeat_returns_it(api):
    first = post(api, "/sessions", {"session_id": "sess-1", "agent_id": "advisor"})
    again = post(api, "/sessions", {"session_id": "sess-1", "agent_id": "advisor"})

    assert (first.status_code, again.status_code) == (201, 200)
    assert Session.objects.get(external_key="sess-1").agent_id == "advisor"


def test_a_last_interaction_in_the_future_is_a_400(api):
    post(api, "/sessions", {"session_id": "sess-1"})

    response = put(api, "/sessions/sess-1", {"last_interaction": "2999-01-01T00:00:00Z"})

    assert response.status_code == 400
    assert error_fields(response)["last_interaction"][0]["code"] == "in_future"


def test_deleting_a_session_is_audited_as_memoryhubs_own(api):
    post(api, "/sessions", {"session_id": "sess-1"})

    assert api.delete(f"{BASE}/sessions/sess-1").status_code == 204
    assert not Session.objects.exists()
    assert AuditEvent.objects.filter(object_type="session", action="delete").count() == 1


def test_bad_list_parameters_are_a_400(api):
    assert api.get(f"{BASE}/plans", {"status": "sleeping"}).status_code == 400
    assert api.get(f"{BASE}/sessions", {"limit": "0"}).status_code == 400


def test_the_surface_is_left_out_of_the_openapi_schema(client):
    paths = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]

    assert not [path for path in paths if path.startswith("/v1/")]


def test_a_person_bound_token_is_the_seeds_jwt_its_person_is_the_user(tenant, make_key, api):
    """The seed's JWT carries tenant and user: a person-bound token does, for MemoryHub."""
    minter = client_for(make_key(tenant, scopes=["read", "write", "mint"])[1])
    minted = minter.post("/api/v1/users/web:alice/tokens/", {}, format="json")
    assert minted.status_code == 201, minted.content
    alice = client_for(minted.json()["token"])
    api.post(f"{BASE}/plans", {"plan_id": "plan-bob"}, format="json", HTTP_X_USER_ID="web:bob")

    created = post(alice, "/plans", {"plan_id": "plan-a", "goal_event": "g"})
    session = post(alice, "/sessions", {"session_id": "sess-a"})
    # The plan's task: linked to alice's plan, it is alice's to read back.
    task = post(alice, "/task-context", {"task_id": "task-a", "plan_id": "plan-a"})

    assert (created.status_code, session.status_code, task.status_code) == (201, 201, 201)
    assert [p["plan_id"] for p in alice.get(f"{BASE}/plans").json()["plans"]] == ["plan-a"]
    assert alice.get(f"{BASE}/task-context/task-a").json()["plan_id"] == "plan-a"
    assert api.get("/api/v1/plans/plan-a/").json()["user_id"] == "web:alice"
    # Bob's plan, or naming bob, is a 404 for alice's token.
    assert alice.get(f"{BASE}/plans/plan-bob").status_code == 404
    assert alice.get(f"{BASE}/plans", HTTP_X_USER_ID="web:bob").status_code == 404
