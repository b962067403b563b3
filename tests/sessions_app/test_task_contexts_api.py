"""Task contexts (seed 002): stored with their sub-tasks, found by task or sub-task id, changed
by add/remove without lost updates, guarded by ETags, and only ever the tenant's."""

from __future__ import annotations

import pytest

from memoryhub.accounts.models import IdempotencyRecord
from sessions_app import task_services
from sessions_app.models import SubTask, TaskContext
from tests.helpers import error_code, error_fields

TASKS = "/api/v1/task-contexts/"


def detail(task_id: str) -> str:
    return f"{TASKS}{task_id}/"


def by_subtask(subtask_id: str) -> str:
    return f"{TASKS}by-subtask/{subtask_id}/"


def store(api, task_id="task-123", **fields):
    payload = {"task_id": task_id, "event_type": "research.requested", **fields}
    response = api.post(TASKS, payload, format="json")
    assert response.status_code == 201, response.content
    return response


class TestSeedCases:
    def test_store_task_context_with_sub_tasks(self, api):
        response = api.post(
            TASKS,
            {
                "task_id": "task-123",
                "event_type": "research.requested",
                "response_event": "research.completed",
                "data": {"query": "AI trends"},
                "sub_tasks": ["sub-1", "sub-2"],
            },
            format="json",
        )

        assert response.status_code == 201
        body = response.json()
        assert body["task_id"] == "task-123"
        assert body["sub_tasks"] == ["sub-1", "sub-2"]
        assert body["response_topic"] == "action-results"
        assert body["plan_id"] is None
        assert body["state"] == {}
        assert response["ETag"] == body["etag"]

    def test_find_by_subtask(self, api):
        store(api, sub_tasks=["sub-1"])

        response = api.get(by_subtask("sub-1"))

        assert response.status_code == 200
        assert response.json()["task_id"] == "task-123"
        assert response["ETag"] == response.json()["etag"]

    def test_get_returns_everything_stored(self, api, session):
        task_services.plan_create(
            tenant=session.tenant, plan_id="plan-456", goal_event="g", user_id="u"
        )
        store(
            api,
            plan_id="plan-456",
            session_id=str(session.pk),
            response_event="research.completed",
            response_topic="results-2",
            data={"query": "AI"},
            state={"progress": 0.5},
            sub_tasks=["s1", "s2"],
        )

        body = api.get(detail("task-123")).json()

        assert {
            key: body[key] for key in body if key not in {"etag", "created_at", "updated_at"}
        } == {
            "task_id": "task-123",
            "plan_id": "plan-456",
            "session_id": str(session.pk),
            "event_type": "research.requested",
            "response_event": "research.completed",
            "response_topic": "results-2",
            "data": {"query": "AI"},
            "sub_tasks": ["s1", "s2"],
            "state": {"progress": 0.5},
        }


