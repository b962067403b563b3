"""`PUT /sessions/{id}/summary/` honours the memory policy like every other write: with memory
off for the session's agent it is accepted and nothing is stored (seed 004: memory off never
errors), as a message append or a state write is."""

from __future__ import annotations

import pytest

from memoryhub.accounts.models import MemoryPolicy
from sessions_app import summaries
from sessions_app.models import Session, Summary


def summary_url(session: Session) -> str:
    return f"/api/v1/sessions/{session.id}/summary/"


@pytest.fixture
def off_for_chat(tenant):
    return MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", memory_enabled=False)


def test_a_summary_put_with_memory_off_is_accepted_and_not_stored(api, session, off_for_chat):
    before = Session.objects.filter(pk=session.pk).values().get()

    response = api.put(summary_url(session), {"text": "They talked about dogs."}, format="json")

    assert response.status_code == 202, response.content
    # The same answer as a message append or a state write with memory off.
    assert response.json() == {
        "stored": False,
        "reason": "memory_off",
        "detail": "Memory is off for this agent in the tenant's memory policy; nothing was stored.",
    }
    assert not Summary.objects.exists()
    assert Session.objects.filter(pk=session.pk).values().get() == before
    assert api.get(summary_url(session)).status_code == 404


def test_the_service_writes_nothing_with_memory_off(tenant, session, off_for_chat):
    assert summaries.summary_set(tenant=tenant, session_id=session.pk, text="x") is None
    assert not Summary.objects.exists()


def test_memory_on_for_another_agent_still_stores(api, session, tenant):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="other-bot", memory_enabled=False)

    response = api.put(summary_url(session), {"text": "Kept."}, format="json")

    assert response.status_code == 200, response.content
    assert Summary.objects.get().text == "Kept."


def test_bad_input_is_still_a_400_and_an_outsider_a_404(api, outsider_api, session, off_for_chat):
    assert api.put(summary_url(session), {"text": 5}, format="json").status_code == 400
    response = outsider_api.put(summary_url(session), {"text": "x"}, format="json")
    assert response.status_code == 404
