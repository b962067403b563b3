"""What the memory policy changes on the request path and in the workers: memory off (accepted,
nothing stored, nothing errors — seed 004), per-tenant/agent summary threshold and keep-recent,
and the state cap."""

from __future__ import annotations

import pytest

from memoryhub.accounts.models import MemoryPolicy
from sessions_app import summaries
from sessions_app.models import Message, Session, StateEntry, Summary
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get


def messages_url(session: Session) -> str:
    return f"/api/v1/sessions/{session.id}/messages/"


def state_url(session: Session, key: str) -> str:
    return f"/api/v1/sessions/{session.id}/state/{key}/"


def fill(session: Session, count: int, *, tokens: int = 10) -> None:
    message_append_batch(
        tenant=session.tenant,
        session_id=session.pk,
        messages=[
            MessageInput(
                role="user" if i % 2 == 0 else "assistant", content=f"m{i}", token_count=tokens
            )
            for i in range(count)
        ],
    )


class TestMemoryOff:
    @pytest.fixture
    def off_for_chat(self, tenant):
        return MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", memory_enabled=False)

    def test_appends_are_accepted_and_not_stored(self, api, session, off_for_chat):
        before = Session.objects.filter(pk=session.pk).values().get()

        one = api.post(messages_url(session), {"role": "user", "content": "hi"}, format="json")
        batch = api.post(
            messages_url(session),
            {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
            format="json",
        )

        for response in (one, batch):
            assert response.status_code == 202, response.content
            assert response.json()["stored"] is False
            assert response.json()["reason"] == "memory_off"
        assert Message.objects.count() == 0
        after = Session.objects.filter(pk=session.pk).values().get()
        assert {k: v for k, v in after.items() if k != "updated_at"} == {
            k: v for k, v in before.items() if k != "updated_at"
        }

    def test_a_retried_append_with_an_idempotency_key_is_accepted_again(
        self, api, session, off_for_chat
    ):
        for _ in range(2):
            response = api.post(
                messages_url(session),
                {"role": "user", "content": "hi"},
                format="json",
                HTTP_IDEMPOTENCY_KEY="turn-1",
            )
            assert response.status_code == 202
        assert Message.objects.count() == 0

    def test_state_writes_are_accepted_and_not_stored(self, api, session, off_for_chat):
        response = api.put(state_url(session, "mood"), {"value": "happy"}, format="json")

        assert response.status_code == 202
        assert StateEntry.objects.count() == 0

    def test_bad_input_is_still_a_400_and_an_outsider_still_a_404(
        self, api, outsider_api, session, off_for_chat
    ):
        assert api.post(messages_url(session), {"role": "robot"}, format="json").status_code == 400
        response = outsider_api.post(
            messages_url(session), {"role": "user", "content": "hi"}, format="json"
        )
        assert response.status_code == 404

    def test_another_agent_of_the_tenant_keeps_its_memory(self, api, tenant, off_for_chat):
        other, _ = session_create_or_get(tenant=tenant, user_id="u2", agent_id="planner")

        response = api.post(messages_url(other), {"role": "user", "content": "hi"}, format="json")

        assert response.status_code == 201

    def test_an_agent_override_turns_it_back_on_under_a_tenant_off_switch(
        self, api, tenant, session
    ):
        MemoryPolicy.objects.create(tenant=tenant, memory_enabled=False)
        MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", memory_enabled=True)
        planner, _ = session_create_or_get(tenant=tenant, user_id="u2", agent_id="planner")

        kept = api.post(messages_url(session), {"role": "user", "content": "hi"}, format="json")
        dropped = api.post(messages_url(planner), {"role": "user", "content": "hi"}, format="json")

        assert (kept.status_code, dropped.status_code) == (201, 202)

    def test_nothing_is_summarized_for_a_session_whose_memory_went_off(
        self, session, tenant, settings
    ):
        settings.SUMMARY_THRESHOLD_TOKENS = 100
        fill(session, 30)
        MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", memory_enabled=False)

        assert summaries.session_summarize(session_id=session.pk, force=True) is None
        assert Summary.objects.count() == 0
        Session.objects.filter(pk=session.pk).update(summary_requested_at=None)
        assert summaries.summaries_sweep() == 0


class TestSummarySettings:
    def test_the_threshold_and_keep_recent_come_from_the_agents_policy(
        self, session, tenant, django_capture_on_commit_callbacks
    ):
        MemoryPolicy.objects.create(tenant=tenant, summary_threshold_tokens=100_000)
        MemoryPolicy.objects.create(
            tenant=tenant, agent_id="chat", summary_threshold_tokens=100, summary_keep_recent=4
        )

        with django_capture_on_commit_callbacks(execute=True):
            fill(session, 11)  # 110 tokens: over the agent's threshold, far under the tenant's

        summary = Summary.objects.get(session=session)
        assert summary.through_seq == 11 - 4

    def test_the_tenant_threshold_applies_to_agents_without_an_override(
        self, tenant, django_capture_on_commit_callbacks
    ):
        MemoryPolicy.objects.create(tenant=tenant, summary_threshold_tokens=100)
        planner, _ = session_create_or_get(tenant=tenant, user_id="u2", agent_id="planner")

        with django_capture_on_commit_callbacks(execute=True):
            fill(planner, 11)

        assert Summary.objects.filter(session=planner).exists()

    def test_the_sweep_holds_each_session_to_its_own_threshold(
        self, tenant, monkeypatch, django_capture_on_commit_callbacks
    ):
        MemoryPolicy.objects.create(tenant=tenant, agent_id="low", summary_threshold_tokens=100)
        MemoryPolicy.objects.create(tenant=tenant, agent_id="high", summary_threshold_tokens=1000)
        low, _ = session_create_or_get(tenant=tenant, user_id="u1", agent_id="low")
        high, _ = session_create_or_get(tenant=tenant, user_id="u2", agent_id="high")
        for each in (low, high):
            fill(each, 30)  # 300 tokens
        Session.objects.update(summary_requested_at=None)
        enqueued: list[str] = []
        monkeypatch.setattr(
            summaries, "summary_enqueue", lambda *, session_id: enqueued.append(str(session_id))
        )

        with django_capture_on_commit_callbacks(execute=True):
            assert summaries.summaries_sweep() == 1

        assert enqueued == [str(low.pk)]


def test_the_state_cap_comes_from_the_policy(api, session, tenant):
    MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", state_cap=2)

    for key in ("a", "b", "c"):
        response = api.put(state_url(session, key), {"value": key}, format="json")
        assert response.status_code == 201

    assert response.json()["evicted"] == ["a"]
    listing = api.get(f"/api/v1/sessions/{session.id}/state/").json()
    assert (listing["cap"], [entry["key"] for entry in listing["results"]]) == (2, ["b", "c"])


def test_the_context_is_empty_and_says_so_when_memory_is_off(api, session, tenant):
    fill(session, 4)
    MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", memory_enabled=False)

    response = api.get(f"/api/v1/sessions/{session.id}/context/")

    assert response.status_code == 200
    body = response.json()
    assert body["memory_enabled"] is False
    assert all(not section["included"] for section in body["sections"])
    assert "m0" not in body["content"]
