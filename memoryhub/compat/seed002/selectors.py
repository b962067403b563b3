"""Seed 002's reads, narrowed as its row-level security narrows them: task contexts to the
tenant, plans and sessions to the tenant and the person (its `user_id`)."""

from __future__ import annotations

from django.db.models import F, QuerySet

from memoryhub.accounts.models import Tenant
from memoryhub.core.errors import ResourceNotFound
from sessions_app import task_selectors
from sessions_app.models import Plan, PlanStatus, Session, TaskContext

ACTIVE = "active"


def task_context_get(*, tenant: Tenant, task_id: str) -> TaskContext:
    task = (
        task_selectors.task_context_list_for_tenant(tenant=tenant)
        .select_related("seed002_plan_ref")
        .filter(task_id=task_id)
        .first()
    )
    if task is None:
        raise ResourceNotFound("No such task context.")
    return task


def task_context_by_subtask(*, tenant: Tenant, subtask_id: str) -> TaskContext:
    found = task_selectors.task_context_by_subtask(tenant=tenant, subtask_id=subtask_id)
    # The answer names the task's grouping string too: read it with the task.
    return task_context_get(tenant=tenant, task_id=found.task_id)


def _plans_of(*, tenant: Tenant, person: str) -> QuerySet[Plan]:
    # Naming the person's tenant lets the database use the (tenant, external_id) index.
    return task_selectors.plan_list_for_tenant(tenant=tenant).filter(
        end_user__tenant_id=F("tenant_id"), end_user__external_id=person
    )


def plan_list(*, tenant: Tenant, person: str, status: str | None, limit: int) -> list[Plan]:
    """The person's plans, newest first; `active` is the running ones."""
    plans = _plans_of(tenant=tenant, person=person)
    if status is not None:
        plans = plans.filter(status=PlanStatus.RUNNING if status == ACTIVE else status)
    return list(plans.order_by("-created_at", "-id")[:limit])


def plan_get(*, tenant: Tenant, person: str, plan_id: str) -> Plan:
    plan = _plans_of(tenant=tenant, person=person).filter(plan_id=plan_id).first()
    if plan is None:
        raise ResourceNotFound("No such plan.")
    return plan


def _sessions_of(*, tenant: Tenant, person: str) -> QuerySet[Session]:
    # Only sessions with an external key have a seed session_id to be named by.
    return (
        Session.objects.for_tenant(tenant)
        .select_related("end_user")
        .filter(
            end_user__tenant_id=F("tenant_id"),
            end_user__external_id=person,
            external_key__isnull=False,
        )
    )


def session_list(*, tenant: Tenant, person: str, limit: int) -> list[Session]:
    """The person's sessions, the most recent interaction first."""
    return list(
        _sessions_of(tenant=tenant, person=person).order_by("-last_active_at", "-id")[:limit]
    )


def session_get(*, tenant: Tenant, person: str, session_id: str) -> Session:
    session = _sessions_of(tenant=tenant, person=person).filter(external_key=session_id).first()
    if session is None:
        raise ResourceNotFound("No such session.")
    return session
