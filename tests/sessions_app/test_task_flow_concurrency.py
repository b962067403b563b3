"""Seed 002's worker flow through the real API with real concurrency: threads, each with its own
database connection, on SQLite and PostgreSQL. No update may be lost, a task must complete
exactly once, and a stale writer must be told so (412)."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from memoryhub.accounts.services import api_key_create
from sessions_app.models import Plan, SubTask, TaskContext
from tests.factories import TenantFactory
from tests.helpers import client_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TASKS = "/api/v1/task-contexts/"
PLANS = "/api/v1/plans/"
SUB_TASKS = 8


def detail(task_id: str) -> str:
    return f"{TASKS}{task_id}/"


@pytest.fixture
def secret():
    tenant = TenantFactory(slug="workers")
    return api_key_create(tenant=tenant, name="t", scopes=["read", "write"])[1]


def all_at_once(count, work):
    """Run work(0..count-1) in `count` threads released together by a barrier."""
    barrier = threading.Barrier(count)

    def run(index):
        try:
            barrier.wait(timeout=30)
            return work(index)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(run, range(count)))


def test_the_worker_flow_completes_each_task_exactly_once(secret):
    worker = client_for(secret)
    # The worker receives a task and saves its context...
    created = worker.post(
        TASKS,
        {
            "task_id": "task-123",
            "event_type": "research.requested",
            "response_event": "research.completed",
            "data": {"query": "AI trends"},
        },
        format="json",
    )
    assert created.status_code == 201
    # ...delegates to sub-agents and records the sub-tasks.
    sub_tasks = [f"web.search:{index}" for index in range(SUB_TASKS)]
    delegated = worker.patch(detail("task-123"), {"add_sub_tasks": sub_tasks}, format="json")
    assert delegated.json()["sub_tasks"] == sub_tasks

    def handle_result(index):
        # Every result is delivered twice (at-least-once delivery): 2 handlers per sub-task.
        client = client_for(secret)
        subtask_id = sub_tasks[index % SUB_TASKS]
        parent = client.get(f"{TASKS}by-subtask/{subtask_id}/")
        if parent.status_code == 404:
            return "dropped", None  # a duplicate, after the first copy was handled
        task_id = parent.json()["task_id"]
        patched = client.patch(
            detail(task_id),
            {"remove_sub_tasks": [subtask_id], "state": {"results": {subtask_id: index}}},
            format="json",
        )
        if patched.status_code == 404:
            return "dropped", None  # the task completed meanwhile
        assert patched.status_code == 200, patched.content
        body = patched.json()
        if body["removed_sub_tasks"] == [subtask_id] and body["sub_tasks"] == []:
            # The last result: complete the task with every result, then delete its context.
            deleted = client.delete(detail(task_id))
            return "completed", (body["state"]["results"], deleted.status_code)
        return "waiting", None

    outcomes = all_at_once(2 * SUB_TASKS, handle_result)

    completions = [detail_ for kind, detail_ in outcomes if kind == "completed"]
    assert len(completions) == 1
    results, delete_status = completions[0]
    assert delete_status == 204
    assert sorted(results) == sorted(sub_tasks)  # no handler's result was lost
    assert TaskContext.objects.count() == SubTask.objects.count() == 0
    assert worker.get(detail("task-123")).status_code == 404


def test_concurrent_sub_task_adds_and_removes_lose_nothing(secret):
    client = client_for(secret)
    initial = [f"old-{index}" for index in range(6)]
    client.post(TASKS, {"task_id": "t", "event_type": "x", "sub_tasks": initial}, format="json")

    def work(index):
        return (
            client_for(secret)
            .patch(
                detail("t"),
                {"remove_sub_tasks": [f"old-{index}"], "add_sub_tasks": [f"new-{index}"]},
                format="json",
            )
            .status_code
        )

    codes = all_at_once(6, work)

    assert codes == [200] * 6
    left = client.get(detail("t")).json()["sub_tasks"]
    assert sorted(left) == [f"new-{index}" for index in range(6)]


def test_of_stale_writers_one_wins_and_the_others_get_412(secret):
    client = client_for(secret)
    etag = client.post(TASKS, {"task_id": "t", "event_type": "x"}, format="json")["ETag"]

    def work(index):
        response = client_for(secret).put(
            detail("t"),
            {"event_type": "x", "state": {"writer": index}},
            format="json",
            HTTP_IF_MATCH=etag,
        )
        return response.status_code

    codes = all_at_once(6, work)

    assert sorted(codes) == [200] + [412] * 5
    winner = codes.index(200)
    assert client.get(detail("t")).json()["state"] == {"writer": winner}


def test_concurrent_creates_of_one_task_id_store_one(secret):
    def work(index):
        return (
            client_for(secret)
            .post(
                TASKS,
                {"task_id": "same", "event_type": "x", "sub_tasks": [f"s{index}"]},
                format="json",
            )
            .status_code
        )

    codes = all_at_once(6, work)

    assert sorted(codes) == [201] + [409] * 5
    assert TaskContext.objects.count() == 1
    assert SubTask.objects.count() == 1


def test_a_sub_task_claimed_by_two_tasks_at_once_goes_to_one(secret):
    def work(index):
        return (
            client_for(secret)
            .post(
                TASKS,
                {"task_id": f"task-{index}", "event_type": "x", "sub_tasks": ["contested"]},
                format="json",
            )
            .status_code
        )

    codes = all_at_once(6, work)

    assert sorted(codes) == [201] + [409] * 5
    assert TaskContext.objects.count() == SubTask.objects.count() == 1


def test_concurrent_plan_updates_keep_every_key_and_one_final_status(secret):
    client = client_for(secret)
    client.post(PLANS, {"plan_id": "p", "user_id": "u", "goal_event": "g"}, format="json")
    finishes = ["completed", "cancelled"]

    def work(index):
        response = client_for(secret).patch(
            f"{PLANS}p/",
            {"status": finishes[index % 2], "state": {f"k{index}": index}},
            format="json",
        )
        return response.status_code, finishes[index % 2]

    outcomes = all_at_once(6, work)

    accepted = [status for code, status in outcomes if code == 200]
    assert Counter(code for code, _ in outcomes) == {200: 3, 409: 3}
    assert len(set(accepted)) == 1
    plan = Plan.objects.get()
    assert plan.status == accepted[0]
    assert plan.state == {
        f"k{index}": index for index, (code, _) in enumerate(outcomes) if code == 200
    }
