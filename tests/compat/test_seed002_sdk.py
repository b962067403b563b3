"""Seed 002's own test cases (02-MEMORY-SERVICE.md, "Testing Strategy"), run by its client over
HTTP against MemoryHub: the three unit tests as written there, and its integration test — the
whole worker flow — plus the planner's and the sessions' calls the document shows."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.compat.seed002_client import SeedMemoryClient, SeedMemoryError

# --- the seed's unit tests, as written ----------------------------------------------------------


def test_store_task_context(memory: Any) -> None:
    """Should store task context with sub-tasks."""

    async def scenario(memory: SeedMemoryClient) -> None:
        context = {
            "task_id": "task-123",
            "event_type": "research.requested",
            "response_event": "research.completed",
            "data": {"query": "AI trends"},
            "sub_tasks": ["sub-1", "sub-2"],
        }

        response = await memory.store_task_context(**context)
        assert response["task_id"] == "task-123"

        # The answer is the seed's: the task id and when it was stored, nothing else.
        assert set(response) == {"task_id", "created_at"}
        stored = await memory.get_task_context("task-123")
        assert stored["sub_tasks"] == ["sub-1", "sub-2"]
        assert stored["response_topic"] == "action-results"

    memory(scenario)


def test_find_by_subtask(memory: Any) -> None:
    """Should find parent task by sub-task ID."""

    async def scenario(memory: SeedMemoryClient) -> None:
        # Store parent task
        await memory.store_task_context(task_id="task-123", sub_tasks=["sub-1"])

        # Find by sub-task
        parent = await memory.get_task_by_subtask("sub-1")
        assert parent["task_id"] == "task-123"

    memory(scenario)


def test_list_active_plans(memory: Any) -> None:
    """Should list only active plans for user."""

    async def scenario(memory: SeedMemoryClient) -> None:
        # Create plans
        await memory.create_plan(plan_id="plan-1", status="running")
        await memory.create_plan(plan_id="plan-2", status="completed")

        # List active only
        plans = await memory.list_plans(status="active")
        assert len(plans) == 1
        assert plans[0]["plan_id"] == "plan-1"

    memory(scenario)


# --- the seed's integration test: the worker's async flow ---------------------------------------


def test_worker_async_flow(memory: Any) -> None:
    """Worker receives task → saves context; delegates → updates sub_tasks; results arrive →
    restores by sub-task ID; all sub-tasks done → completes and deletes context."""

    async def scenario(memory: SeedMemoryClient) -> None:
        # The planner's plan the task works for (the task's plan_id links it).
        await memory.create_plan(plan_id="plan-456", goal_event="research.goal", status="running")

        # Worker receives task → task.save() → POST
        task: dict[str, Any] = {
            "task_id": "task-123",
            "plan_id": "plan-456",
            "event_type": "research.requested",
            "response_event": "research.completed",
            "response_topic": "action-results",
            "data": {"query": "AI trends"},
            "sub_tasks": [],
            "state": {},
        }
        await memory.store_task_context(**task)

        # Delegates twice → task.sub_tasks.append(id); task.save() → PUT (partial, no If-Match)
        for sub_task_id, progress in (("subtask-1", 0.25), ("subtask-2", 0.5)):
            task["sub_tasks"].append(sub_task_id)
            task["state"] = {"progress": progress}
            await memory.update_task_context(
                "task-123", sub_tasks=task["sub_tasks"], state=task["state"]
            )
        stored = await memory.get_task_context("task-123")
        assert stored["sub_tasks"] == ["subtask-1", "subtask-2"]
        assert stored["state"] == {"progress": 0.5}
        assert stored["plan_id"] == "plan-456"
        assert stored["data"] == {"query": "AI trends"}

        # Results arrive → TaskContext.restore_by_subtask(result.correlation_id)
        for correlation_id in ("subtask-2", "subtask-1"):
            restored = await memory.get_task_by_subtask(correlation_id)
            assert restored["task_id"] == "task-123"
            restored["sub_tasks"].remove(correlation_id)
            results = {**restored["state"].get("results", {}), correlation_id: "done"}
            await memory.update_task_context(
                "task-123",
                sub_tasks=restored["sub_tasks"],
                state={**restored["state"], "results": results},
            )
            # The handled sub-task no longer leads anywhere.
            with pytest.raises(SeedMemoryError) as gone:
                await memory.get_task_by_subtask(correlation_id)
            assert gone.value.status_code == 404

        # All sub-tasks done → task.complete(...) → DELETE
        done = await memory.get_task_context("task-123")
        assert done["sub_tasks"] == []
        assert done["state"]["results"] == {"subtask-1": "done", "subtask-2": "done"}
        await memory.delete_task_context("task-123")
        with pytest.raises(SeedMemoryError) as deleted:
            await memory.get_task_context("task-123")
        assert deleted.value.status_code == 404
        # The plan is still there: completing a task is not completing the plan.
        assert (await memory.get_plan("plan-456"))["status"] == "running"

    memory(scenario)


# --- the planner's and the sessions' calls the document shows -----------------------------------


def test_planner_plan_lifecycle(memory: Any) -> None:
    async def scenario(memory: SeedMemoryClient) -> None:
        created = await memory.create_plan(
            plan_id="plan-123",
            goal_event="research.goal",
            goal_data={"topic": "AI trends"},
            status="running",
        )
        assert created["plan_id"] == "plan-123"

        listed = await memory.list_plans_raw(status="active", limit=10)
        assert listed["count"] == 1
        (item,) = listed["plans"]
        assert set(item) == {
            "plan_id",
            "goal_event",
            "goal_data",
            "status",
            "created_at",
            "updated_at",
        }
        assert (item["goal_event"], item["goal_data"]) == ("research.goal", {"topic": "AI trends"})

        await memory.update_plan("plan-123", state={"step": "searching", "done": []})
        await memory.update_plan("plan-123", status="completed", state={"step": "done"})
        plan = await memory.get_plan("plan-123")
        # PUT's state replaces the state machine (the seed's "updated state"), not merges.
        assert plan["state"] == {"step": "done"}
        assert plan["status"] == "completed"
        assert plan["goal_data"] == {"topic": "AI trends"}
        assert await memory.list_plans(status="active") == []

        await memory.delete_plan("plan-123")
        with pytest.raises(SeedMemoryError) as gone:
            await memory.get_plan("plan-123")
        assert gone.value.status_code == 404

    memory(scenario)


def test_session_lifecycle(memory: Any) -> None:
    async def scenario(memory: SeedMemoryClient) -> None:
        created = await memory.create_session(
            session_id="sess-456", agent_id="research-advisor", metadata={"source": "web-ui"}
        )
        assert created["session_id"] == "sess-456"

        listed = await memory.list_sessions(limit=10)
        assert listed["count"] == 1
        (item,) = listed["sessions"]
        assert set(item) == {"session_id", "agent_id", "created_at", "last_interaction", "metadata"}
        assert (item["agent_id"], item["metadata"]) == ("research-advisor", {"source": "web-ui"})

        touched = await memory.update_session("sess-456", last_interaction="2026-01-11T10:35:00Z")
        assert touched["last_interaction"] == "2026-01-11T10:35:00Z"
        assert (await memory.get_session("sess-456"))["last_interaction"] == "2026-01-11T10:35:00Z"

        # A touch without a time is now.
        before = dt.datetime.fromisoformat("2026-01-11T10:35:00+00:00")
        retouched = await memory.update_session("sess-456")
        assert dt.datetime.fromisoformat(retouched["last_interaction"]) > before

        # A wrong path is a JSON 404 for a POST too (no CSRF page in front of it).
        with pytest.raises(SeedMemoryError) as wrong:
            await memory._call("POST", "/session", json={"session_id": "x"})
        assert (wrong.value.status_code, wrong.value.body["error"]["code"]) == (404, "not_found")

        await memory.delete_session("sess-456")
        with pytest.raises(SeedMemoryError) as gone:
            await memory.get_session("sess-456")
        assert gone.value.status_code == 404
        assert (await memory.list_sessions())["count"] == 0

    memory(scenario)
