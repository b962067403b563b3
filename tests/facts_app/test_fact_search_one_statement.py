"""The API's search of one person's facts: the person, their pk and their current facts read in
one statement (fact_search_result_for_person), and its plain query strings read without the
serializer. Both must answer exactly what the lookup-then-search and the serializer answer."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given, settings

from facts_app.api.facts import FactSearchQuerySerializer, _plain_search_query
from facts_app.models import Fact
from facts_app.selectors.facts import (
    FactFilters,
    fact_search_result,
    fact_search_result_for_person,
)
from facts_app.services.facts import fact_create
from memoryhub.accounts.models import END_USER_ID_MAX_LENGTH, EndUser
from memoryhub.accounts.selectors import end_user_get_for_tenant
from memoryhub.accounts.services import end_user_get_or_create
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.search import EmptySearchQuery
from tests.helpers import error_code, search_query_strings

SEARCH = "/api/v1/facts/search/"
ANA = "whatsapp:+4912345"


@pytest.fixture
def people(tenant, other_tenant):
    ana = end_user_get_or_create(tenant=tenant, external_id=ANA)
    bob = end_user_get_or_create(tenant=tenant, external_id="tui:bob")
    end_user_get_or_create(tenant=tenant, external_id="tui:nobody-knows")
    for text, tags in [
        ("Ana prefers dark mode in every app", ["ui"]),
        ("Ana is allergic to peanuts", ["health", "important"]),
        ("Ana drinks green tea every morning", ["food"]),
        ("Ana works night shifts as a nurse", []),
        ("Ana's cat likes green peas", ["pets"]),
    ]:
        fact_create(tenant=tenant, end_user=ana, content=text, tags=tags)
    old, _ = fact_create(tenant=tenant, end_user=ana, content="Ana lives in Paris, green city")
    Fact.objects.filter(pk=old.pk).update(valid_until=timezone.now() - dt.timedelta(days=1))
    fact_create(tenant=tenant, end_user=bob, content="Bob drinks green tea too")
    fact_create(tenant=tenant, end_user=None, content="The shop sells green tea")
    other = end_user_get_or_create(tenant=other_tenant, external_id=ANA)
    fact_create(tenant=other_tenant, end_user=other, content="Another Ana drinks green tea")
    return tenant


def as_compared(found):
    return (
        found.mode,
        [
            (
                hit.score,
                hit.lexical_score,
                hit.dense_score,
                hit.signals,
                hit.fact.end_user.external_id,
                {field.attname: getattr(hit.fact, field.attname) for field in Fact._meta.fields},
            )
            for hit in found.hits
        ],
    )


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize(
    "query", ["green tea", "is she allergic to peanuts?", "dark mode nurse", "paris", "xylophone"]
)
@pytest.mark.parametrize("top_k", [1, 3, 10])
def test_the_one_statement_finds_what_the_lookup_and_then_the_search_find(
    people, mode, query, top_k
):
    one = fact_search_result_for_person(
        tenant=people, query=query, filters=FactFilters(user_id=ANA), top_k=top_k, mode=mode
    )
    end_user = end_user_get_for_tenant(tenant=people, external_id=ANA)
    two = fact_search_result(
        tenant=people,
        query=query,
        filters=FactFilters(user_id=ANA),
        top_k=top_k,
        mode=mode,
        end_user=end_user,
    )

    assert as_compared(one) == as_compared(two)
    assert all(hit.fact.end_user_id == end_user.pk for hit in one.hits)


def test_the_hits_come_with_their_person(people):
    found = fact_search_result_for_person(
        tenant=people, query="green tea", filters=FactFilters(user_id=ANA)
    )

    assert [hit.fact.content for hit in found.hits][:1] == ["Ana drinks green tea every morning"]
    person = found.hits[0].fact.end_user
    assert (person.pk, person.tenant_id, person.external_id) == (
        EndUser.objects.get(tenant=people, external_id=ANA).pk,
        people.pk,
        ANA,
    )
    # Only those fields came with the search: any other is read on access, never made up.
    assert person.display_name == ""


@pytest.mark.parametrize(
    "user_id", ["nobody", "x" * (END_USER_ID_MAX_LENGTH + 1), "a\x00b", "whatsapp:+49123"]
)
@pytest.mark.parametrize(
    ("query", "filters"),
    [
        ("green tea", {}),  # the one statement
        ("green tea", {"tags": ("food",)}),  # the lookup, then the ORM's candidates
        ("зелёный чай", {}),  # a query the engine cannot read: the lookup, then the database
        ("the", {}),  # no searchable word: still the 404 first, as before
    ],
)
def test_an_unknown_person_is_not_found_whichever_way_the_search_goes(
    people, user_id, query, filters
):
    with pytest.raises(ResourceNotFound):
        fact_search_result_for_person(
            tenant=people, query=query, filters=FactFilters(user_id=user_id, **filters)
        )


def test_a_person_of_the_same_id_in_another_tenant_finds_only_their_own(people, other_tenant):
    found = fact_search_result_for_person(
        tenant=other_tenant, query="green tea", filters=FactFilters(user_id=ANA)
    )

    assert [hit.fact.content for hit in found.hits] == ["Another Ana drinks green tea"]


def test_a_known_person_without_current_facts_finds_nothing_not_a_404(people):
    found = fact_search_result_for_person(
        tenant=people, query="green tea", filters=FactFilters(user_id="tui:nobody-knows")
    )

    assert found.hits == []


def test_a_query_without_searchable_words_is_refused_for_a_known_person(people):
    with pytest.raises(EmptySearchQuery):
        fact_search_result_for_person(
            tenant=people, query="the", filters=FactFilters(user_id=ANA), mode="semantic"
        )


def test_one_statement_reads_the_person_and_their_facts_and_one_the_hits(people, monkeypatch):
    from facts_app.selectors import facts as fact_selectors

    # No embedder: the index reads no vectors, so the statements are the search's alone.
    monkeypatch.setattr(fact_selectors, "get_embedder", lambda: None)
    monkeypatch.setattr("facts_app.recall.get_embedder", lambda: None)
    with CaptureQueriesContext(connection) as found:
        hits = fact_search_result_for_person(
            tenant=people, query="green tea", filters=FactFilters(user_id=ANA)
        ).hits
    statements = [query["sql"] for query in found.captured_queries]

    assert hits
    assert len(statements) == 2, statements
    assert "accounts_enduser" in statements[0]
    assert "facts_app_fact" in statements[0]
    assert "accounts_enduser" not in statements[1]

    with CaptureQueriesContext(connection) as found:
        fact_search_result_for_person(
            tenant=people, query="xylophone", filters=FactFilters(user_id=ANA)
        )

    assert len(found.captured_queries) == 1  # no hit, nothing to fetch

    with CaptureQueriesContext(connection) as found, pytest.raises(ResourceNotFound):
        fact_search_result_for_person(
            tenant=people, query="green tea", filters=FactFilters(user_id="nobody")
        )

    assert len(found.captured_queries) == 1


def test_the_times_read_are_the_orms_to_the_tzinfo(people):
    """The candidates and hits statements read times with psycopg's compiled loader on
    PostgreSQL: the same aware datetimes, with the same tzinfo, as the ORM's reads."""
    found = fact_search_result_for_person(
        tenant=people, query="green tea", filters=FactFilters(user_id=ANA)
    )
    assert found.hits
    for hit in found.hits:
        orm = Fact.objects.get(pk=hit.fact.pk)
        for name in ("created_at", "updated_at"):
            ours, theirs = getattr(hit.fact, name), getattr(orm, name)
            assert ours == theirs
            assert ours.tzinfo == theirs.tzinfo
            assert ours.utcoffset() == theirs.utcoffset()


