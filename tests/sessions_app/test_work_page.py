"""The page of running plans and task contexts still waiting for sub-tasks."""

from __future__ import annotations

from sessions_app.task_services import plan_create, task_context_create


def test_running_plans_and_open_tasks_only_of_this_tenant(
    editor, tenant, other_tenant, session, django_assert_max_num_queries
):
    plan_create(tenant=tenant, plan_id="p-run", goal_event="g", session_id=session.pk)
    done = plan_create(tenant=tenant, plan_id="p-done", goal_event="g", user_id="u1")
    done.status = "completed"
    done.save()
    plan_create(tenant=other_tenant, plan_id="p-theirs", goal_event="g", user_id="u9")
    task_context_create(tenant=tenant, task_id="t-open", event_type="e", sub_tasks=["s1", "s2"])
    task_context_create(tenant=tenant, task_id="t-empty", event_type="e")
    task_context_create(tenant=other_tenant, task_id="t-theirs", event_type="e", sub_tasks=["x"])

    with django_assert_max_num_queries(12):
        response = editor.get("/sessions/work/")

    html = response.content.decode()
    assert response.status_code == 200
    assert [plan.plan_id for plan in response.context["plans"]] == ["p-run"]
    assert [task.task_id for task in response.context["tasks"]] == ["t-open"]
    assert "p-theirs" not in html
    assert "t-theirs" not in html
    assert "<code>s1</code>, <code>s2</code>" in html


def test_the_query_count_does_not_grow_with_the_rows(editor, tenant, django_assert_max_num_queries):
    for number in range(30):
        plan_create(tenant=tenant, plan_id=f"p{number}", goal_event="g", user_id=f"u{number}")
        task_context_create(
            tenant=tenant, task_id=f"t{number}", event_type="e", sub_tasks=[f"s{number}"]
        )

    with django_assert_max_num_queries(12):
        response = editor.get("/sessions/work/")

    assert len(response.context["plans"]) == 30


def test_anonymous_visitors_log_in_first(client, db):
    assert client.get("/sessions/work/").url.startswith("/login/")
