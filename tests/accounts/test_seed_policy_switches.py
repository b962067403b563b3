"""Seed 001's switches (enable_user_memories, enable_summarization,
include_summary_on_truncation) and seed 000's transcript cap in the memory policy: their
defaults, the policy page and the admin, and each switch honoured where it applies."""

from __future__ import annotations

import pytest

from facts_app.models import UserMemory
from facts_app.services.memories import memory_save
from memoryhub.accounts.models import MemoryPolicy
from memoryhub.accounts.selectors import memory_policy_for
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.context.session_context import session_context_for_tenant
from sessions_app import summaries
from sessions_app.models import Session
from sessions_app.services import MessageInput, message_append_batch
from sessions_app.summaries import summary_set
from tests.helpers import client_for

USER = "whatsapp:+4912345"  # the `session` fixture's person


def test_the_seed_defaults(tenant):
    policy = memory_policy_for(tenant=tenant, agent_id="any")

    assert (
        policy.enable_user_memories,
        policy.enable_summarization,
        policy.include_summary_on_truncation,
        policy.transcript_max_messages,
        policy.transcript_cap,
    ) == (True, True, True, None, None)


POLICY_FORM = {
    "memory_enabled": "on",
    "extraction_enabled": "on",
    "summary_threshold_tokens": "8000",
    "summary_keep_recent": "10",
    "state_cap": "200",
    "context_max_tokens": "4000",
    "context_max_messages": "20",
    "context_max_memories": "50",
    "retention_days": "90",
    "daily_note_retention_days": "30",
    "task_retention_days": "30",
}


class TestThePolicyPage:
    def test_the_new_fields_are_on_the_page_with_the_seed_cap_suggested(self, editor):
        page = editor.get("/tenant/policy/").content.decode()

        for name in (
            "enable_user_memories",
            "enable_summarization",
            "include_summary_on_truncation",
            "transcript_max_messages",
        ):
            assert f'name="{name}"' in page
        assert 'placeholder="500"' in page

    def test_saving_them(self, editor, tenant):
        response = editor.post(
            "/tenant/policy/",
            {**POLICY_FORM, "transcript_max_messages": "500", "enable_summarization": "on"},
        )

        assert response.status_code == 302, response.content
        policy = MemoryPolicy.objects.get(tenant=tenant, agent_id="")
        assert (
            policy.transcript_cap,
            policy.enable_summarization,
            policy.enable_user_memories,
            policy.include_summary_on_truncation,
        ) == (500, True, False, False)

    def test_an_agent_override_carries_them(self, editor, tenant):
        response = editor.post(
            "/tenant/policy/agents/new/",
            {**POLICY_FORM, "agent_id": "bot", "transcript_max_messages": "50"},
        )

        assert response.status_code == 302, response.content
        override = memory_policy_for(tenant=tenant, agent_id="bot")
        assert (override.transcript_cap, override.enable_user_memories) == (50, False)
        page = editor.get("/tenant/policy/").content.decode()
        assert "<td>50</td>" in page

    def test_a_negative_cap_is_refused_at_its_field(self, editor, tenant):
        response = editor.post("/tenant/policy/", {**POLICY_FORM, "transcript_max_messages": "-1"})

        assert response.status_code == 400  # the form again, with the error at its field
        assert "transcript_max_messages" in response.context["form"].errors
        assert not MemoryPolicy.objects.filter(tenant=tenant).exists()


def test_the_admin_edits_them(admin_client, tenant):
    response = admin_client.post(
        "/admin/accounts/memorypolicy/add/",
        {
            "tenant": tenant.pk,
            "agent_id": "",
            "memory_enabled": "on",
            "summary_threshold_tokens": 8000,
            "summary_keep_recent": 10,
            "state_cap": 200,
            "transcript_max_messages": 500,
            "enable_summarization": "",
            "enable_user_memories": "on",
            "include_summary_on_truncation": "on",
            "context_max_tokens": 4000,
            "context_max_messages": 20,
            "context_max_memories": 50,
        },
    )

    assert response.status_code == 302, response.content
    policy = memory_policy_for(tenant=tenant)
    assert (policy.transcript_cap, policy.enable_summarization) == (500, False)


