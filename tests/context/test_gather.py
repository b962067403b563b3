"""The context's gathering reads with hand-written SQL (for speed); these tests hold it to what
the ORM selectors it stands in for return, on both databases."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.utils import timezone

from facts_app.recall import candidates_rank
from facts_app.selectors import facts as facts_selectors
from facts_app.selectors.facts import FactFilters, FactHit, fact_candidates, fact_search
from facts_app.selectors.memories import memory_list
from facts_app.selectors.notes import note_recall
from facts_app.services.facts import fact_create
from facts_app.services.memories import memory_save
from facts_app.services.notes import note_clear, note_daily_append, note_long_term_save
from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.context import (
    Budget,
    ContextInputs,
    FactItem,
    MemoryItem,
    MessageItem,
    NoteItem,
    SummaryItem,
)
from memoryhub.context.gather import RECENT_NOTE_DAYS, context_inputs_for_session
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.search import EmptySearchQuery
from memoryhub.core.tokens import count_tokens, count_tokens_cached
from sessions_app import services
from sessions_app.models import MessageRole, Session, Summary
from sessions_app.selectors import (
    message_page_for_tenant,
    session_get_for_context,
    session_get_for_tenant,
    summary_current,
)
from sessions_app.services import MessageInput

USER = "whatsapp:+4912345"
TODAY = timezone.now().date()


def reference_inputs(
    *, tenant: Tenant, session: Session, budget: Budget, query: str, today: dt.date
) -> ContextInputs:
    """The gathering as it was written with the ORM selectors, one query per read."""
    page = message_page_for_tenant(tenant=tenant, session_id=session.pk, last=budget.max_messages)
    messages = [
        MessageItem(
            seq=m.seq,
            role=m.role,
            content=m.content,
            name=m.name,
            tool_call_id=m.tool_call_id,
            tool_calls=m.tool_calls,
            token_count=m.token_count,
        )
        for m in page.messages
    ]
    current = summary_current(tenant_id=tenant.pk, session_id=session.pk) if page.messages else None
    summary = SummaryItem(text=current.text, through_seq=current.through_seq) if current else None
    every_tenant_memory = list(memory_list(tenant=tenant, end_user=None))
    tenant_memories = [
        MemoryItem(key=m.key, content=m.content, pinned=m.pinned, tenant_wide=True)
        for m in every_tenant_memory[: budget.max_memories]
    ]
    tenant_cut = [m.key for m in every_tenant_memory[budget.max_memories :]]
    end_user = session.end_user
    search_text = query or next(
        (m.content for m in reversed(page.messages) if m.role == MessageRole.USER), ""
    )
    facts: list[FactItem] = []
    if search_text and budget.max_facts > 0:
        try:
            hits = (
                fact_search(
                    tenant=tenant,
                    query=search_text,
                    filters=FactFilters(user_id=end_user.external_id),
                    top_k=budget.max_facts,
                )
                if end_user is not None
                else []
            )
            tenant_wide = tenant_wide_fact_search(
                tenant=tenant, query=search_text, top_k=budget.max_facts
            )
        except EmptySearchQuery:
            hits, tenant_wide = [], []
        facts = [FactItem(id=h.fact.pk, content=h.fact.content, score=h.score) for h in hits]
        facts += [
            FactItem(id=f.id, content=f.content, score=f.score, tenant_wide=True)
            for f in tenant_wide
        ]
    if end_user is None:
        return ContextInputs(
            today=today,
            tenant_memories=tenant_memories,
            tenant_memory_keys_cut=tenant_cut,
            facts=facts,
            summary=summary,
            messages=messages,
            earlier_messages_exist=page.has_more,
        )
    every_user_memory = list(memory_list(tenant=tenant, end_user=end_user))
    user_memories = [
        MemoryItem(key=m.key, content=m.content, pinned=m.pinned)
        for m in every_user_memory[: budget.max_memories]
    ]
    recall = note_recall(tenant=tenant, end_user=end_user, today=today, days=RECENT_NOTE_DAYS + 1)
    daily = [NoteItem(day=n.day, content=n.content) for n in recall.daily]
    long_term = recall.long_term
    return ContextInputs(
        today=today,
        tenant_memories=tenant_memories,
        user_memories=user_memories,
        tenant_memory_keys_cut=tenant_cut,
        user_memory_keys_cut=[m.key for m in every_user_memory[budget.max_memories :]],
        facts=facts,
        long_term_note=(
            NoteItem(day=None, content=long_term.content)
            if long_term is not None and long_term.content
            else None
        ),
        today_note=next((n for n in daily if n.day and n.day >= today), None),
        recent_notes=[n for n in daily if n.day and n.day < today],
        summary=summary,
        messages=messages,
        earlier_messages_exist=page.has_more,
    )


def tenant_wide_fact_search(*, tenant: Tenant, query: str, top_k: int) -> list[FactHit]:
    """The tenant-wide facts (of no person) ranked as a person's are: the tenant's current facts
    as the ORM filters them, those of no person kept, by the hybrid ranking."""
    candidates = fact_candidates(tenant=tenant, filters=FactFilters())
    assert candidates is not None
    mine = [candidate for candidate in candidates if candidate.end_user_id is None]
    if not mine:
        return []
    found = candidates_rank(
        tenant_id=tenant.pk, filters_key=("reference",), candidates=mine, query=query, top_k=top_k
    )
    return [
        FactHit(id=r.candidate.id, content=r.candidate.content, score=r.hit.score)
        for r in found.hits
    ]


def gathered(*, tenant: Tenant, session: Session, budget: Budget, query: str = "") -> None:
    found = session_get_for_context(tenant=tenant, session_id=str(session.pk))
    assert found.agent_id == session.agent_id
    assert found.end_user_id == session.end_user_id
    fast = context_inputs_for_session(
        tenant=tenant, found=found, budget=budget, query=query, today=TODAY
    )
    reference = reference_inputs(
        tenant=tenant,
        session=session_get_for_tenant(tenant=tenant, session_id=session.pk),
        budget=budget,
        query=query,
        today=TODAY,
    )
    # Scores are floats from the same SQL expression; compare them loosely, the rest exactly.
    assert [f.score for f in fast.facts] == pytest.approx([f.score for f in reference.facts])
    fast_facts = [(f.id, f.content, f.tenant_wide) for f in fast.facts]
    assert fast_facts == [(f.id, f.content, f.tenant_wide) for f in reference.facts]
    assert list(fast.messages) == list(reference.messages)
    for name in (
        "tenant_memories",
        "user_memories",
        "tenant_memory_keys_cut",
        "user_memory_keys_cut",
        "long_term_note",
        "today_note",
        "recent_notes",
        "summary",
        "earlier_messages_exist",
    ):
        fast_value, reference_value = getattr(fast, name), getattr(reference, name)
        if isinstance(fast_value, list | tuple):
            fast_value, reference_value = list(fast_value), list(reference_value)
        assert fast_value == reference_value, name


@pytest.fixture
def person(tenant):
    return end_user_get_or_create(tenant=tenant, external_id=USER)


@pytest.fixture
def rich_session(tenant, other_tenant, person):
    session, _ = services.session_create_or_get(tenant=tenant, user_id=USER, agent_id="chat")
    someone_else = end_user_get_or_create(tenant=tenant, external_id="tui:other")
    past = timezone.now() - dt.timedelta(hours=1)
    later = timezone.now() + dt.timedelta(days=1)
    for key, content, pinned, expires in [
        ("zeta", "Likes jazz", True, None),
        ("alpha", "Vegetarian", False, None),
        ("beta", "Works nights", False, later),
        ("gone", "Expired one", False, past),
        ("name", "Her name is Sachi\nsecond line", True, None),
    ]:
        memory_save(
            tenant=tenant,
            end_user=person,
            key=key,
            content=content,
            pinned=pinned,
            expires_at=expires,
        )
    for key, content, pinned in [("rules", "Answer in English", False), ("tone", "Be kind", True)]:
        memory_save(tenant=tenant, end_user=None, key=key, content=content, pinned=pinned)
    memory_save(tenant=tenant, end_user=someone_else, key="private", content="Not hers")
    other = end_user_get_or_create(tenant=other_tenant, external_id=USER)
    memory_save(tenant=other_tenant, end_user=other, key="foreign", content="Other tenant")
    memory_save(tenant=other_tenant, end_user=None, key="foreign_rule", content="Other tenant")

    old, _ = fact_create(tenant=tenant, end_user=person, content="Sachi is allergic to peanuts")
    fact_create(
        tenant=tenant, end_user=person, content="Sachi now eats peanuts again", supersedes=old
    )
    fact_create(tenant=tenant, end_user=person, content="Sachi prefers peanut-free snacks")
    fact_create(
        tenant=tenant,
        end_user=person,
        content="Sachi had peanut soup once",
        valid_until=past,
    )
    fact_create(tenant=tenant, end_user=someone_else, content="Bob loves peanuts")
    # Tenant-wide (no person): sclaw's facts with an empty source, a bot's house rules.
    fact_create(tenant=tenant, end_user=None, content="The kitchen never serves peanuts")
    fact_create(tenant=tenant, end_user=None, content="Snacks are served at four")
    fact_create(
        tenant=tenant, end_user=None, content="Peanut-free snacks on request", valid_until=past
    )
    fact_create(tenant=other_tenant, end_user=other, content="Foreign peanuts")

    note_long_term_save(tenant=tenant, end_user=person, content="An old version")
    note_long_term_save(tenant=tenant, end_user=person, content="Lives in Kyoto.\nHas a cat.")
    for days_ago, texts in {
        -1: ["Tomorrow's plan"],
        0: ["Morning run", "Lunch with Bob"],
        2: ["Dentist"],
        7: ["A week ago"],
        8: ["Too old to recall"],
    }.items():
        for text in texts:
            note_daily_append(
                tenant=tenant,
                end_user=person,
                content=text,
                day=TODAY - dt.timedelta(days=days_ago),
            )
    note_daily_append(tenant=tenant, end_user=someone_else, content="Not hers", day=TODAY)

    for turn in range(30):
        services.message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content=f"Turn {turn}: is there peanut in it?"),
                MessageInput(
                    role="assistant",
                    content="",
                    tool_calls=[
                        {"id": f"call_{turn}", "type": "function", "function": {"name": "look"}}
                    ],
                ),
                MessageInput(role="tool", content='{"peanut": false}', tool_call_id=f"call_{turn}"),
                MessageInput(role="assistant", content="No peanuts.", name="chef"),
            ],
        )
    for through in (40, 80):
        Summary.objects.create(
            tenant=tenant, session=session, text=f"Up to {through}", through_seq=through
        )
    return session


@pytest.mark.parametrize(
    "budget",
    [
        Budget(),
        Budget(max_messages=5, max_memories=2, max_facts=1),
        Budget(max_messages=0, max_memories=0, max_facts=0),
    ],
)
def test_the_gathered_inputs_are_what_the_orm_selectors_return(tenant, rich_session, budget):
    gathered(tenant=tenant, session=rich_session, budget=budget)
    gathered(tenant=tenant, session=rich_session, budget=budget, query="peanut snacks")


def test_a_cleared_long_term_note_is_left_out(tenant, person, rich_session):
    note_long_term_save(tenant=tenant, end_user=person, content="")

    gathered(tenant=tenant, session=rich_session, budget=Budget())
    found = session_get_for_context(tenant=tenant, session_id=rich_session.pk)
    inputs = context_inputs_for_session(
        tenant=tenant, found=found, budget=Budget(), query="", today=TODAY
    )
    assert inputs.long_term_note is None
    # A note dated tomorrow reads as today's; the window is the last 7 days.
    assert inputs.today_note == NoteItem(
        day=TODAY + dt.timedelta(days=1), content="Tomorrow's plan"
    )
    assert [note.day for note in inputs.recent_notes] == [
        TODAY - dt.timedelta(days=2),
        TODAY - dt.timedelta(days=7),
    ]


def test_cleared_days_are_left_out_and_each_day_shows_its_current_version(
    tenant, person, rich_session
):
    # Every note cleared (an empty current version over the old texts), then two days written
    # again: only their new texts are recalled, the other days stay out.
    note_clear(tenant=tenant, end_user=person)
    for days_ago, text in [(0, "After the clear"), (2, "Dentist moved")]:
        note_daily_append(
            tenant=tenant, end_user=person, content=text, day=TODAY - dt.timedelta(days=days_ago)
        )

    gathered(tenant=tenant, session=rich_session, budget=Budget())
    found = session_get_for_context(tenant=tenant, session_id=rich_session.pk)
    inputs = context_inputs_for_session(
        tenant=tenant, found=found, budget=Budget(), query="", today=TODAY
    )
    assert inputs.long_term_note is None
    assert inputs.today_note == NoteItem(day=TODAY, content="After the clear")
    assert inputs.recent_notes == [
        NoteItem(day=TODAY - dt.timedelta(days=2), content="Dentist moved")
    ]


def test_an_empty_session_and_one_without_a_person(tenant, rich_session):
    empty, _ = services.session_create_or_get(tenant=tenant, user_id=USER, agent_id="other")
    Summary.objects.create(tenant=tenant, session=empty, text="Stray", through_seq=3)
    anonymous, _ = services.session_create_or_get(tenant=tenant)
    services.message_append_batch(
        tenant=tenant, session_id=anonymous.pk, messages=[MessageInput(role="user", content="Hi")]
    )

    gathered(tenant=tenant, session=empty, budget=Budget())
    gathered(tenant=tenant, session=anonymous, budget=Budget())


def test_another_tenants_or_a_malformed_session_is_not_found(tenant, other_tenant, rich_session):
    for tenant_, session_id in [
        (other_tenant, rich_session.pk),
        (tenant, uuid.uuid4()),
        (tenant, "not-a-uuid"),
    ]:
        with pytest.raises(ResourceNotFound):
            session_get_for_context(tenant=tenant_, session_id=session_id)


def test_cached_token_counts_are_the_tokenizers():
    long = "peanut butter " * 500  # past CACHED_TEXT_MAX_CHARS: counted, not kept
    for text in ["", "Can I eat peanut butter?", "Can I eat peanut butter?", long, long]:
        assert count_tokens_cached(text) == count_tokens(text)


@pytest.mark.parametrize("ranked_by", ["hybrid", "database"])
def test_tenant_wide_facts_come_after_the_persons(
    tenant, person, rich_session, monkeypatch, ranked_by
):
    if ranked_by == "database":  # too many candidates: each owner's are ranked by the database
        monkeypatch.setattr(facts_selectors, "MAX_CANDIDATES", 1)
    found = session_get_for_context(tenant=tenant, session_id=rich_session.pk)

    inputs = context_inputs_for_session(
        tenant=tenant, found=found, budget=Budget(), query="peanut snacks", today=TODAY
    )

    owners = [fact.tenant_wide for fact in inputs.facts]
    assert owners == sorted(owners)  # the person's (False) first
    assert {f.content for f in inputs.facts if not f.tenant_wide} == {
        "Sachi now eats peanuts again",
        "Sachi prefers peanut-free snacks",
    }
    # Current ones only; another person's never.
    assert {f.content for f in inputs.facts if f.tenant_wide} == {
        "The kitchen never serves peanuts",
        "Snacks are served at four",
    }


def test_a_session_without_a_person_gets_the_tenant_wide_facts(tenant, rich_session):
    anonymous, _ = services.session_create_or_get(tenant=tenant)
    services.message_append_batch(
        tenant=tenant,
        session_id=anonymous.pk,
        messages=[MessageInput(role="user", content="Do you serve peanuts?")],
    )
    found = session_get_for_context(tenant=tenant, session_id=anonymous.pk)

    inputs = context_inputs_for_session(
        tenant=tenant, found=found, budget=Budget(), query="", today=TODAY
    )

    assert inputs.facts[0].content == "The kitchen never serves peanuts"
    assert all(fact.tenant_wide for fact in inputs.facts)
    gathered(tenant=tenant, session=anonymous, budget=Budget(max_memories=1))
