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
