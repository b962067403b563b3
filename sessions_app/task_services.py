"""Every write to the working state of asynchronous agents: plans and task contexts (seed 002).

Each write locks its row (`SELECT … FOR UPDATE` on PostgreSQL; SQLite's IMMEDIATE transaction
already serialises writers), checks `If-Match` against the version it locked, applies the change
and bumps the version — so a stale writer gets 412 and changes nothing.

A PATCH needs no If-Match: its changes are relative to what is stored (add or remove these
sub-tasks, merge these keys into the state, move the status if the transition is allowed) and
applied under the lock, so two workers patching at once both keep their change. A PUT replaces
the whole resource, so it must say which version it replaces (428 without If-Match).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import prefetch_related_objects

from memoryhub.accounts.models import Actor, EndUser, Tenant
from memoryhub.accounts.services import audited_delete, end_user_get_or_create, end_user_hold
from memoryhub.core.errors import Conflict, InvalidInput, ResourceNotFound
from memoryhub.core.limits import json_size_bytes, limit
from memoryhub.core.locks import rows_hold
from sessions_app.models import (
    DEFAULT_RESPONSE_TOPIC,
    PLAN_STATUS_TRANSITIONS,
    Plan,
    PlanStatus,
    Session,
    SubTask,
    TaskContext,
)
from sessions_app.preconditions import IfMatch, precondition_check


def json_merge_patch(*, target: Any, patch: Any) -> Any:
    """RFC 7396: objects merge key by key (recursively), `null` removes a key, anything else
    replaces. Used by PATCH so concurrent writers of different keys keep each other's keys."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = json_merge_patch(target=merged.get(key), patch=value)
    return merged


def _checked_size(value: Any, *, field: str) -> Any:
    # Inputs are checked by the serializers; this catches what a merge made too big.
    maximum = limit("TASK_DATA_MAX_BYTES")
    if json_size_bytes(value) > maximum:
        raise InvalidInput(
            field=field,
            message=f"{field} would be larger than {maximum} bytes when encoded as JSON.",
            code="too_large",
        )
    return value


def _session_for(*, tenant: Tenant, session_id: uuid.UUID | None) -> Session | None:
    if session_id is None:
        return None
    session = (
        Session.objects.for_tenant(tenant).select_related("end_user").filter(pk=session_id).first()
    )
    if session is None:
        raise InvalidInput(field="session_id", message="No such session.", code="does_not_exist")
    return session


def _parents_hold(
    *, end_user_id: int | None, session: Session | None = None, plan: Plan | None = None
) -> None:
    """Before writing a plan or task context: hold its person, session and plan (the order an
    erasure locks in) until commit, so a delete under way either waits for this write or took
    them first — then the answer is the one a missing one gets, not a foreign-key error at
    commit."""
    if end_user_id is not None:
        end_user_hold(end_user_id=end_user_id)
    if session is not None and not rows_hold(Session.objects.filter(pk=session.pk)):
        raise InvalidInput(field="session_id", message="No such session.", code="does_not_exist")
    if plan is not None and not rows_hold(Plan.objects.filter(pk=plan.pk)):
        raise InvalidInput(field="plan_id", message="No such plan.", code="does_not_exist")


def _plan_for(*, tenant: Tenant, plan_id: str | None) -> Plan | None:
    if plan_id is None:
        return None
    plan = Plan.objects.for_tenant(tenant).filter(plan_id=plan_id).first()
    if plan is None:
        raise InvalidInput(field="plan_id", message="No such plan.", code="does_not_exist")
    return plan


# --- plans --------------------------------------------------------------------------------------


def _plan_owner(*, tenant: Tenant, user_id: str | None, session: Session | None) -> EndUser:
    """The plan's person: `user_id`, else the person of its session."""
    if user_id is None:
        if session is None or session.end_user is None:
            raise InvalidInput(
                field="user_id",
                message="Name the person the plan is for (or a session that has one).",
                code="required",
            )
        return session.end_user
    end_user = end_user_get_or_create(tenant=tenant, external_id=user_id)
    if session is not None and session.end_user_id not in (None, end_user.pk):
        raise InvalidInput(
            field="session_id",
            message="This session belongs to another person.",
            code="other_user",
        )
    return end_user


def _transition_check(*, current: str, new: str) -> None:
    if new not in PLAN_STATUS_TRANSITIONS[current]:
        raise Conflict(
            f"A {current} plan cannot become {new}: "
            f"{', '.join(sorted(PLAN_STATUS_TRANSITIONS[current]))} only.",
            code="invalid_status_transition",
        )