class TestApi:
    def test_an_unknown_person_is_a_404(self, people, api):
        response = api.get(SEARCH, {"q": "green tea", "user_id": "nobody"})

        assert response.status_code == 404
        assert error_code(response) == "not_found"

    def test_a_person_of_another_tenant_is_a_404(self, people, outsider_api):
        response = outsider_api.get(SEARCH, {"q": "green tea", "user_id": "tui:bob"})

        assert response.status_code == 404

    def test_a_known_person_finds_their_facts(self, people, api):
        response = api.get(SEARCH, {"q": "green tea", "user_id": ANA, "top_k": "2"})

        assert response.status_code == 200
        body = response.json()
        assert body["mode"] in ("hybrid", "lexical")
        assert [hit["fact"]["content"] for hit in body["results"]][:1] == [
            "Ana drinks green tea every morning"
        ]
        assert len(body["results"]) == 2
        assert {hit["fact"]["user_id"] for hit in body["results"]} == {ANA}

    @pytest.mark.parametrize(
        "params",
        [
            {"q": "   ", "user_id": ANA},
            {"q": "tea", "user_id": ""},
            {"q": "tea", "user_id": ANA, "top_k": "0"},
            {"q": "tea", "user_id": ANA, "top_k": "101"},
            {"q": "tea", "user_id": ANA, "mode": "fuzzy"},
            {"q": "tea", "mode": "semantic"},
            {"q": "x" * 1001, "user_id": ANA},
        ],
    )
    def test_what_the_serializer_refuses_is_still_a_400(self, people, api, params):
        response = api.get(SEARCH, params)

        assert response.status_code == 400


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params=search_query_strings(person=ANA, others=("tag", "valid_at")))
def test_a_plain_query_string_reads_as_the_serializer_reads_it(params):
    """Whatever the plain reading takes, the serializer takes too, with the same values; what
    it does not take goes to the serializer."""
    plain = _plain_search_query(params)
    if plain is None:
        return
    serializer = FactSearchQuerySerializer(data=params)
    assert serializer.is_valid(), serializer.errors
    data = serializer.validated_data
    assert plain == (data["q"], data["top_k"], data["mode"], serializer.to_filters())


@pytest.mark.parametrize(
    "params",
    [
        {"q": "green tea", "user_id": ANA},
        {"q": "  green tea ", "user_id": f" {ANA} ", "top_k": "010", "mode": "lexical"},
        {"q": "tea", "mode": "hybrid"},
        {"q": "tea", "user_id": ANA, "mode": "semantic", "top_k": "100"},
    ],
)
def test_the_usual_query_strings_take_the_plain_reading(params):
    assert _plain_search_query(params) is not None
