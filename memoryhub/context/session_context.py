"""The context of a session's next model call: the one code path behind the API's
`GET /sessions/{id}/context/` and the session page's preview."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from django.utils import timezone

from memoryhub.accounts.models import MemoryPolicy, Tenant
from memoryhub.accounts.redaction import recall_redactor
from memoryhub.accounts.selectors import memory_policy_for, relevant_history_anywhere
from memoryhub.context import AssembledContext, Budget, ContextInputs, assemble_context
from memoryhub.context.gather import context_inputs_for_session
from memoryhub.context.redacted import inputs_redacted
from memoryhub.core.tokens import count_tokens_cached
from memoryhub.llm.embeddings import embed_query_ahead
from sessions_app import selectors


@dataclass(frozen=True)
class SessionContext:
    context: AssembledContext
    budget: Budget
    memory_enabled: bool


def session_context_for_tenant(
    *,
    tenant: Tenant,
    session_id: str | uuid.UUID,
    max_tokens: int | None = None,
    max_messages: int | None = None,
    max_memories: int | None = None,
    max_facts: int | None = None,
    facts_max_tokens: int | None = None,
    query: str = "",
) -> SessionContext:
    """Assemble the context; a budget left out comes from the agent's memory policy (the facts'
    from Budget: the policy has no say in them yet, and no share of their own by default).
    ResourceNotFound for another tenant's session. With the agent's memory off the context is
    empty, not an error (seed 004)."""
    if query and relevant_history_anywhere(tenant_id=tenant.pk):
        # The relevant history's query vector, the longest wait of a context call, started
        # before the session is read (the gather would start it after): its person and agent
        # are not known yet, so for a session without either the vector is only cached.
        embed_query_ahead(query)
    # The session and its current summary in one query (the gather needs both).
    found = selectors.session_get_for_context(tenant=tenant, session_id=session_id)
    policy = memory_policy_for(tenant=tenant, agent_id=found.agent_id)
    budget = Budget(
        max_tokens=policy.context_max_tokens if max_tokens is None else max_tokens,
        max_messages=policy.context_max_messages if max_messages is None else max_messages,
        max_memories=policy.context_max_memories if max_memories is None else max_memories,
        max_facts=Budget.max_facts if max_facts is None else max_facts,
        facts_max_tokens=facts_max_tokens,
        # Recall off is no share: the gather then asks nothing and the section is not reported.
        max_history_tokens=policy.context_history_tokens if policy.recall_enabled else 0,
    )
    today = timezone.now().date()
    inputs = (
        _switches_applied(
            inputs=context_inputs_for_session(
                tenant=tenant, found=found, budget=budget, query=query, today=today
            ),
            policy=policy,
        )
        if policy.memory_enabled
        else ContextInputs(today=today)
    )
    redact = recall_redactor(tenant_id=tenant.pk, agent_id=found.agent_id)
    if redact is not None:
        inputs = inputs_redacted(inputs=inputs, redact=redact)
    return SessionContext(
        context=assemble_context(inputs=inputs, budget=budget, count_tokens=count_tokens_cached),
        budget=budget,
        memory_enabled=policy.memory_enabled,
    )


def _switches_applied(*, inputs: ContextInputs, policy: MemoryPolicy) -> ContextInputs:
    """Seed 001's switches: no personal memories with enable_user_memories off, and no summary
    (which the assembler only uses when history was cut) with include_summary_on_truncation
    off."""
    if not policy.enable_user_memories:
        inputs = replace(inputs, user_memories=(), user_memory_keys_cut=())
    if not policy.include_summary_on_truncation:
        inputs = replace(inputs, summary=None)
    return inputs