def plan_create(
    *,
    tenant: Tenant,
    plan_id: str,
    goal_event: str,
    goal_data: dict[str, Any] | None = None,
    status: str = PlanStatus.RUNNING,
    state: dict[str, Any] | None = None,
    user_id: str | None = None,
    session_id: uuid.UUID | None = None,
) -> Plan:
    """Create a plan; a plan_id the tenant already has is a 409 that names it."""
    session = _session_for(tenant=tenant, session_id=session_id)
    end_user = _plan_owner(tenant=tenant, user_id=user_id, session=session)
    try:
        with transaction.atomic():
            _parents_hold(end_user_id=end_user.pk, session=session)
            plan = Plan.objects.create(
                tenant=tenant,
                plan_id=plan_id,
                end_user=end_user,
                session=session,
                goal_event=goal_event,
                goal_data=goal_data or {},
                status=status,
                state=state or {},
            )
    except IntegrityError:
        if not Plan.objects.for_tenant(tenant).filter(plan_id=plan_id).exists():
            raise
        raise Conflict(
            f"A plan with plan_id {plan_id!r} already exists.", code="duplicate_plan_id"
        ) from None
    plan.end_user = end_user
    return plan


def _lock_plan(*, tenant: Tenant, plan_id: str) -> Plan:
    plan = (
        Plan.objects.for_tenant(tenant)
        .select_for_update(of=("self",))
        .select_related("end_user")
        .filter(plan_id=plan_id)
        .first()
    )
    if plan is None:
        raise ResourceNotFound("No such plan.")
    return plan


@transaction.atomic
def plan_replace(
    *,
    tenant: Tenant,
    plan_id: str,
    if_match: IfMatch | None,
    goal_event: str,
    goal_data: dict[str, Any] | None = None,
    status: str = PlanStatus.RUNNING,
    state: dict[str, Any] | None = None,
) -> Plan:
    """PUT: replace goal, status and state of the version named by If-Match (required).
    The plan's id, person and session are fixed at creation."""
    plan = _lock_plan(tenant=tenant, plan_id=plan_id)
    precondition_check(if_match=if_match, etag=plan.etag, required=True)
    _transition_check(current=plan.status, new=status)
    plan.goal_event = goal_event
    plan.goal_data = goal_data or {}
    plan.status = status
    plan.state = state or {}
    plan.version += 1
    plan.save()
    return plan


@transaction.atomic
def plan_patch(
    *,
    tenant: Tenant,
    plan_id: str,
    if_match: IfMatch | None,
    goal_event: str | None = None,
    goal_data_patch: dict[str, Any] | None = None,
    status: str | None = None,
    state_patch: dict[str, Any] | None = None,
) -> Plan:
    """PATCH: move the status (if allowed), merge into goal_data and state (RFC 7396), set
    goal_event. If-Match is optional; nothing changed writes nothing (the ETag stays)."""
    plan = _lock_plan(tenant=tenant, plan_id=plan_id)
    precondition_check(if_match=if_match, etag=plan.etag, required=False)
    changed = False
    if status is not None and status != plan.status:
        _transition_check(current=plan.status, new=status)
        plan.status, changed = status, True
    if goal_event is not None and goal_event != plan.goal_event:
        plan.goal_event, changed = goal_event, True
    if goal_data_patch is not None:
        merged = json_merge_patch(target=plan.goal_data, patch=goal_data_patch)
        if merged != plan.goal_data:
            plan.goal_data, changed = _checked_size(merged, field="goal_data"), True
    if state_patch is not None:
        merged = json_merge_patch(target=plan.state, patch=state_patch)
        if merged != plan.state:
            plan.state, changed = _checked_size(merged, field="state"), True
    if changed:
        plan.version += 1
        plan.save()
    return plan


@transaction.atomic
def plan_delete(
    *, tenant: Tenant, plan_id: str, if_match: IfMatch | None, actor: Actor
) -> dict[str, int]:
    """Delete a plan with its task contexts; audited, as a person's data is."""
    plan = _lock_plan(tenant=tenant, plan_id=plan_id)
    precondition_check(if_match=if_match, etag=plan.etag, required=False)
    return audited_delete(
        obj=plan,
        tenant=tenant,
        actor=actor,
        object_type="plan",
        object_id=plan.plan_id,
    )


# --- task contexts ------------------------------------------------------------------------------


