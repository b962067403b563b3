import pytest

from facts_app.models import Fact
from memoryhub.accounts.models import AuditAction, AuditEvent
from tests.helpers import client_for, error_code, error_fields

USER = "whatsapp:+4912345"
FACTS = "/api/v1/facts/"
SEARCH = "/api/v1/facts/search/"


def post(api, content, user=USER, **fields):
    return api.post(FACTS, {"content": content, "user_id": user, **fields}, format="json")


def test_the_done_when_scenario_save_then_find_by_a_question(api):
    post(api, "User prefers dark mode", tags=["ui"])
    post(api, "User lives in Berlin")

    hits = api.get(SEARCH, {"q": "does the user have a preference for dark mode?", "user_id": USER})

    assert hits.status_code == 200
    assert hits.json()["results"][0]["fact"]["content"] == "User prefers dark mode"


def test_posting_the_same_text_again_returns_the_existing_fact(api):
    first = post(api, "User prefers dark mode")
    again = post(api, "  user prefers DARK mode. ")

    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert Fact.objects.count() == 1


def test_the_same_text_for_another_person_is_another_fact(api):
    post(api, "Likes tea")
    post(api, "Likes tea", user="tui:bob")

    assert Fact.objects.count() == 2


def test_a_superseding_fact_hides_the_old_one_from_search_unless_asked(api):
    old = post(api, "Works as a nurse").json()
    new = post(api, "Works as a doctor now", supersedes=old["id"]).json()

    default = api.get(SEARCH, {"q": "works", "user_id": USER}).json()["results"]
    everything = api.get(
        SEARCH, {"q": "works", "user_id": USER, "include_superseded": "true"}
    ).json()["results"]

    assert [hit["fact"]["id"] for hit in default] == [new["id"]]
    assert {hit["fact"]["id"] for hit in everything} == {old["id"], new["id"]}
    assert api.get(f"{FACTS}{old['id']}/").json()["superseded_by"] == new["id"]


def test_valid_at_finds_what_was_true_at_that_moment(api):
    old = post(api, "Works as a nurse").json()
    new = post(api, "Works as a doctor now", supersedes=old["id"]).json()
    corrected_at = api.get(f"{FACTS}{old['id']}/").json()["valid_until"]
    before = old["created_at"]

    then = api.get(SEARCH, {"q": "works", "user_id": USER, "valid_at": before}).json()["results"]
    now = api.get(SEARCH, {"q": "works", "user_id": USER, "valid_at": corrected_at}).json()[
        "results"
    ]

    assert [hit["fact"]["id"] for hit in then] == [old["id"]]
    assert [hit["fact"]["id"] for hit in now] == [new["id"]]


def test_search_filters_by_tag_metadata_and_dates(api):
    post(api, "Prefers trains over planes", tags=["travel", "prefs"], metadata={"source": "chat"})
    post(api, "Prefers window seats", tags=["travel"], metadata={"source": "import"})

    by_tags = api.get(SEARCH, {"q": "prefers", "tag": ["travel", "prefs"]}).json()["results"]
    by_meta = api.get(SEARCH, {"q": "prefers", "metadata": "source=import"}).json()["results"]
    future = api.get(SEARCH, {"q": "prefers", "created_after": "2999-01-01T00:00:00Z"}).json()

    assert [hit["fact"]["content"] for hit in by_tags] == ["Prefers trains over planes"]
    assert [hit["fact"]["content"] for hit in by_meta] == ["Prefers window seats"]
    assert future["results"] == []


def test_patch_and_delete_a_fact(api, tenant):
    fact = post(api, "Has one cat").json()

    patched = api.patch(
        f"{FACTS}{fact['id']}/", {"content": "Has two cats", "tags": ["pets"]}, format="json"
    )
    found = api.get(SEARCH, {"q": "pets"}).json()["results"]
    deleted = api.delete(f"{FACTS}{fact['id']}/")

    assert patched.json()["content"] == "Has two cats"
    assert found[0]["fact"]["id"] == fact["id"]
    assert deleted.status_code == 204
    assert not Fact.objects.exists()
    assert AuditEvent.objects.filter(
        tenant=tenant, action=AuditAction.DELETE, object_type="fact"
    ).exists()


def test_tenant_wide_facts_need_the_global_memory_scope(api, tenant, make_key):
    _, secret = make_key(tenant, scopes=["read", "write", "global-memory"])

    assert api.post(FACTS, {"content": "Office closes at 6"}, format="json").status_code == 403
    assert (
        client_for(secret).post(FACTS, {"content": "Office closes at 6"}, format="json").status_code
        == 201
    )


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"q": ""}, "q"),
        ({"q": "!!! ???"}, "q"),
        ({"q": "the and of"}, "q"),
        ({"q": "x", "top_k": 0}, "top_k"),
        ({"q": "x", "top_k": 101}, "top_k"),
        ({"q": "x", "created_after": "last tuesday"}, "created_after"),
        ({"q": "x", "metadata": "no-equals-sign"}, "metadata"),
    ],
)
def test_bad_search_input_is_a_clear_400(api, params, field):
    response = api.get(SEARCH, params)

    assert response.status_code == 400
    assert field in error_fields(response)


