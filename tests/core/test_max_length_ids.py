"""Every id the API accepts works in every operation at its maximum length: person ids (255),
memory keys (64), plan, task and sub-task ids (255), external keys (255). The audit log's
object id holds the longest of them (a person id with a memory key)."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from memoryhub.accounts.models import AuditEvent
from tests.helpers import client_for

PERSON = "whatsapp:+49" + "9" * 243  # 255 characters
KEY = "k" * 64
WORK_ID = "w" * 255
EXTERNAL_KEY = "tui:" + "x" * 251


@pytest.fixture
def owner(tenant, make_key):
    return client_for(make_key(tenant, scopes=["read", "write", "purge", "global-memory"])[1])


def ok(response, *codes: int) -> dict:
    assert response.status_code in (codes or (200, 201, 204)), response.content
    return response.json() if response.content else {}


def test_the_ids_are_at_their_maximum():
    assert (len(PERSON), len(KEY), len(WORK_ID), len(EXTERNAL_KEY)) == (255, 64, 255, 255)


def test_a_person_with_the_longest_id_can_do_everything_and_be_erased(owner, tenant):
    person = quote(PERSON, safe="")
    session = ok(
        owner.post(
            "/api/v1/sessions/",
            {"user_id": PERSON, "external_key": EXTERNAL_KEY},
            format="json",
        )
    )
    ok(
        owner.post(
            f"/api/v1/sessions/{session['id']}/messages/",
            {"role": "user", "content": "hello"},
            format="json",
        )
    )
    ok(owner.put(f"/api/v1/users/{person}/memories/{KEY}/", {"content": "x"}, format="json"))
    ok(owner.put(f"/api/v1/users/{person}/memories/{KEY}/", {"content": "y"}, format="json"))
    ok(owner.get(f"/api/v1/users/{person}/memories/{KEY}/versions/"))
    ok(owner.put(f"/api/v1/users/{person}/notes/long-term/", {"content": "n"}, format="json"))
    ok(owner.post(f"/api/v1/users/{person}/notes/daily/", {"content": "d"}, format="json"))
    ok(owner.post("/api/v1/facts/", {"user_id": PERSON, "content": "f"}, format="json"))
    ok(owner.get(f"/api/v1/users/{person}/"))
    ok(owner.get(f"/api/v1/users/{person}/export/"))
    ok(owner.get("/api/v1/messages/search/", {"q": "hello", "user_id": PERSON}))
    ok(owner.delete(f"/api/v1/users/{person}/memories/{KEY}/"))
    assert AuditEvent.objects.filter(object_id=f"{PERSON}:{KEY}").exists()
    dry = ok(
        owner.post(
            "/api/v1/purge/", {"scope": "user", "user_id": PERSON, "dry_run": True}, format="json"
        )
    )
    assert dry
    ok(owner.delete(f"/api/v1/users/{person}/"))
    assert AuditEvent.objects.filter(object_id=PERSON, action="erase").exists()
    ok(owner.get(f"/api/v1/users/{person}/"), 404)


def test_purging_a_person_with_the_longest_id(owner):
    ok(owner.post("/api/v1/sessions/", {"user_id": PERSON}, format="json"))

    ok(owner.post("/api/v1/purge/", {"scope": "user", "user_id": PERSON}, format="json"))
    ok(
        owner.post(
            "/api/v1/purge/",
            {"scope": "older_than", "days": 1, "user_id": PERSON},
            format="json",
        ),
        200,
        404,
    )


def test_plans_tasks_and_sub_tasks_with_the_longest_ids(owner):
    plan = {"plan_id": WORK_ID, "user_id": PERSON, "goal_event": "g"}
    ok(owner.post("/api/v1/plans/", plan, format="json"))
    task = {
        "task_id": WORK_ID,
        "plan_id": WORK_ID,
        "event_type": "e",
        "response_event": "r",
        "sub_tasks": [WORK_ID],
    }
    ok(owner.post("/api/v1/task-contexts/", task, format="json"))
    ok(owner.get(f"/api/v1/task-contexts/by-subtask/{WORK_ID}/"))
    ok(owner.patch(f"/api/v1/task-contexts/{WORK_ID}/", {"state": {"a": 1}}, format="json"))
    ok(owner.delete(f"/api/v1/task-contexts/{WORK_ID}/"))
    ok(owner.patch(f"/api/v1/plans/{WORK_ID}/", {"status": "cancelled"}, format="json"))
    ok(owner.delete(f"/api/v1/plans/{WORK_ID}/"))
    assert AuditEvent.objects.filter(object_id=WORK_ID).exists()


def test_a_tenant_wide_memory_with_the_longest_key(owner):
    ok(owner.put(f"/api/v1/memories/{KEY}/", {"content": "x"}, format="json"))
    ok(owner.get(f"/api/v1/memories/{KEY}/versions/"))
    ok(owner.delete(f"/api/v1/memories/{KEY}/"))