def _unique_in_order(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def _sub_task_conflict(*, tenant: Tenant, task: TaskContext, subtask_ids: Sequence[str]) -> None:
    """409 when any of these sub-task ids is attached to another task of the tenant."""
    held = (
        SubTask.objects.for_tenant(tenant)
        .filter(subtask_id__in=list(subtask_ids))
        .exclude(task=task)
        .values_list("subtask_id", "task__task_id")
        .first()
    )
    if held is not None:
        subtask_id, holder = held
        raise Conflict(
            f"Sub-task {subtask_id!r} is already attached to task {holder!r}.",
            code="sub_task_conflict",
        )


def _sub_tasks_attach(
    *, tenant: Tenant, task: TaskContext, subtask_ids: Sequence[str]
) -> list[str]:
    """Attach the ids not attached yet; returns those, in order. Another task holding one is a
    409 — also when it took it a moment ago (the unique index decides a race)."""
    if not subtask_ids:
        return []
    already = set(
        SubTask.objects.filter(task=task, subtask_id__in=list(subtask_ids)).values_list(
            "subtask_id", flat=True
        )
    )
    new_ids = [subtask_id for subtask_id in subtask_ids if subtask_id not in already]
    if not new_ids:
        return []
    _sub_task_conflict(tenant=tenant, task=task, subtask_ids=new_ids)
    open_now = SubTask.objects.filter(task=task).count()
    maximum = limit("TASK_SUB_TASKS_MAX")
    if open_now + len(new_ids) > maximum:
        raise Conflict(
            f"A task waits for at most {maximum} sub-tasks at once; it has {open_now}.",
            code="sub_task_limit",
        )
    try:
        with transaction.atomic():
            SubTask.objects.bulk_create(
                [SubTask(tenant=tenant, task=task, subtask_id=subtask_id) for subtask_id in new_ids]
            )
    except IntegrityError:
        _sub_task_conflict(tenant=tenant, task=task, subtask_ids=new_ids)
        # The other task let go of it in between: still a conflict, as the race was lost.
        raise Conflict(
            "A sub-task was attached to another task at the same time.", code="sub_task_conflict"
        ) from None
    return new_ids


def _sub_tasks_detach(*, task: TaskContext, subtask_ids: Sequence[str]) -> list[str]:
    """Detach those of the ids the task has; returns them, in the order given. Ids it does not
    have are skipped, so a retried removal is harmless."""
    if not subtask_ids:
        return []
    attached = dict(
        SubTask.objects.filter(task=task, subtask_id__in=list(subtask_ids)).values_list(
            "subtask_id", "pk"
        )
    )
    if attached:
        SubTask.objects.filter(pk__in=list(attached.values())).delete()
    return [subtask_id for subtask_id in subtask_ids if subtask_id in attached]


def _with_sub_tasks(task: TaskContext) -> TaskContext:
    # Read inside the write's transaction: the list is what this write left, not what a later
    # writer made of it — which is how a result handler knows it removed the last sub-task.
    prefetch_related_objects([task], "sub_tasks")
    return task


def task_context_create(
    *,
    tenant: Tenant,
    task_id: str,
    event_type: str,
    response_event: str = "",
    response_topic: str = DEFAULT_RESPONSE_TOPIC,
    data: dict[str, Any] | None = None,
    state: dict[str, Any] | None = None,
    sub_tasks: Sequence[str] = (),
    plan_id: str | None = None,
    session_id: uuid.UUID | None = None,
) -> TaskContext:
    """Store a task context with its sub-tasks; a task_id the tenant already has, or a
    sub-task attached to another task, is a 409 (and nothing is stored)."""
    plan = _plan_for(tenant=tenant, plan_id=plan_id)
    session = _session_for(tenant=tenant, session_id=session_id)
    owner = plan.end_user_id if plan else session.end_user_id if session else None
    with transaction.atomic():
        _parents_hold(end_user_id=owner, session=session, plan=plan)
        try:
            with transaction.atomic():
                task = TaskContext.objects.create(
                    tenant=tenant,
                    task_id=task_id,
                    plan=plan,
                    session=session,
                    event_type=event_type,
                    response_event=response_event,
                    response_topic=response_topic,
                    data=data or {},
                    state=state or {},
                )
        except IntegrityError:
            if not TaskContext.objects.for_tenant(tenant).filter(task_id=task_id).exists():
                raise
            raise Conflict(
                f"A task context with task_id {task_id!r} already exists.",
                code="duplicate_task_id",
            ) from None
        _sub_tasks_attach(tenant=tenant, task=task, subtask_ids=_unique_in_order(sub_tasks))
        return _with_sub_tasks(task)


def _lock_task_context(*, tenant: Tenant, task_id: str) -> TaskContext:
    task = (
        TaskContext.objects.for_tenant(tenant)
        .select_for_update(of=("self",))
        .select_related("plan")
        .filter(task_id=task_id)
        .first()
    )
    if task is None:
        raise ResourceNotFound("No such task context.")
    return task


@transaction.atomic
def task_context_replace(
    *,
    tenant: Tenant,
    task_id: str,
    if_match: IfMatch | None,
    event_type: str,
    response_event: str = "",
    response_topic: str = DEFAULT_RESPONSE_TOPIC,
    data: dict[str, Any] | None = None,
    state: dict[str, Any] | None = None,
    sub_tasks: Sequence[str] = (),
    plan_id: str | None = None,
    session_id: uuid.UUID | None = None,
) -> TaskContext:
    """PUT: replace everything but the task_id, sub-task list included, in the version named by
    If-Match (required)."""
    task = _lock_task_context(tenant=tenant, task_id=task_id)
    precondition_check(if_match=if_match, etag=task.etag, required=True)
    task.plan = _plan_for(tenant=tenant, plan_id=plan_id)
    task.session = _session_for(tenant=tenant, session_id=session_id)
    task.event_type = event_type
    task.response_event = response_event
    task.response_topic = response_topic
    task.data = data or {}
    task.state = state or {}
    wanted = _unique_in_order(sub_tasks)
    current = list(SubTask.objects.filter(task=task).values_list("subtask_id", flat=True))
    _sub_tasks_detach(task=task, subtask_ids=[item for item in current if item not in wanted])
    _sub_tasks_attach(tenant=tenant, task=task, subtask_ids=wanted)
    task.version += 1
    task.save()
    return _with_sub_tasks(task)


@dataclass(frozen=True)
class TaskContextPatched:
    task: TaskContext
    added_sub_tasks: list[str]
    removed_sub_tasks: list[str]


@transaction.atomic
def task_context_patch(
    *,
    tenant: Tenant,
    task_id: str,
    if_match: IfMatch | None,
    add_sub_tasks: Sequence[str] = (),
    remove_sub_tasks: Sequence[str] = (),
    state_patch: dict[str, Any] | None = None,
    data_patch: dict[str, Any] | None = None,
    event_type: str | None = None,
    response_event: str | None = None,
    response_topic: str | None = None,
) -> TaskContextPatched:
    """PATCH: remove, then add sub-tasks; merge into state and data (RFC 7396); set the event
    fields. Atomic under the task's row lock, so If-Match is optional. The result says which
    sub-tasks this call really added and removed, and (on the task) which are left."""
    task = _lock_task_context(tenant=tenant, task_id=task_id)
    precondition_check(if_match=if_match, etag=task.etag, required=False)
    removed = _sub_tasks_detach(task=task, subtask_ids=_unique_in_order(remove_sub_tasks))
    added = _sub_tasks_attach(tenant=tenant, task=task, subtask_ids=_unique_in_order(add_sub_tasks))
    changed = bool(removed or added)
    for name, value in (
        ("event_type", event_type),
        ("response_event", response_event),
        ("response_topic", response_topic),
    ):
        if value is not None and value != getattr(task, name):
            setattr(task, name, value)
            changed = True
    for name, patch in (("state", state_patch), ("data", data_patch)):
        if patch is not None:
            merged = json_merge_patch(target=getattr(task, name), patch=patch)
            if merged != getattr(task, name):
                setattr(task, name, _checked_size(merged, field=name))
                changed = True
    if changed:
        task.version += 1
        task.save()
    return TaskContextPatched(
        task=_with_sub_tasks(task), added_sub_tasks=added, removed_sub_tasks=removed
    )


@transaction.atomic
def task_context_delete(*, tenant: Tenant, task_id: str, if_match: IfMatch | None) -> None:
    """Delete a task context with its sub-tasks. Not audited: deleting is how a worker says
    "done", once per task, as often as tasks finish. A second DELETE is a 404, so of several
    handlers racing to complete a task exactly one succeeds."""
    task = _lock_task_context(tenant=tenant, task_id=task_id)
    precondition_check(if_match=if_match, etag=task.etag, required=False)
    task.delete()