def test_searching_an_unknown_person_is_a_404(api):
    assert api.get(SEARCH, {"q": "anything", "user_id": "nobody"}).status_code == 404


@pytest.mark.parametrize(
    ("payload", "field", "code"),
    [
        ({"content": ""}, "content", "blank"),
        ({"content": "x", "tags": ["t" * 65]}, "tags", "max_length"),
        ({"content": "x", "tags": [f"t{i}" for i in range(33)]}, "tags", "max_length"),
        ({"content": "x", "metadata": {"k": "v" * 20000}}, "metadata", "too_large"),
        ({"content": "x" * 9000}, "content", "too_large"),
        ({"content": "x", "supersedes": 999999}, None, None),
    ],
)
def test_bad_fact_input_is_refused(api, payload, field, code):
    response = api.post(FACTS, {"user_id": USER, **payload}, format="json")

    if field is None:
        assert response.status_code == 404
    else:
        assert response.status_code == 400
        detail = error_fields(response)[field]
        codes = [
            item["code"] for item in (detail if isinstance(detail, list) else detail.get("0", []))
        ]
        assert code in codes or error_code(response) == "validation_error"
    assert not Fact.objects.exists()


class TestOutsider:
    @pytest.fixture
    def fact(self, api):
        return post(api, "Secret fact about peanuts").json()

    def test_get_patch_delete_are_404(self, outsider_api, fact):
        url = f"{FACTS}{fact['id']}/"
        assert outsider_api.get(url).status_code == 404
        assert outsider_api.patch(url, {"content": "x"}, format="json").status_code == 404
        assert outsider_api.delete(url).status_code == 404
        assert Fact.objects.get(pk=fact["id"]).content == "Secret fact about peanuts"

    def test_list_and_search_never_show_another_tenants_facts(self, outsider_api, fact):
        assert outsider_api.get(FACTS).json()["results"] == []
        assert outsider_api.get(SEARCH, {"q": "peanuts"}).json()["results"] == []
        assert outsider_api.get(SEARCH, {"q": "peanuts", "user_id": USER}).status_code == 404

    def test_superseding_another_tenants_fact_is_a_404(self, outsider_api, fact):
        response = outsider_api.post(
            FACTS, {"content": "x", "user_id": "u", "supersedes": fact["id"]}, format="json"
        )

        assert response.status_code == 404


def test_the_fact_list_uses_a_fixed_number_of_queries(api, django_assert_max_num_queries):
    for i in range(15):
        post(api, f"Fact number {i}")
    api.get(FACTS)

    with django_assert_max_num_queries(2):
        response = api.get(FACTS)
    assert len(response.json()["results"]) == 15


def test_a_person_search_reads_their_facts_by_id_in_a_fixed_number_of_queries(api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for i in range(15):
        post(api, f"Likes fruit number {i}", tags=["food"])
    api.get(SEARCH, {"q": "fruit", "user_id": USER})  # warms the person's index and the caches

    with CaptureQueriesContext(connection) as queries:
        response = api.get(SEARCH, {"q": "fruit", "user_id": USER, "top_k": 12})

    assert len(response.json()["results"]) == 12
    # (The API key's own lookup, if its cache misses, is authentication's business.)
    statements = [
        query["sql"] for query in queries.captured_queries if "accounts_apikey" not in query["sql"]
    ]
    # The person (for the 404) and their facts in one statement, then the hits by their id.
    assert sum('JOIN "accounts_enduser"' in sql for sql in statements) == 0
    assert len(statements) == 2, statements
    assert '"accounts_enduser"' in statements[0]
    assert '"facts_app_fact"' in statements[0]


def test_the_fast_fact_output_matches_the_documented_serializer(api, tenant):
    import datetime as dt
    import uuid

    from facts_app.api.facts import FactOutputSerializer, fact_data

    old = post(api, "Works as a nurse", tags=["job"], metadata={"k": [1, 2]}).json()
    post(api, "Works as a doctor now", supersedes=old["id"])
    Fact.objects.filter(pk=old["id"]).update(
        external_id="ext-1",
        source_session_id=uuid.uuid4(),
        source_message_ids=[3, 4],
        valid_until=dt.datetime(2030, 1, 2, 1, 4, 5, 6, tzinfo=dt.UTC),
    )
    tenant_wide = Fact.objects.create(tenant=tenant, content="Shop opens at 9", content_hash="x")

    facts = list(Fact.objects.select_related("end_user"))
    assert len(facts) == 3
    for fact in facts:
        assert fact_data(fact) == dict(FactOutputSerializer(fact).data)
    assert fact_data(Fact.objects.get(pk=old["id"]))["valid_until"] == "2030-01-02T01:04:05.000006Z"
    assert fact_data(tenant_wide)["user_id"] is None
