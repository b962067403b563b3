"""Search relevance on a small fixed corpus, on whichever database the suite runs on."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from facts_app.selectors.facts import FactFilters, fact_search
from facts_app.services.facts import fact_create
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.core.search import EmptySearchQuery

CORPUS = [
    "User prefers dark mode in every app",
    "User's name is Sachi and she lives in Berlin",
    "Sachi is allergic to peanuts",
    "The user works as a nurse on night shifts",
    "She is learning Rust and likes systems programming",
    "Her favourite colour is green",
    "She has two cats called Miso and Tofu",
    "Meetings should be scheduled after 10am",
]


@pytest.fixture
def corpus(tenant):
    sachi = end_user_get_or_create(tenant=tenant, external_id="whatsapp:+4912345")
    other = end_user_get_or_create(tenant=tenant, external_id="tui:bob")
    for text in CORPUS:
        fact_create(tenant=tenant, end_user=sachi, content=text, tags=["profile"])
    fact_create(tenant=tenant, end_user=other, content="Bob prefers light mode", tags=["ui"])
    return tenant


def top(tenant, query, **filters):
    hits = fact_search(tenant=tenant, query=query, filters=FactFilters(**filters), top_k=3)
    return [hit.fact.content for hit in hits]


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("does the user have a preference for dark mode?", CORPUS[0]),
        ("what is her name?", CORPUS[1]),
        ("any food allergies? peanut", CORPUS[2]),
        ("what does she do for work, which shift", CORPUS[3]),
        ("which programming languages is she learning", CORPUS[4]),
        ("pets? does she have cats", CORPUS[6]),
        ("when can we schedule a meeting", CORPUS[7]),
    ],
)
def test_the_right_fact_ranks_first_for_a_paraphrased_question(corpus, question, expected):
    assert top(corpus, question, user_id="whatsapp:+4912345")[0] == expected


def test_stemming_matches_other_forms_of_a_word(corpus):
    assert top(corpus, "scheduling", user_id="whatsapp:+4912345")[0] == CORPUS[7]
    assert top(corpus, "learned", user_id="whatsapp:+4912345")[0] == CORPUS[4]


def test_terms_are_ored_so_one_matching_word_is_enough(corpus):
    assert top(corpus, "zebra quantum peanuts", user_id="whatsapp:+4912345") == [CORPUS[2]]


def test_search_is_scoped_to_the_person(corpus):
    assert top(corpus, "mode", user_id="tui:bob") == ["Bob prefers light mode"]
    assert set(top(corpus, "mode")) == {CORPUS[0], "Bob prefers light mode"}


def test_the_persons_id_and_tags_are_searchable(corpus):
    assert top(corpus, "bob") == ["Bob prefers light mode"]
    assert top(corpus, "ui") == ["Bob prefers light mode"]


def test_a_query_of_only_stopwords_or_punctuation_is_refused(corpus):
    with pytest.raises(EmptySearchQuery):
        top(corpus, "what is the?")
    with pytest.raises(EmptySearchQuery):
        top(corpus, "!!! ??? ***")


# Text a person might type, including every character FTS5 and tsquery treat as syntax.
query_text = st.text(
    alphabet=st.sampled_from(
        list("abcdefghijklmnopqrstuvwxyz0123456789 \"'*:()&|!^-+~<>@#$%,.;?\\/éß中")
    )
    | st.characters(blacklist_categories=("Cs",)),
    max_size=80,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=query_text)
def test_no_query_text_ever_causes_a_database_error(corpus, query):
    try:
        hits = fact_search(tenant=corpus, query=query, filters=FactFilters(), top_k=5)
    except EmptySearchQuery:
        return
    assert len(hits) <= 5


@pytest.mark.parametrize("embedded", [False, True])
@pytest.mark.parametrize("tenant_wide", [False, True])
@pytest.mark.parametrize("person", [False, True])
def test_the_prebuilt_candidates_statement_reads_what_the_orm_reads(
    corpus, embedded, tenant_wide, person, monkeypatch
):
    """fact_candidates without filters runs a statement built once; with a filter that excludes
    nothing it runs the ORM's: the same rows, in the same order, as the same raw values."""
    import datetime as dt

    from django.utils import timezone

    from facts_app.models import Fact
    from facts_app.selectors import facts as fact_selectors
    from facts_app.selectors.facts import fact_candidates
    from memoryhub.llm.embeddings import get_embedder

    sachi = end_user_get_or_create(tenant=corpus, external_id="whatsapp:+4912345")
    fact_create(tenant=corpus, end_user=None, content="The shop opens at 9", tags=["hours"])
    gone, _ = fact_create(tenant=corpus, end_user=sachi, content="Lives in Paris", tags=[])
    Fact.objects.filter(pk=gone.pk).update(valid_until=timezone.now() - dt.timedelta(days=1))
    embedder = get_embedder() if embedded else None
    if embedded and embedder is None:
        pytest.skip("no embedder configured")
    monkeypatch.setattr(fact_selectors, "get_embedder", lambda: embedder)
    owner = {"end_user_id": sachi.pk if person else None, "tenant_wide": tenant_wide}
    ever = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)

    prebuilt = fact_candidates(tenant=corpus, filters=FactFilters(), **owner)
    orm = fact_candidates(tenant=corpus, filters=FactFilters(created_after=ever), **owner)

    assert prebuilt == orm
    assert prebuilt  # every combination finds something in this corpus
    assert "Lives in Paris" not in [candidate.content for candidate in prebuilt]


def test_the_hits_statement_reads_what_in_bulk_reads(corpus):
    """A search's hits are read by id with a statement of their own (_facts_by_id): the same
    facts, every field the same value and type, as `for_tenant().in_bulk()`; a person-bound
    tenant and no ids keep the ORM's way."""
    from facts_app.models import Fact
    from facts_app.selectors.facts import _facts_by_id
    from sessions_app.services import session_create_or_get

    sachi = end_user_get_or_create(tenant=corpus, external_id="whatsapp:+4912345")
    session, _ = session_create_or_get(tenant=corpus, agent_id="bench")
    fact, _ = fact_create(
        tenant=corpus,
        end_user=sachi,
        content="Owns a bike",
        tags=["hobby", "é"],
        metadata={"k": [1, {"x": None}]},
        source_session_id=session.pk,
        source_message_ids=[3, 4],
    )
    ids = [*Fact.objects.filter(tenant=corpus).values_list("pk", flat=True)[:5], fact.pk]
    ours = _facts_by_id(tenant=corpus, ids=ids)
    orm = Fact.objects.for_tenant(corpus).in_bulk(ids)
    assert set(ours) == set(orm) == set(ids)
    for pk, expected in orm.items():
        for field in Fact._meta.concrete_fields:
            value, want = getattr(ours[pk], field.attname), getattr(expected, field.attname)
            assert (value, type(value)) == (want, type(want)), field.name
        assert not ours[pk]._state.adding
        assert ours[pk]._state.db == expected._state.db
    assert _facts_by_id(tenant=corpus, ids=[]) == {}
