"""Plans (seed 002): a planner's state machine, listed by status, moved only forward, guarded by
ETags, belonging to a person, and only ever the tenant's."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memoryhub.accounts.models import AuditAction, AuditEvent, EndUser, User
from sessions_app import task_services
from sessions_app.models import Plan, PlanStatus, TaskContext
from tests.helpers import error_code, error_fields

PLANS = "/api/v1/plans/"


def detail(plan_id: str) -> str:
    return f"{PLANS}{plan_id}/"


def create(api, plan_id="plan-123", **fields):
    payload = {"plan_id": plan_id, "user_id": "u1", "goal_event": "research.goal", **fields}
    response = api.post(PLANS, payload, format="json")
    assert response.status_code == 201, response.content
    return response


def listed(api, **params) -> list[str]:
    response = api.get(PLANS, params)
    assert response.status_code == 200, response.content
    return [row["plan_id"] for row in response.json()["results"]]


class TestSeedCases:
    def test_create_plan_record(self, api, tenant):
        response = api.post(
            PLANS,
            {
                "plan_id": "plan-123",
                "user_id": "u1",
                "goal_event": "research.goal",
                "goal_data": {"topic": "AI trends"},
                "status": "running",
            },
            format="json",
        )

        assert response.status_code == 201
        body = response.json()
        assert body["plan_id"] == "plan-123"
        assert body["user_id"] == "u1"
        assert body["goal_data"] == {"topic": "AI trends"}
        assert (body["status"], body["state"], body["session_id"]) == ("running", {}, None)
        assert response["ETag"] == body["etag"]
        assert EndUser.objects.filter(tenant=tenant, external_id="u1").exists()

    def test_list_active_plans(self, api):
        create(api, "plan-1", status="running")
        create(api, "plan-2", status="completed")

        assert listed(api, status="active") == ["plan-1"]
        assert listed(api, status="completed") == ["plan-2"]
        assert listed(api) == ["plan-2", "plan-1"]

    def test_get_plan_details(self, api):
        create(api, state={"step": "search"})

        response = api.get(detail("plan-123"))

        assert response.status_code == 200
        assert response.json()["state"] == {"step": "search"}
        assert response["ETag"] == response.json()["etag"]


class TestCreate:
    def test_the_person_defaults_to_the_sessions(self, api, session):
        body = api.post(
            PLANS, {"plan_id": "p", "goal_event": "g", "session_id": str(session.pk)}
        ).json()

        assert body["user_id"] == "whatsapp:+4912345"
        assert body["session_id"] == str(session.pk)

    def test_without_a_person_it_is_a_400(self, api):
        response = api.post(PLANS, {"plan_id": "p", "goal_event": "g"}, format="json")

        assert response.status_code == 400
        assert error_fields(response)["user_id"][0]["code"] == "required"

    def test_a_session_of_another_person_is_a_400(self, api, session):
        response = api.post(
            PLANS,
            {"plan_id": "p", "goal_event": "g", "user_id": "bob", "session_id": str(session.pk)},
            format="json",
        )

        assert response.status_code == 400
        assert error_fields(response)["session_id"][0]["code"] == "other_user"
        assert Plan.objects.count() == 0

    def test_a_duplicate_plan_id_is_a_409_naming_it(self, api):
        create(api, goal_data={"first": True})

        response = api.post(
            PLANS, {"plan_id": "plan-123", "user_id": "u2", "goal_event": "g"}, format="json"
        )

        assert response.status_code == 409
        assert error_code(response) == "duplicate_plan_id"
        assert "plan-123" in response.json()["error"]["message"]
        assert Plan.objects.get().goal_data == {"first": True}

    @pytest.mark.parametrize(
        ("payload", "field", "code"),
        [
            ({"status": "paused"}, "status", "invalid_choice"),
            ({"status": "active"}, "status", "invalid_choice"),
            ({"goal_event": ""}, "goal_event", "blank"),
            ({"plan_id": "a/b"}, "plan_id", "invalid"),
            ({"goal_data": "x"}, "goal_data", "not_a_dict"),
            ({"user_id": 7}, "user_id", "invalid"),
        ],
    )
    def test_it_explains_each_bad_field(self, api, payload, field, code):
        body = {"plan_id": "p", "user_id": "u", "goal_event": "g", **payload}

        response = api.post(PLANS, body, format="json")

        assert response.status_code == 400
        assert error_fields(response)[field][0]["code"] == code

    def test_state_is_limited_in_size(self, api, limits):
        limits["TASK_DATA_MAX_BYTES"] = 100

        response = api.post(
            PLANS,
            {"plan_id": "p", "user_id": "u", "goal_event": "g", "state": {"k": "v" * 200}},
            format="json",
        )

        assert response.status_code == 400
        assert error_fields(response)["state"][0]["code"] == "too_large"


class TestList:
    def test_it_filters_by_person_and_session(self, api, session):
        create(api, "alice-1", user_id="alice")
        create(api, "bob-1", user_id="bob")
        create(api, "in-session", user_id=None, session_id=str(session.pk))

        assert listed(api, user_id="alice") == ["alice-1"]
        assert listed(api, session_id=str(session.pk)) == ["in-session"]
        assert listed(api, user_id="nobody") == []

    def test_it_pages_with_a_cursor(self, api):
        for index in range(5):
            create(api, f"p{index}")

        first = api.get(PLANS, {"limit": 2}).json()
        second = api.get(first["next"]).json()

        assert [row["plan_id"] for row in first["results"]] == ["p4", "p3"]
        assert [row["plan_id"] for row in second["results"]] == ["p2", "p1"]

    @pytest.mark.parametrize("params", [{"status": "paused"}, {"session_id": "nope"}, {"limit": 0}])
    def test_bad_filters_are_a_400(self, api, params):
        response = api.get(PLANS, params)

        assert response.status_code == 400
        assert error_code(response) == "validation_error"

    def test_the_list_uses_a_fixed_number_of_queries(
        self, api, tenant, django_assert_max_num_queries
    ):
        api.get(PLANS)  # first use writes the key's last_used_at
        for index in range(20):
            task_services.plan_create(
                tenant=tenant, plan_id=f"p{index}", goal_event="g", user_id=f"u{index}"
            )

        # key lookup + page of plans with their people
        with django_assert_max_num_queries(2):
            response = api.get(PLANS, {"status": "active"})
        assert len(response.json()["results"]) == 20


class TestStatusTransitions:
    @pytest.mark.parametrize("finished", ["completed", "failed", "cancelled"])
    def test_a_running_plan_finishes(self, api, finished):
        create(api)

        response = api.patch(detail("plan-123"), {"status": finished}, format="json")

        assert response.status_code == 200
        assert response.json()["status"] == finished

    @pytest.mark.parametrize(
        ("finished", "new"),
        [
            ("completed", "running"),
            ("completed", "failed"),
            ("failed", "running"),
            ("cancelled", "completed"),
        ],
    )
    def test_a_finished_plan_stays_finished(self, api, finished, new):
        create(api, status=finished, state={"a": 1})

        patched = api.patch(detail("plan-123"), {"status": new, "state": {"a": 2}}, format="json")
        etag = api.get(detail("plan-123"))["ETag"]
        put = api.put(
            detail("plan-123"),
            {"goal_event": "g", "status": new},
            format="json",
            HTTP_IF_MATCH=etag,
        )

        for response in (patched, put):
            assert response.status_code == 409
            assert error_code(response) == "invalid_status_transition"
        assert Plan.objects.get().status == finished
        assert Plan.objects.get().state == {"a": 1}

    def test_writing_the_status_it_has_is_allowed(self, api):
        create(api, status="completed")

        response = api.patch(
            detail("plan-123"), {"status": "completed", "state": {"result": 42}}, format="json"
        )

        assert response.status_code == 200
        assert response.json()["state"] == {"result": 42}

    def test_an_unknown_status_is_a_400(self, api):
        create(api)

        response = api.patch(detail("plan-123"), {"status": "done"}, format="json")

        assert response.status_code == 400
        assert error_fields(response)["status"][0]["code"] == "invalid_choice"


class TestPatchAndPut:
    def test_patch_merges_state_and_goal_data(self, api):
        create(api, goal_data={"topic": "AI"}, state={"step": 1, "seen": {"a": 1}, "tmp": True})

        body = api.patch(
            detail("plan-123"),
            {"state": {"step": 2, "seen": {"b": 2}, "tmp": None}, "goal_data": {"depth": 3}},
            format="json",
        ).json()

        assert body["state"] == {"step": 2, "seen": {"a": 1, "b": 2}}
        assert body["goal_data"] == {"topic": "AI", "depth": 3}

    def test_an_empty_patch_changes_nothing(self, api):
        etag = create(api)["ETag"]

        response = api.patch(detail("plan-123"), {}, format="json")

        assert response.status_code == 200
        assert response["ETag"] == etag

    def test_put_needs_if_match(self, api):
        create(api, state={"a": 1})

        response = api.put(
            detail("plan-123"), {"goal_event": "g", "status": "completed"}, format="json"
        )

        assert response.status_code == 428
        assert Plan.objects.get().status == PlanStatus.RUNNING

    def test_put_with_the_current_etag_replaces_goal_status_and_state(self, api):
        etag = create(api, goal_data={"topic": "AI"}, state={"a": 1})["ETag"]

        response = api.put(
            detail("plan-123"),
            {"goal_event": "g2", "status": "completed", "state": {"done": True}},
            format="json",
            HTTP_IF_MATCH=etag,
        )

        assert response.status_code == 200
        body = response.json()
        assert (body["goal_event"], body["goal_data"], body["status"], body["state"]) == (
            "g2",
            {},
            "completed",
            {"done": True},
        )
        assert body["user_id"] == "u1"
        assert response["ETag"] not in (etag, None)

    def test_a_stale_writer_is_told_with_a_412(self, api):
        stale = create(api)["ETag"]
        api.patch(detail("plan-123"), {"state": {"step": 2}}, format="json")

        put = api.put(
            detail("plan-123"),
            {"goal_event": "g", "status": "running", "state": {"step": 1}},
            format="json",
            HTTP_IF_MATCH=stale,
        )
        patch = api.patch(
            detail("plan-123"), {"state": {"step": 1}}, format="json", HTTP_IF_MATCH=stale
        )

        assert put.status_code == patch.status_code == 412
        assert Plan.objects.get().state == {"step": 2}

    def test_put_needs_the_whole_plan(self, api):
        etag = create(api)["ETag"]

        response = api.put(detail("plan-123"), {"state": {}}, format="json", HTTP_IF_MATCH=etag)

        assert response.status_code == 400
        assert set(error_fields(response)) == {"goal_event", "status"}


class TestDelete:
    def test_delete_takes_its_task_contexts_and_is_audited(self, api, tenant):
        create(api)
        task_services.task_context_create(
            tenant=tenant, task_id="t", event_type="x", plan_id="plan-123", sub_tasks=["s"]
        )

        response = api.delete(detail("plan-123"))

        assert response.status_code == 204
        assert api.delete(detail("plan-123")).status_code == 404
        assert TaskContext.objects.count() == 0
        event = AuditEvent.objects.get(tenant=tenant, object_type="plan")
        assert event.action == AuditAction.DELETE
        assert event.counts == {"plans": 1, "task_contexts": 1, "sub_tasks": 1}

    def test_a_session_counts_and_keeps_its_plans(self, api, session):
        create(api, user_id=None, session_id=str(session.pk))

        body = api.get(f"/api/v1/sessions/{session.pk}/").json()
        listed_session = api.get("/api/v1/sessions/").json()["results"][0]

        assert body["plan_count"] == listed_session["plan_count"] == 1
        api.delete(f"/api/v1/sessions/{session.pk}/")
        assert Plan.objects.count() == 0

    def test_the_session_list_still_uses_a_fixed_number_of_queries(
        self, api, tenant, django_assert_max_num_queries
    ):
        api.get("/api/v1/sessions/")
        for index in range(10):
            session_id = api.post("/api/v1/sessions/", {"user_id": f"u{index}"}).json()["id"]
            create(api, f"p{index}", user_id=None, session_id=session_id)

        with django_assert_max_num_queries(2):
            response = api.get("/api/v1/sessions/")
        assert [row["plan_count"] for row in response.json()["results"]] == [1] * 10


class TestAnotherTenant:
    @pytest.mark.parametrize(
        ("method", "body"),
        [
            ("get", None),
            ("put", {"goal_event": "g", "status": "cancelled"}),
            ("patch", {"status": "cancelled"}),
            ("delete", None),
        ],
    )
    def test_every_endpoint_is_a_404(self, api, outsider_api, method, body):
        create(api)

        response = getattr(outsider_api, method)(
            detail("plan-123"), body, format="json", HTTP_IF_MATCH="*"
        )

        assert response.status_code == 404
        assert error_code(response) == "not_found"
        assert Plan.objects.get().status == PlanStatus.RUNNING

    def test_the_list_shows_none_of_ours(self, api, outsider_api):
        create(api)

        assert outsider_api.get(PLANS).json()["results"] == []
        assert outsider_api.get(PLANS, {"user_id": "u1"}).json()["results"] == []

    def test_plan_ids_are_per_tenant_and_ours_cannot_be_referenced(self, api, outsider_api):
        create(api)

        theirs = outsider_api.post(
            PLANS, {"plan_id": "plan-123", "user_id": "u1", "goal_event": "g"}, format="json"
        )
        task = outsider_api.post(
            "/api/v1/task-contexts/",
            {"task_id": "t", "event_type": "x", "plan_id": "nope-not-theirs"},
            format="json",
        )

        assert theirs.status_code == 201
        assert task.status_code == 400
        assert Plan.objects.count() == 2


class TestAdmin:
    @pytest.fixture
    def staff_client(self, client, db):
        user = User.objects.create_superuser(username="root", password="pw-for-tests-only")
        client.force_login(user)
        return client

    def test_staff_list_running_plans_and_open_task_contexts(self, staff_client, tenant, session):
        task_services.plan_create(
            tenant=tenant, plan_id="running-plan", goal_event="g", session_id=session.pk
        )
        task_services.plan_create(
            tenant=tenant, plan_id="done-plan", goal_event="g", user_id="u", status="completed"
        )
        task_services.task_context_create(
            tenant=tenant, task_id="open-task", event_type="e", sub_tasks=["s"]
        )
        task_services.task_context_create(tenant=tenant, task_id="idle-task", event_type="e")

        plans = staff_client.get(
            reverse("admin:sessions_app_plan_changelist"), {"status": "running"}
        )
        tasks = staff_client.get(
            reverse("admin:sessions_app_taskcontext_changelist"), {"waiting": "yes"}
        )
        session_page = staff_client.get(
            reverse("admin:sessions_app_session_change", args=[session.pk])
        )

        assert plans.status_code == tasks.status_code == session_page.status_code == 200
        assert b"running-plan" in plans.content
        assert b"done-plan" not in plans.content
        assert b"open-task" in tasks.content
        assert b"idle-task" not in tasks.content
        assert b"running-plan" in session_page.content

    def test_the_cancel_action_moves_the_version(self, staff_client, tenant):
        plan = task_services.plan_create(tenant=tenant, plan_id="p", goal_event="g", user_id="u")
        etag = plan.etag

        staff_client.post(
            reverse("admin:sessions_app_plan_changelist"),
            {"action": "cancel_plans", "_selected_action": [plan.pk]},
        )

        plan.refresh_from_db()
        assert plan.status == PlanStatus.CANCELLED
        assert plan.etag != etag
