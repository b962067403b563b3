"""A person's plans, and the task contexts of their plans and sessions, go with their erasure."""

from __future__ import annotations

from sessions_app.models import Plan, SubTask, TaskContext
from sessions_app.services import session_create_or_get
from sessions_app.task_services import plan_create, task_context_create
from tests.helpers import client_for


def test_erasure_takes_the_persons_plans_and_their_task_contexts(tenant, make_key):
    _, secret = make_key(tenant, scopes=["read", "write", "purge"])
    session, _ = session_create_or_get(tenant=tenant, user_id="sachi")
    plan_create(tenant=tenant, plan_id="no-session", goal_event="g", user_id="sachi")
    plan_create(tenant=tenant, plan_id="bobs", goal_event="g", user_id="bob")
    task_context_create(
        tenant=tenant, task_id="of-plan", event_type="e", plan_id="no-session", sub_tasks=["s1"]
    )
    task_context_create(tenant=tenant, task_id="of-session", event_type="e", session_id=session.pk)
    task_context_create(tenant=tenant, task_id="of-bob", event_type="e", plan_id="bobs")
    task_context_create(tenant=tenant, task_id="of-nobody", event_type="e", sub_tasks=["s2"])

    response = client_for(secret).delete("/api/v1/users/sachi/")

    assert response.status_code == 200
    erased = response.json()["erased"]
    assert (erased["plans"], erased["task_contexts"], erased["sub_tasks"]) == (1, 2, 1)
    assert list(Plan.objects.values_list("plan_id", flat=True)) == ["bobs"]
    assert set(TaskContext.objects.values_list("task_id", flat=True)) == {"of-bob", "of-nobody"}
    assert list(SubTask.objects.values_list("subtask_id", flat=True)) == ["s2"]
