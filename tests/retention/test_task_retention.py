"""Retention of plans and task contexts (issue 6, item 5): finished ones unchanged for the
tenant's `task_retention_days` (30 by default) go with the cleanup; live work stays."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError, transaction

from memoryhub.accounts.models import AuditEvent, MemoryPolicy
from memoryhub.retention import prune as retention
from sessions_app import task_services
from sessions_app.models import Plan, PlanStatus, SubTask, TaskContext

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
SECOND = dt.timedelta(seconds=1)


def plan(tenant, plan_id, *, status=PlanStatus.RUNNING, updated_at):
    task_services.plan_create(
        tenant=tenant, plan_id=plan_id, goal_event="g", user_id="u", status=status
    )
    Plan.objects.filter(tenant=tenant, plan_id=plan_id).update(updated_at=updated_at)
    return plan_id


def task(tenant, task_id, *, updated_at, sub_tasks=(), plan_id=None):
    task_services.task_context_create(
        tenant=tenant, task_id=task_id, event_type="x", sub_tasks=sub_tasks, plan_id=plan_id
    )
    TaskContext.objects.filter(tenant=tenant, task_id=task_id).update(updated_at=updated_at)
    return task_id


def plans(tenant) -> set[str]:
    return set(Plan.objects.filter(tenant=tenant).values_list("plan_id", flat=True))


def tasks(tenant) -> set[str]:
    return set(TaskContext.objects.filter(tenant=tenant).values_list("task_id", flat=True))


OLD = NOW - 30 * DAY - SECOND
RECENT = NOW - 30 * DAY + SECOND


class TestWhatGoes:
    def test_finished_plans_past_thirty_days_go_running_and_recent_ones_stay(self, tenant):
        for status in ("completed", "failed", "cancelled"):
            plan(tenant, f"old-{status}", status=status, updated_at=OLD)
            plan(tenant, f"recent-{status}", status=status, updated_at=RECENT)
        plan(tenant, "old-running", updated_at=OLD)

        report = retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert plans(tenant) == {
            "recent-completed",
            "recent-failed",
            "recent-cancelled",
            "old-running",
        }
        assert report.as_dict() == {"plans": 3}
        assert report.cutoffs["plans"] == (NOW - 30 * DAY).isoformat()

    def test_a_task_context_goes_when_it_waits_for_nothing_or_its_plan_finished(self, tenant):
        plan(tenant, "done", status=PlanStatus.COMPLETED, updated_at=RECENT)
        plan(tenant, "live", updated_at=OLD)
        task(tenant, "idle", updated_at=OLD)
        task(tenant, "waiting", updated_at=OLD, sub_tasks=["w1"])
        task(tenant, "of-done-plan", updated_at=OLD, sub_tasks=["d1"], plan_id="done")
        task(tenant, "of-live-plan", updated_at=OLD, sub_tasks=["l1"], plan_id="live")
        task(tenant, "recent-idle", updated_at=RECENT)

        report = retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert tasks(tenant) == {"waiting", "of-live-plan", "recent-idle"}
        assert report.as_dict() == {"task_contexts": 2, "sub_tasks": 1}
        assert set(SubTask.objects.values_list("subtask_id", flat=True)) == {"w1", "l1"}

    def test_a_finished_plan_takes_its_task_contexts(self, tenant):
        plan(tenant, "done", status=PlanStatus.FAILED, updated_at=OLD)
        task(tenant, "busy", updated_at=RECENT, sub_tasks=["s1", "s2"], plan_id="done")

        report = retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert (plans(tenant), tasks(tenant)) == (set(), set())
        assert report.as_dict() == {"plans": 1, "task_contexts": 1, "sub_tasks": 2}
        event = AuditEvent.objects.get(tenant=tenant, object_type="retention")
        assert event.counts == {"plans": 1, "task_contexts": 1, "sub_tasks": 2}

    def test_a_dry_run_counts_what_the_run_removes_and_removes_nothing(self, tenant):
        plan(tenant, "done", status=PlanStatus.COMPLETED, updated_at=OLD)
        task(tenant, "of-done", updated_at=RECENT, sub_tasks=["s1", "s2"], plan_id="done")
        task(tenant, "old-of-done", updated_at=OLD, plan_id="done")
        task(tenant, "idle", updated_at=OLD)

        dry = retention.retention_prune_tenant(tenant=tenant, now=NOW, dry_run=True)
        assert (len(plans(tenant)), len(tasks(tenant))) == (1, 3)
        report = retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert (
            dry.as_dict()
            == report.as_dict()
            == {
                "plans": 1,
                "task_contexts": 3,
                "sub_tasks": 2,
            }
        )
        assert retention.retention_prune_tenant(tenant=tenant, now=NOW).total == 0

    def test_it_deletes_in_batches(self, tenant):
        for index in range(7):
            plan(tenant, f"p{index}", status=PlanStatus.COMPLETED, updated_at=OLD)
            task(tenant, f"t{index}", updated_at=OLD)

        report = retention.retention_prune_tenant(tenant=tenant, now=NOW, batch_size=3)

        assert report.as_dict() == {"plans": 7, "task_contexts": 7}


class TestPolicy:
    def test_the_tenants_policy_sets_the_age(self, tenant):
        MemoryPolicy.objects.create(tenant=tenant, task_retention_days=7)
        plan(tenant, "eight-days", status=PlanStatus.COMPLETED, updated_at=NOW - 8 * DAY)
        plan(tenant, "six-days", status=PlanStatus.COMPLETED, updated_at=NOW - 6 * DAY)

        retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert plans(tenant) == {"six-days"}

    def test_empty_keeps_them_forever(self, tenant):
        MemoryPolicy.objects.create(tenant=tenant, task_retention_days=None)
        plan(tenant, "ancient", status=PlanStatus.COMPLETED, updated_at=NOW - 999 * DAY)
        task(tenant, "ancient-task", updated_at=NOW - 999 * DAY)

        report = retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert (plans(tenant), tasks(tenant)) == ({"ancient"}, {"ancient-task"})
        assert report.cutoffs["plans"] is None

    def test_another_tenants_work_is_untouched(self, tenant, other_tenant):
        plan(other_tenant, "theirs", status=PlanStatus.COMPLETED, updated_at=OLD)
        task(other_tenant, "their-task", updated_at=OLD)

        retention.retention_prune_tenant(tenant=tenant, now=NOW)

        assert (plans(other_tenant), tasks(other_tenant)) == ({"theirs"}, {"their-task"})

    def test_the_policy_refuses_zero_days(self, tenant):
        with pytest.raises(IntegrityError), transaction.atomic():
            MemoryPolicy.objects.create(tenant=tenant, task_retention_days=0)