class TestUserMemoriesSwitch:
    @pytest.fixture
    def off(self, tenant):
        return MemoryPolicy.objects.create(tenant=tenant, enable_user_memories=False)

    def test_a_write_is_accepted_and_not_stored(self, api, tenant, off):
        response = api.put(
            "/api/v1/users/newcomer/memories/name/", {"content": "Sachi"}, format="json"
        )

        assert response.status_code == 202
        assert response.json()["reason"] == "user_memories_off"
        assert not UserMemory.objects.filter(tenant=tenant).exists()

    def test_tenant_wide_memories_are_still_stored(self, tenant, make_key, off):
        admin = client_for(make_key(tenant, scopes=["read", "write", "global-memory"])[1])

        response = admin.put("/api/v1/memories/house_rule/", {"content": "Brief"}, format="json")

        assert response.status_code == 201
        assert UserMemory.objects.filter(tenant=tenant, end_user=None).count() == 1

    def test_bad_input_is_still_a_400(self, api, off):
        response = api.put("/api/v1/users/u1/memories/Bad-Key/", {"content": "x"}, format="json")

        assert response.status_code == 400

    def test_the_context_leaves_personal_memories_out(self, tenant, session):
        person = end_user_get_or_create(tenant=tenant, external_id=USER)
        memory_save(tenant=tenant, end_user=person, key="name", content="Sachi")
        memory_save(tenant=tenant, end_user=None, key="house_rule", content="Be brief")

        before = session_context_for_tenant(tenant=tenant, session_id=session.pk)
        MemoryPolicy.objects.create(tenant=tenant, agent_id="chat", enable_user_memories=False)
        after = session_context_for_tenant(tenant=tenant, session_id=session.pk)

        assert sorted(m.key for m in before.context.memories) == ["house_rule", "name"]
        assert [m.key for m in after.context.memories] == ["house_rule"]


def chat_over(session: Session, *, count: int, tokens: int = 10) -> None:
    message_append_batch(
        tenant=session.tenant,
        session_id=session.pk,
        messages=[
            MessageInput(role="user", content=f"message {i}", token_count=tokens)
            for i in range(count)
        ],
    )


class TestSummarizationSwitch:
    def test_off_no_summary_is_due_or_swept_or_written(self, tenant, session):
        MemoryPolicy.objects.create(
            tenant=tenant,
            agent_id="chat",
            enable_summarization=False,
            summary_threshold_tokens=50,
            summary_keep_recent=2,
        )

        chat_over(session, count=20)

        session.refresh_from_db()
        assert session.summary_requested_at is None
        assert summaries.summaries_sweep() == 0
        assert summaries.session_summarize(session_id=session.pk, force=True) is None

    def test_on_the_same_history_is_due(self, tenant, session):
        MemoryPolicy.objects.create(
            tenant=tenant, agent_id="chat", summary_threshold_tokens=50, summary_keep_recent=2
        )

        chat_over(session, count=20)

        session.refresh_from_db()
        assert session.summary_requested_at is not None


class TestSummaryOnTruncation:
    def test_the_summary_goes_only_where_the_switch_allows(self, tenant, session):
        chat_over(session, count=10)
        summary_set(tenant=tenant, session_id=session.pk, text="They talked at length.")
        chat_over(session, count=5)

        on = session_context_for_tenant(tenant=tenant, session_id=session.pk, max_messages=3)
        MemoryPolicy.objects.create(
            tenant=tenant, agent_id="chat", include_summary_on_truncation=False
        )
        off = session_context_for_tenant(tenant=tenant, session_id=session.pk, max_messages=3)

        assert on.context.summary is not None
        assert off.context.summary is None
        assert len(off.context.messages) == 3
