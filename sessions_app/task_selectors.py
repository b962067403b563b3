"""Reads of the working state of asynchronous agents: plans and task contexts (seed 002)."""

from __future__ import annotations

from django.db.models import QuerySet, prefetch_related_objects

from memoryhub.accounts.models import Tenant
from memoryhub.core.errors import ResourceNotFound
from sessions_app.models import Plan, SubTask, TaskContext


def plan_list_for_tenant(*, tenant: Tenant) -> QuerySet[Plan]:
    """The tenant's plans with their people; the API narrows it with PlanFilter."""
    return Plan.objects.for_tenant(tenant).select_related("end_user")


def plan_get_for_tenant(*, tenant: Tenant, plan_id: str) -> Plan:
    plan = plan_list_for_tenant(tenant=tenant).filter(plan_id=plan_id).first()
    if plan is None:
        raise ResourceNotFound("No such plan.")
    return plan


def task_context_list_for_tenant(*, tenant: Tenant) -> QuerySet[TaskContext]:
    """The tenant's task contexts with their plan ids and sub-tasks: two queries for a page
    (the sub-tasks of all its rows in one)."""
    return (
        TaskContext.objects.for_tenant(tenant).select_related("plan").prefetch_related("sub_tasks")
    )


def task_context_get_for_tenant(*, tenant: Tenant, task_id: str) -> TaskContext:
    task = task_context_list_for_tenant(tenant=tenant).filter(task_id=task_id).first()
    if task is None:
        raise ResourceNotFound("No such task context.")
    return task


def task_context_by_subtask(*, tenant: Tenant, subtask_id: str) -> TaskContext:
    """The task waiting for this sub-task: one probe of the unique (tenant, subtask_id) index,
    then the task's sub-tasks."""
    found = (
        SubTask.objects.for_tenant(tenant)
        .filter(subtask_id=subtask_id)
        .select_related("task", "task__plan")
        .first()
    )
    if found is None:
        raise ResourceNotFound("No task waits for this sub-task.")
    task: TaskContext = found.task
    prefetch_related_objects([task], "sub_tasks")
    return task
