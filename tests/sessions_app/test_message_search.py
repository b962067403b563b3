import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from rest_framework.exceptions import ValidationError

from sessions_app import services
from sessions_app.api.views import MessageSearchQuerySerializer, message_search_query_validated
from sessions_app.services import MessageInput
from tests.helpers import error_fields, search_query_strings

SEARCH = "/api/v1/messages/search/"


@pytest.fixture
def conversations(tenant):
    first, _ = services.session_create_or_get(tenant=tenant, user_id="sachi")
    second, _ = services.session_create_or_get(tenant=tenant, user_id="sachi")
    bobs, _ = services.session_create_or_get(tenant=tenant, user_id="bob")
    services.message_append_batch(
        tenant=tenant,
        session_id=first.pk,
        messages=[
            MessageInput(role="user", content="Can you recommend a hiking trail near Munich?"),
            MessageInput(role="assistant", content="Try the Herzogstand ridge walk."),
        ],
    )
    services.message_append_batch(
        tenant=tenant,
        session_id=second.pk,
        messages=[
            MessageInput(role="user", content="What should I cook tonight?"),
            MessageInput(role="assistant", content="A mushroom risotto."),
        ],
    )
    services.message_append_batch(
        tenant=tenant,
        session_id=bobs.pk,
        messages=[MessageInput(role="user", content="I hiked all day")],
    )
    return {"first": first, "second": second, "bobs": bobs}


def test_it_finds_when_we_talked_about_something_across_sessions(api, conversations):
    hits = api.get(SEARCH, {"q": "when did we talk about hiking?", "user_id": "sachi"}).json()[
        "results"
    ]

    assert hits[0]["message"]["session_id"] == str(conversations["first"].pk)
    assert hits[0]["message"]["seq"] == 1
    assert all(hit["message"]["session_id"] != str(conversations["bobs"].pk) for hit in hits)


def test_it_narrows_to_a_session_and_a_role(api, conversations):
    hits = api.get(
        SEARCH,
        {"q": "risotto cook", "session_id": str(conversations["second"].pk), "role": "assistant"},
    ).json()["results"]

    assert [hit["message"]["content"] for hit in hits] == ["A mushroom risotto."]


def test_bad_input_is_a_clear_400(api, conversations):
    assert "q" in error_fields(api.get(SEARCH, {"q": "?!"}))
    assert "top_k" in error_fields(api.get(SEARCH, {"q": "x", "top_k": 500}))
    assert "session_id" in error_fields(api.get(SEARCH, {"q": "x", "session_id": "nope"}))


def test_an_outsider_finds_nothing_and_gets_404_for_our_ids(outsider_api, conversations):
    assert outsider_api.get(SEARCH, {"q": "hiking"}).json()["results"] == []
    assert outsider_api.get(SEARCH, {"q": "hiking", "user_id": "sachi"}).status_code == 404
    session_id = str(conversations["first"].pk)
    assert outsider_api.get(SEARCH, {"q": "hiking", "session_id": session_id}).status_code == 404


# --- the query string read without the serializer (the usual search's) -----------------------


@hypothesis_settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params=search_query_strings(person="sachi", others=("role", "speaker")))
def test_the_query_string_reads_as_the_serializer_reads_it(params):
    """The same values, or the same 400, with or without the plain reading."""
    serializer = MessageSearchQuerySerializer(data=params)
    if serializer.is_valid():
        assert message_search_query_validated(params) == dict(serializer.validated_data)
    else:
        with pytest.raises(ValidationError) as refused:
            message_search_query_validated(params)
        assert refused.value.detail == serializer.errors


@pytest.mark.parametrize(
    "params",
    [
        {"q": "green tea", "user_id": "sachi"},
        {"q": "  green tea ", "user_id": " sachi ", "top_k": "010", "mode": "lexical"},
        {"q": "tea", "mode": "hybrid"},
        {"q": "tea", "user_id": "sachi", "mode": "semantic", "top_k": "100"},
    ],
)
def test_the_usual_query_strings_skip_the_serializer(params, monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("the serializer was built")

    monkeypatch.setattr(MessageSearchQuerySerializer, "__init__", refused)

    validated = message_search_query_validated(params)

    assert validated["q"] == params["q"].strip()


def test_a_search_by_the_plain_reading_answers_as_before(api, conversations):
    plain = api.get(SEARCH, {"q": " hiking ", "user_id": "sachi", "top_k": "1", "mode": "lexical"})
    # speaker sends the same search through the serializer.
    full = api.get(
        SEARCH,
        {"q": " hiking ", "user_id": "sachi", "top_k": "1", "mode": "lexical", "speaker": "user"},
    )

    assert plain.status_code == full.status_code == 200
    assert [hit["message"]["content"] for hit in plain.json()["results"]] == [
        "Can you recommend a hiking trail near Munich?"
    ]
    assert plain.json()["results"][0]["message"] == full.json()["results"][0]["message"]
