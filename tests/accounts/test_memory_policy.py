from memoryhub.accounts.models import MemoryPolicy
from memoryhub.accounts.selectors import memory_policy_for


def test_without_a_policy_the_seed_defaults_apply(tenant):
    policy = memory_policy_for(tenant=tenant, agent_id="chat")

    assert policy.pk is None
    assert (
        policy.context_max_tokens,
        policy.context_max_messages,
        policy.context_max_memories,
    ) == (
        4000,
        20,
        50,
    )


def test_an_agent_override_wins_over_the_tenant_policy(tenant, other_tenant):
    MemoryPolicy.objects.create(tenant=tenant, context_max_tokens=3000)
    MemoryPolicy.objects.create(tenant=tenant, agent_id="planner", context_max_tokens=8000)
    MemoryPolicy.objects.create(tenant=other_tenant, agent_id="chat", context_max_tokens=500)

    assert memory_policy_for(tenant=tenant, agent_id="planner").context_max_tokens == 8000
    assert memory_policy_for(tenant=tenant, agent_id="chat").context_max_tokens == 3000
    assert memory_policy_for(tenant=tenant).context_max_tokens == 3000


def test_an_edit_is_seen_at_once_by_this_process(tenant):
    assert memory_policy_for(tenant=tenant).summary_threshold_tokens == 8000  # cached now
    policy = MemoryPolicy.objects.create(tenant=tenant, summary_threshold_tokens=500)
    assert memory_policy_for(tenant=tenant).summary_threshold_tokens == 500

    policy.memory_enabled = False
    policy.save()
    assert memory_policy_for(tenant=tenant).memory_enabled is False

    policy.delete()
    assert memory_policy_for(tenant=tenant).memory_enabled is True


def test_the_defaults_follow_the_settings(tenant, settings, limits):
    settings.SUMMARY_THRESHOLD_TOKENS = 1234
    settings.SUMMARY_KEEP_RECENT = 4
    limits["STATE_CAP"] = 7

    policy = memory_policy_for(tenant=tenant, agent_id="chat")

    assert (policy.summary_threshold_tokens, policy.summary_keep_recent, policy.state_cap) == (
        1234,
        4,
        7,
    )
    assert (policy.memory_enabled, policy.extraction_enabled) == (True, True)


def test_staff_edit_a_policy_in_the_admin(admin_client, tenant):
    response = admin_client.post(
        "/admin/accounts/memorypolicy/add/",
        {
            "tenant": tenant.pk,
            "agent_id": "support",
            "memory_enabled": "",  # unchecked
            "summary_threshold_tokens": 2000,
            "summary_keep_recent": 6,
            "extraction_enabled": "on",
            "state_cap": 50,
            "context_max_tokens": 3000,
            "context_max_messages": 12,
            "context_max_memories": 20,
        },
    )

    assert response.status_code == 302, response.content
    policy = memory_policy_for(tenant=tenant, agent_id="support")
    assert (policy.memory_enabled, policy.summary_threshold_tokens, policy.state_cap) == (
        False,
        2000,
        50,
    )


def test_the_admin_refuses_out_of_range_numbers(admin_client, tenant):
    response = admin_client.post(
        "/admin/accounts/memorypolicy/add/",
        {
            "tenant": tenant.pk,
            "agent_id": "",
            "summary_threshold_tokens": 0,
            "summary_keep_recent": 10,
            "state_cap": 0,
            "context_max_tokens": 100,
            "context_max_messages": 20,
            "context_max_memories": 50,
        },
    )

    assert response.status_code == 200  # the form again, with errors
    assert MemoryPolicy.objects.count() == 0