class TestCreateRefusals:
    def test_a_duplicate_task_id_is_a_409_naming_it(self, api):
        store(api, data={"first": True})

        response = api.post(
            TASKS,
            {"task_id": "task-123", "event_type": "x", "data": {"second": True}},
            format="json",
        )

        assert response.status_code == 409
        assert error_code(response) == "duplicate_task_id"
        assert "task-123" in response.json()["error"]["message"]
        assert TaskContext.objects.get().data == {"first": True}

    def test_a_sub_task_of_another_task_is_a_409_and_nothing_is_stored(self, api):
        store(api, "task-1", sub_tasks=["shared"])

        response = api.post(
            TASKS, {"task_id": "task-2", "event_type": "x", "sub_tasks": ["mine", "shared"]}
        )

        assert response.status_code == 409
        assert error_code(response) == "sub_task_conflict"
        assert "task-1" in response.json()["error"]["message"]
        assert not TaskContext.objects.filter(task_id="task-2").exists()
        assert not SubTask.objects.filter(subtask_id="mine").exists()

    def test_repeated_sub_task_ids_are_stored_once(self, api):
        body = store(api, sub_tasks=["a", "b", "a"]).json()

        assert body["sub_tasks"] == ["a", "b"]

    @pytest.mark.parametrize(
        ("payload", "field", "code"),
        [
            ({"task_id": "t"}, "event_type", "required"),
            ({"event_type": "x"}, "task_id", "required"),
            ({"task_id": "a/b", "event_type": "x"}, "task_id", "invalid"),
            ({"task_id": "a\x01", "event_type": "x"}, "task_id", "invalid"),
            ({"task_id": "t" * 256, "event_type": "x"}, "task_id", "max_length"),
            ({"task_id": 5, "event_type": "x"}, "task_id", "invalid"),
            ({"task_id": "t", "event_type": "x", "data": [1]}, "data", "not_a_dict"),
            (
                {"task_id": "t", "event_type": "x", "state": {"k": "\x00"}},
                "state",
                "null_characters_not_allowed",
            ),
            ({"task_id": "t", "event_type": "x", "sub_tasks": "s1"}, "sub_tasks", "not_a_list"),
            ({"task_id": "t", "event_type": "x", "plan_id": "nope"}, "plan_id", "does_not_exist"),
            ({"task_id": "t", "event_type": "x", "session_id": "nope"}, "session_id", "invalid"),
            (
                {
                    "task_id": "t",
                    "event_type": "x",
                    "session_id": "0190a1b2-0000-7000-8000-000000000000",
                },
                "session_id",
                "does_not_exist",
            ),
        ],
    )
    def test_it_explains_each_bad_field(self, api, payload, field, code):
        response = api.post(TASKS, payload, format="json")

        assert response.status_code == 400
        assert error_fields(response)[field][0]["code"] == code
        assert TaskContext.objects.count() == 0

    def test_data_and_state_are_limited_in_size(self, api, limits):
        limits["TASK_DATA_MAX_BYTES"] = 100

        response = api.post(
            TASKS, {"task_id": "t", "event_type": "x", "state": {"k": "v" * 200}}, format="json"
        )

        assert response.status_code == 400
        assert error_fields(response)["state"][0]["code"] == "too_large"

    def test_a_body_past_the_request_limit_is_a_413(self, api, settings):
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

        response = api.post(
            TASKS, {"task_id": "t", "event_type": "x", "data": {"k": "v" * 2000}}, format="json"
        )

        assert response.status_code == 413
        assert error_code(response) == "payload_too_large"

    def test_sub_task_lists_are_limited_in_length(self, api, limits):
        limits["TASK_SUB_TASKS_MAX"] = 3

        response = api.post(
            TASKS, {"task_id": "t", "event_type": "x", "sub_tasks": ["1", "2", "3", "4"]}
        )

        assert response.status_code == 400
        assert error_fields(response)["sub_tasks"][0]["code"] == "too_many_sub_tasks"

    def test_a_session_of_another_tenant_is_unknown(self, api, outsider_api):
        theirs = outsider_api.post("/api/v1/sessions/", {}, format="json").json()["id"]

        response = api.post(TASKS, {"task_id": "t", "event_type": "x", "session_id": theirs})

        assert response.status_code == 400
        assert error_fields(response)["session_id"][0]["code"] == "does_not_exist"

    def test_a_retried_create_with_an_idempotency_key_replays(self, api):
        payload = {"task_id": "t", "event_type": "x", "sub_tasks": ["s"]}
        first = api.post(TASKS, payload, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
        retry = api.post(TASKS, payload, format="json", HTTP_IDEMPOTENCY_KEY="k-1")

        assert first.status_code == retry.status_code == 201
        assert retry["Idempotent-Replayed"] == "true"
        assert retry["ETag"] == first["ETag"]
        assert TaskContext.objects.count() == 1
        assert IdempotencyRecord.objects.count() == 1

    def test_a_read_only_key_cannot_store(self, read_only_api):
        response = read_only_api.post(TASKS, {"task_id": "t", "event_type": "x"}, format="json")

        assert response.status_code == 403


class TestPatchSubTasks:
    def test_add_and_remove_without_rewriting_the_list(self, api):
        store(api, sub_tasks=["s1", "s2"])

        response = api.patch(
            detail("task-123"),
            {"remove_sub_tasks": ["s1"], "add_sub_tasks": ["s3", "s4"]},
            format="json",
        )

        assert response.status_code == 200
        body = response.json()
        assert body["sub_tasks"] == ["s2", "s3", "s4"]
        assert body["added_sub_tasks"] == ["s3", "s4"]
        assert body["removed_sub_tasks"] == ["s1"]
        assert response["ETag"] == body["etag"]
        assert api.get(by_subtask("s1")).status_code == 404
        assert api.get(by_subtask("s4")).json()["task_id"] == "task-123"

    def test_removing_the_last_sub_task_says_so_and_a_retry_removes_nothing(self, api):
        store(api, sub_tasks=["s1"])

        last = api.patch(detail("task-123"), {"remove_sub_tasks": ["s1"]}, format="json").json()
        retry = api.patch(detail("task-123"), {"remove_sub_tasks": ["s1"]}, format="json").json()

        assert (last["removed_sub_tasks"], last["sub_tasks"]) == (["s1"], [])
        assert (retry["removed_sub_tasks"], retry["sub_tasks"]) == ([], [])
        assert retry["etag"] == last["etag"]  # nothing changed: the version stays

    def test_adding_one_already_attached_is_skipped(self, api):
        store(api, sub_tasks=["s1"])

        body = api.patch(detail("task-123"), {"add_sub_tasks": ["s1", "s2"]}, format="json").json()

        assert body["added_sub_tasks"] == ["s2"]
        assert body["sub_tasks"] == ["s1", "s2"]

    def test_adding_a_sub_task_of_another_task_is_a_409_and_changes_nothing(self, api):
        store(api, "task-1", sub_tasks=["taken"])
        store(api, "task-2", sub_tasks=["s1"], state={"a": 1})
        etag = api.get(detail("task-2"))["ETag"]

        response = api.patch(
            detail("task-2"),
            {"remove_sub_tasks": ["s1"], "add_sub_tasks": ["taken"], "state": {"b": 2}},
            format="json",
        )

        assert response.status_code == 409
        assert error_code(response) == "sub_task_conflict"
        after = api.get(detail("task-2"))
        assert after.json()["sub_tasks"] == ["s1"]
        assert after.json()["state"] == {"a": 1}
        assert after["ETag"] == etag

    def test_the_same_id_added_and_removed_is_a_400(self, api):
        store(api)

        response = api.patch(
            detail("task-123"), {"add_sub_tasks": ["x"], "remove_sub_tasks": ["x"]}, format="json"
        )

        assert response.status_code == 400
        assert "add_sub_tasks" in error_fields(response)

    def test_a_task_waits_for_a_bounded_number_of_sub_tasks(self, api, limits):
        limits["TASK_SUB_TASKS_MAX"] = 3
        store(api, sub_tasks=["1", "2"])

        response = api.patch(detail("task-123"), {"add_sub_tasks": ["3", "4"]}, format="json")

        assert response.status_code == 409
        assert error_code(response) == "sub_task_limit"
        assert api.get(detail("task-123")).json()["sub_tasks"] == ["1", "2"]

    def test_state_and_data_are_merged(self, api):
        store(api, state={"progress": 0.5, "results": {"s1": "a"}, "drop": 1}, data={"q": 1})

        body = api.patch(
            detail("task-123"),
            {"state": {"results": {"s2": "b"}, "drop": None}, "data": {"lang": "de"}},
            format="json",
        ).json()

        assert body["state"] == {"progress": 0.5, "results": {"s1": "a", "s2": "b"}}
        assert body["data"] == {"q": 1, "lang": "de"}

    def test_a_merge_that_grows_past_the_limit_is_refused(self, api, limits):
        store(api, state={"a": "x" * 60})
        limits["TASK_DATA_MAX_BYTES"] = 100

        response = api.patch(detail("task-123"), {"state": {"b": "y" * 60}}, format="json")

        assert response.status_code == 400
        assert error_fields(response)["state"][0]["code"] == "too_large"
        assert api.get(detail("task-123")).json()["state"] == {"a": "x" * 60}

    def test_it_sets_the_event_fields(self, api):
        store(api)

        body = api.patch(
            detail("task-123"),
            {"event_type": "e2", "response_event": "", "response_topic": "t2"},
            format="json",
        ).json()

        assert (body["event_type"], body["response_event"], body["response_topic"]) == (
            "e2",
            "",
            "t2",
        )


class TestPreconditions:
    def test_every_write_changes_the_etag(self, api):
        created = store(api)
        patched = api.patch(detail("task-123"), {"add_sub_tasks": ["s"]}, format="json")
        read = api.get(detail("task-123"))

        assert created["ETag"] != patched["ETag"] == read["ETag"]
        assert read["ETag"].startswith('"')  # strong: If-Match compares strongly

    def test_a_put_without_if_match_is_a_428_and_changes_nothing(self, api):
        store(api, state={"a": 1})

        response = api.put(detail("task-123"), {"event_type": "x", "state": {}}, format="json")

        assert response.status_code == 428
        assert error_code(response) == "precondition_required"
        assert api.get(detail("task-123")).json()["state"] == {"a": 1}

    def test_a_put_with_the_current_etag_replaces_everything(self, api):
        etag = store(api, sub_tasks=["s1", "s2"], data={"q": 1}, state={"a": 1})["ETag"]

        response = api.put(
            detail("task-123"),
            {"event_type": "e2", "sub_tasks": ["s2", "s3"], "state": {"b": 2}},
            format="json",
            HTTP_IF_MATCH=etag,
        )

        assert response.status_code == 200
        body = response.json()
        assert body["sub_tasks"] == ["s2", "s3"]
        assert (body["event_type"], body["state"], body["data"]) == ("e2", {"b": 2}, {})
        assert body["response_topic"] == "action-results"
        assert response["ETag"] != etag
        assert api.get(by_subtask("s1")).status_code == 404

    def test_a_stale_put_is_a_412_and_changes_nothing(self, api):
        stale = store(api, sub_tasks=["s1", "s2"])["ETag"]
        api.patch(detail("task-123"), {"remove_sub_tasks": ["s1"]}, format="json")

        response = api.put(
            detail("task-123"),
            {"event_type": "x", "sub_tasks": ["s1", "s2"]},
            format="json",
            HTTP_IF_MATCH=stale,
        )

        assert response.status_code == 412
        assert error_code(response) == "precondition_failed"
        assert api.get(detail("task-123")).json()["sub_tasks"] == ["s2"]

    def test_a_stale_patch_is_a_412_and_changes_nothing(self, api):
        stale = store(api, state={"a": 1})["ETag"]
        api.patch(detail("task-123"), {"state": {"a": 2}}, format="json")

        response = api.patch(
            detail("task-123"), {"state": {"a": 3}}, format="json", HTTP_IF_MATCH=stale
        )

        assert response.status_code == 412
        assert api.get(detail("task-123")).json()["state"] == {"a": 2}

    @pytest.mark.parametrize(
        ("header", "status"), [("*", 200), ("W/{etag}", 412), ('"nope", {etag}', 200), ("", 412)]
    )
    def test_if_match_forms(self, api, header, status):
        etag = store(api)["ETag"]

        response = api.put(
            detail("task-123"),
            {"event_type": "x"},
            format="json",
            HTTP_IF_MATCH=header.format(etag=etag),
        )

        assert response.status_code == status

    def test_a_stale_delete_is_a_412(self, api):
        stale = store(api)["ETag"]
        api.patch(detail("task-123"), {"add_sub_tasks": ["s"]}, format="json")

        assert api.delete(detail("task-123"), HTTP_IF_MATCH=stale).status_code == 412
        assert TaskContext.objects.exists()

    def test_an_etag_of_a_deleted_task_never_matches_its_successor(self, api):
        old = store(api)["ETag"]
        api.delete(detail("task-123"))
        store(api)

        response = api.put(
            detail("task-123"), {"event_type": "x"}, format="json", HTTP_IF_MATCH=old
        )

        assert response.status_code == 412


class TestDeleteAndList:
    def test_delete_takes_the_sub_tasks_and_a_second_delete_is_a_404(self, api):
        store(api, sub_tasks=["s1"])

        assert api.delete(detail("task-123")).status_code == 204
        assert api.delete(detail("task-123")).status_code == 404
        assert api.get(detail("task-123")).status_code == 404
        assert api.get(by_subtask("s1")).status_code == 404
        assert SubTask.objects.count() == 0

    def test_list_filters_by_session_and_plan(self, api, session, tenant):
        task_services.plan_create(tenant=tenant, plan_id="p1", goal_event="g", user_id="u")
        store(api, "in-session", session_id=str(session.pk))
        store(api, "in-plan", plan_id="p1")
        store(api, "alone")

        def listed(**params):
            return [row["task_id"] for row in api.get(TASKS, params).json()["results"]]

        assert listed() == ["alone", "in-plan", "in-session"]
        assert listed(session_id=str(session.pk)) == ["in-session"]
        assert listed(plan_id="p1") == ["in-plan"]
        assert api.get(TASKS, {"session_id": "nope"}).status_code == 400

    def test_the_list_uses_a_fixed_number_of_queries(
        self, api, tenant, django_assert_max_num_queries
    ):
        api.get(TASKS)  # first use writes the key's last_used_at
        for index in range(20):
            task_services.task_context_create(
                tenant=tenant, task_id=f"t{index}", event_type="x", sub_tasks=[f"s{index}"]
            )

        # key lookup + page of tasks with their plans + their sub-tasks
        with django_assert_max_num_queries(3):
            response = api.get(TASKS)
        assert len(response.json()["results"]) == 20

    def test_a_session_counts_its_task_contexts(self, api, session):
        store(api, session_id=str(session.pk))

        detail_body = api.get(f"/api/v1/sessions/{session.pk}/").json()
        listed = api.get("/api/v1/sessions/").json()["results"][0]

        assert detail_body["task_context_count"] == listed["task_context_count"] == 1
        assert detail_body["plan_count"] == listed["plan_count"] == 0

    def test_deleting_the_session_deletes_its_task_contexts(self, api, session):
        store(api, session_id=str(session.pk), sub_tasks=["s"])

        api.delete(f"/api/v1/sessions/{session.pk}/")

        assert TaskContext.objects.count() == SubTask.objects.count() == 0


class TestAnotherTenant:
    @pytest.fixture
    def stored(self, api):
        return store(api, sub_tasks=["s1"])

    @pytest.mark.parametrize(
        ("method", "url", "body"),
        [
            ("get", detail("task-123"), None),
            ("put", detail("task-123"), {"event_type": "x"}),
            ("patch", detail("task-123"), {"remove_sub_tasks": ["s1"]}),
            ("delete", detail("task-123"), None),
            ("get", by_subtask("s1"), None),
        ],
    )
    def test_every_endpoint_is_a_404(self, outsider_api, stored, method, url, body):
        response = getattr(outsider_api, method)(url, body, format="json", HTTP_IF_MATCH="*")

        assert response.status_code == 404
        assert error_code(response) == "not_found"
        assert TaskContext.objects.get().sub_tasks.count() == 1

    def test_the_list_shows_none_of_ours(self, outsider_api, stored):
        assert outsider_api.get(TASKS).json()["results"] == []

    def test_ids_are_per_tenant(self, outsider_api, stored):
        response = outsider_api.post(
            TASKS, {"task_id": "task-123", "event_type": "x", "sub_tasks": ["s1"]}, format="json"
        )

        assert response.status_code == 201
        assert SubTask.objects.filter(subtask_id="s1").count() == 2

    @pytest.mark.parametrize("task_id", ["a%00b", "%ED%A0%80", "x" * 300])
    def test_an_id_no_task_could_have_is_a_404(self, api, task_id):
        assert api.get(detail(task_id)).status_code == 404
        assert api.get(by_subtask(task_id)).status_code == 404
