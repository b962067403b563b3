"""Seed 002's writes, each one a call of MemoryHub's own services (sessions_app).

The seed's PUT is a partial update whose fields *replace* the stored ones (a new `sub_tasks`
list, a new `state`), without If-Match. MemoryHub's PUT replaces everything and needs If-Match;
its PATCH merges. So a seed PUT locks the row, fills in what the body left out from the row it
holds, and calls the replacing service with that row's ETag: the same checks (sub-task
conflicts, plan transitions, sizes) in one transaction, and no lost update between the read and
the write.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from memoryhub.accounts.models import Actor, Tenant
from memoryhub.compat.seed002.models import TaskPlanRef
from memoryhub.core.errors import InvalidInput, ResourceNotFound
from sessions_app import services as session_services
from sessions_app import task_services
from sessions_app.models import DEFAULT_RESPONSE_TOPIC, Plan, Session, SubTask, TaskContext
from sessions_app.preconditions import IfMatch
from sessions_app.services import CREATED_AT_CLOCK_SKEW


def _exactly(etag: str) -> IfMatch:
    return IfMatch(any=False, tags=frozenset({etag}))


def _linked_plan_id(*, tenant: Tenant, plan_id: str | None) -> str | None:
    """The plan_id to link when it names a plan of the tenant; None when it is a bare
    grouping string (kept in TaskPlanRef instead)."""
    if plan_id is None:
        return None
    return plan_id if Plan.objects.for_tenant(tenant).filter(plan_id=plan_id).exists() else None


def _plan_ref_set(*, tenant: Tenant, task: TaskContext, plan_id: str | None, linked: bool) -> None:
    if plan_id is None or linked:
        TaskPlanRef.objects.filter(task=task).delete()
        return
    TaskPlanRef.objects.update_or_create(task=task, defaults={"tenant": tenant, "plan_id": plan_id})


# --- task contexts ------------------------------------------------------------------------------


def task_context_store(
    *,
    tenant: Tenant,
    task_id: str,
    plan_id: str | None = None,
    event_type: str = "",
    response_event: str | None = "",
    response_topic: str = DEFAULT_RESPONSE_TOPIC,
    data: dict[str, Any] | None = None,
    sub_tasks: list[str] | None = None,
    state: dict[str, Any] | None = None,
) -> TaskContext:
    """POST: store a task context (409 for a task_id the tenant has)."""
    linked = _linked_plan_id(tenant=tenant, plan_id=plan_id)
    with transaction.atomic():
        task = task_services.task_context_create(
            tenant=tenant,
            task_id=task_id,
            plan_id=linked,
            event_type=event_type,
            response_event=response_event or "",
            response_topic=response_topic,
            data=data,
            state=state,
            sub_tasks=sub_tasks or (),
        )
        _plan_ref_set(tenant=tenant, task=task, plan_id=plan_id, linked=linked is not None)
    return task


@transaction.atomic
def task_context_update(*, tenant: Tenant, task_id: str, changes: Mapping[str, Any]) -> TaskContext:
    """PUT: the fields in `changes` replace the stored ones; the others stay."""
    task = (
        TaskContext.objects.for_tenant(tenant)
        .select_for_update(of=("self",))
        .select_related("plan", "seed002_plan_ref")
        .filter(task_id=task_id)
        .first()
    )
    if task is None:
        raise ResourceNotFound("No such task context.")
    if "plan_id" in changes:
        plan_id = changes["plan_id"]
        linked = _linked_plan_id(tenant=tenant, plan_id=plan_id)
    else:
        linked = task.plan.plan_id if task.plan is not None else None
        plan_id = linked if linked is not None else _plan_ref_of(task)
    sub_tasks = changes.get("sub_tasks")
    if sub_tasks is None:
        sub_tasks = list(SubTask.objects.filter(task=task).values_list("subtask_id", flat=True))
    response_event = changes.get("response_event", task.response_event)
    replaced = task_services.task_context_replace(
        tenant=tenant,
        task_id=task_id,
        if_match=_exactly(task.etag),
        event_type=changes.get("event_type", task.event_type),
        response_event=response_event or "",
        response_topic=changes.get("response_topic", task.response_topic),
        data=changes.get("data", task.data),
        state=changes.get("state", task.state),
        sub_tasks=sub_tasks,
        plan_id=linked,
        session_id=task.session_id,
    )
    _plan_ref_set(tenant=tenant, task=replaced, plan_id=plan_id, linked=linked is not None)
    return replaced


def task_context_remove(*, tenant: Tenant, task_id: str) -> None:
    """DELETE: the task is done (a second delete is a 404, as in MemoryHub's API)."""
    task_services.task_context_delete(tenant=tenant, task_id=task_id, if_match=None)


def _plan_ref_of(task: TaskContext) -> str | None:
    try:
        return task.seed002_plan_ref.plan_id
    except TaskPlanRef.DoesNotExist:
        return None


# --- plans --------------------------------------------------------------------------------------


def plan_store(
    *,
    tenant: Tenant,
    person: str,
    plan_id: str,
    goal_event: str = "",
    goal_data: dict[str, Any] | None = None,
    status: str,
    state: dict[str, Any] | None = None,
) -> Plan:
    """POST: a plan of `person` (409 for a plan_id the tenant has)."""
    return task_services.plan_create(
        tenant=tenant,
        plan_id=plan_id,
        goal_event=goal_event,
        goal_data=goal_data,
        status=status,
        state=state,
        user_id=person,
    )


@transaction.atomic
def plan_update(*, tenant: Tenant, person: str, plan_id: str, changes: Mapping[str, Any]) -> Plan:
    """PUT: the fields in `changes` replace the stored ones; a finished plan stays finished
    (409 `invalid_status_transition`, as in MemoryHub's own API)."""
    plan = (
        Plan.objects.for_tenant(tenant)
        .select_for_update(of=("self",))
        .filter(plan_id=plan_id, end_user__tenant_id=F("tenant_id"), end_user__external_id=person)
        .first()
    )
    if plan is None:
        raise ResourceNotFound("No such plan.")
    return task_services.plan_replace(
        tenant=tenant,
        plan_id=plan_id,
        if_match=_exactly(plan.etag),
        goal_event=changes.get("goal_event", plan.goal_event),
        goal_data=changes.get("goal_data", plan.goal_data),
        status=changes.get("status", plan.status),
        state=changes.get("state", plan.state),
    )


def plan_remove(*, tenant: Tenant, plan: Plan, actor: Actor) -> None:
    """DELETE: the plan with its task contexts, audited (MemoryHub's plan delete)."""
    task_services.plan_delete(tenant=tenant, plan_id=plan.plan_id, if_match=None, actor=actor)


# --- sessions -----------------------------------------------------------------------------------


def session_store(
    *,
    tenant: Tenant,
    person: str,
    session_id: str,
    agent_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> tuple[Session, bool]:
    """POST: the client's session_id is the session's external key. A session_id the tenant
    has already answers that session (created=False), as MemoryHub's get-or-create does; one
    held by another person's session is a 409."""
    return session_services.session_create_or_get(
        tenant=tenant,
        user_id=person,
        agent_id=agent_id or "",
        external_key=session_id,
        metadata=metadata,
    )


def _interaction_time(value: dt.datetime) -> dt.datetime:
    now = timezone.now()
    if value > now + CREATED_AT_CLOCK_SKEW:
        raise InvalidInput(
            field="last_interaction",
            message="last_interaction is in the future.",
            code="in_future",
        )
    # A clock a little ahead is taken as now, as for messages' created_at.
    return min(value, now)


def session_touch(
    *,
    session: Session,
    last_interaction: dt.datetime | None = None,
    agent_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Session:
    """PUT: set the last interaction (now when not given), and agent_id/metadata if sent.
    MemoryHub's session update counts as activity already; a given time then replaces now."""
    when = _interaction_time(last_interaction) if last_interaction is not None else None
    with transaction.atomic():
        session = session_services.session_update(
            session=session, agent_id=agent_id, metadata=metadata
        )
        if when is not None:
            Session.objects.filter(pk=session.pk).update(last_active_at=when)
            session.last_active_at = when
    return session


def session_remove(*, session: Session, actor: Actor) -> None:
    """DELETE: the session with its messages, state, plans and task contexts, audited."""
    session_services.session_delete(session=session, actor=actor)
