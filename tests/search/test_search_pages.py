"""The search page (/search/): one box across a tenant's facts and messages, with the API's
filters, links to the person and the message, htmx partials, and escaped content."""

from __future__ import annotations

import datetime as dt
from urllib.parse import quote

import pytest
from django.utils import timezone

from facts_app.models import Fact
from facts_app.services.facts import fact_create
from memoryhub.accounts.services import end_user_get_or_create
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get

URL = "/search/"
SCRIPT = "<script>alert(1)</script>"
ESCAPED = b"&lt;script&gt;alert(1)&lt;/script&gt;"


def chat(tenant, *, user: str, lines: list[tuple[str, str]], agent: str = "chat"):
    session, _ = session_create_or_get(tenant=tenant, user_id=user, agent_id=agent)
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[MessageInput(role=role, content=content) for role, content in lines],
    )
    return session


def fact(tenant, *, user: str | None, content: str, **more) -> Fact:
    end_user = end_user_get_or_create(tenant=tenant, external_id=user) if user else None
    created, _ = fact_create(tenant=tenant, end_user=end_user, content=content, **more)
    return created


@pytest.fixture
def corpus(tenant, other_tenant):
    ana = chat(
        tenant,
        user="whatsapp:+49 ana",
        lines=[("user", "I love hiking in the Alps"), ("assistant", "Hiking sounds great")],
    )
    bo = chat(tenant, user="tui:bo", lines=[("user", "Any hiking tips for winter?")])
    chat(other_tenant, user="spy", lines=[("user", "secret hiking plans of the outsider")])
    fact(tenant, user="whatsapp:+49 ana", content="Ana loves hiking", tags=["hobby"])
    fact(tenant, user="tui:bo", content="Bo goes hiking in winter", metadata={"source": "chat"})
    fact(other_tenant, user="spy", content="The outsider hikes too, hiking")
    return {"ana": ana, "bo": bo}


def test_a_visitor_is_sent_to_log_in(client, db):
    response = client.get(URL + "?q=hiking")

    assert response.status_code == 302
    assert response.url.startswith("/login/?next=/search/")


def test_the_empty_page_shows_the_box_to_editors_and_viewers(editor, viewer):
    for who in (editor, viewer):
        response = who.get(URL)
        assert response.status_code == 200
        html = response.content.decode()
        assert 'id="search-form"' in html
        assert 'id="search-empty"' in html
        assert 'id="fact-results"' not in html
        current = [link["label"] for link in response.context["navigation"] if link["current"]]
        assert current == ["Search"]


def test_one_box_finds_the_tenants_facts_and_messages_and_links_them(editor, corpus):
    response = editor.get(URL, {"q": "hiking"})

    assert response.status_code == 200
    facts = response.context["fact_hits"]
    messages = response.context["message_hits"]
    assert {hit.fact.content for hit in facts} == {"Ana loves hiking", "Bo goes hiking in winter"}
    assert {hit.message.content for hit in messages} == {
        "I love hiking in the Alps",
        "Hiking sounds great",
        "Any hiking tips for winter?",
    }
    html = response.content.decode()
    assert "outsider" not in html
    ana = corpus["ana"]
    assert f'href="/sessions/{ana.pk}/#seq-1"' in html
    assert f'href="/people/{quote("whatsapp:+49 ana", safe="")}/"' in html
    assert html.count('data-testid="fact-hit"') == 2
    assert html.count('data-testid="message-hit"') == 3


def test_the_scope_narrows_to_one_kind(editor, corpus):
    facts_only = editor.get(URL, {"q": "hiking", "scope": "facts"}).context
    messages_only = editor.get(URL, {"q": "hiking", "scope": "messages"}).context

    assert facts_only["message_hits"] is None
    assert len(facts_only["fact_hits"]) == 2
    assert messages_only["fact_hits"] is None
    assert len(messages_only["message_hits"]) == 3


def test_message_filters_person_session_and_role(editor, corpus):
    by_person = editor.get(URL, {"q": "hiking", "user_id": "tui:bo"}).context
    by_session = editor.get(URL, {"q": "hiking", "session_id": str(corpus["ana"].pk)}).context
    by_role = editor.get(URL, {"q": "hiking", "role": "assistant"}).context

    assert [hit.message.content for hit in by_person["message_hits"]] == [
        "Any hiking tips for winter?"
    ]
    assert [hit.fact.content for hit in by_person["fact_hits"]] == ["Bo goes hiking in winter"]
    assert {hit.message.session_id for hit in by_session["message_hits"]} == {corpus["ana"].pk}
    assert [hit.message.content for hit in by_role["message_hits"]] == ["Hiking sounds great"]


def test_fact_filters_tags_metadata_dates_and_superseded(editor, tenant, corpus):
    old = Fact.objects.get(content="Ana loves hiking")
    newer = fact(tenant, user="whatsapp:+49 ana", content="Ana now prefers hiking by bike")
    Fact.objects.filter(pk=old.pk).update(
        superseded_by=newer,
        valid_until=timezone.now(),
        created_at=timezone.now() - dt.timedelta(days=10),
    )

    def contents(**params):
        hits = editor.get(URL, {"q": "hiking", "scope": "facts", **params}).context["fact_hits"]
        return sorted(hit.fact.content for hit in hits)

    assert contents() == ["Ana now prefers hiking by bike", "Bo goes hiking in winter"]
    assert "Ana loves hiking" in contents(include_superseded="on")
    assert contents(include_superseded="on", tags="hobby") == ["Ana loves hiking"]
    assert contents(metadata="source=chat") == ["Bo goes hiking in winter"]
    today = timezone.localdate()
    assert contents(include_superseded="on", created_before=str(today - dt.timedelta(days=5))) == [
        "Ana loves hiking"
    ]
    assert "Ana loves hiking" not in contents(
        include_superseded="on", created_after=str(today - dt.timedelta(days=5))
    )
    response = editor.get(URL, {"q": "hiking", "include_superseded": "on", "tags": "hobby"})
    assert b"superseded" in response.content


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"q": "hiking", "user_id": "nobody"}, "user_id", "No one with this id"),
        ({"q": "hiking", "session_id": "not-a-uuid"}, "session_id", "valid UUID"),
        ({"q": "the and of"}, "q", "no searchable words"),
        ({"q": "hiking", "top_k": "101"}, "top_k", "less than or equal to 100"),
        ({"q": "hiking", "metadata": "no equals sign"}, "metadata", "key=value"),
        (
            {"q": "hiking", "created_after": "2024-02-02", "created_before": "2024-01-01"},
            "created_before",
            "Must not be before",
        ),
    ],
)
def test_bad_filters_are_shown_at_their_field(editor, corpus, params, field, message):
    response = editor.get(URL, params)

    assert response.status_code == 200
    assert message in " ".join(response.context["form"].errors[field])
    assert message.encode() in response.content
    assert not response.context["searched"]


def test_another_tenants_session_or_person_is_an_error_not_a_peek(editor, other_tenant, corpus):
    theirs = chat(other_tenant, user="spy2", lines=[("user", "hiking")])

    by_session = editor.get(URL, {"q": "hiking", "session_id": str(theirs.pk)})
    by_person = editor.get(URL, {"q": "hiking", "user_id": "spy"})

    assert "No such session" in by_session.context["form"].errors["session_id"][0]
    assert "No one with this id" in by_person.context["form"].errors["user_id"][0]
    assert b"outsider" not in by_session.content + by_person.content


def test_content_is_escaped(editor, tenant):
    chat(tenant, user="tui:x", lines=[("user", f"hiking {SCRIPT}")])
    fact(tenant, user="tui:x", content=f"hiking fact {SCRIPT}", tags=[SCRIPT])

    response = editor.get(URL, {"q": "hiking"})

    assert len(response.context["fact_hits"]) == 1
    assert ESCAPED in response.content
    assert SCRIPT.encode() not in response.content


def test_an_htmx_request_gets_the_panel_only_and_more_asks_for_more(editor, tenant):
    chat(tenant, user="tui:many", lines=[("user", f"hiking day {n}") for n in range(12)])

    response = editor.get(URL, {"q": "hiking", "scope": "messages"}, HTTP_HX_REQUEST="true")

    html = response.content.decode()
    assert html.lstrip().startswith('<div id="search-panel"')
    assert "<html" not in html
    assert len(response.context["message_hits"]) == 10
    assert 'id="search-more"' in html
    assert "top_k=25" in html
    more = editor.get(URL, {"q": "hiking", "scope": "messages", "top_k": "25"})
    assert len(more.context["message_hits"]) == 12
    assert b'id="search-more"' not in more.content


def test_the_search_makes_a_constant_number_of_queries(
    editor, tenant, django_assert_max_num_queries
):
    for n in range(3):
        chat(tenant, user=f"tui:{n}", lines=[("user", f"hiking {n}")])
        fact(tenant, user=f"tui:{n}", content=f"hiking fact {n}")
    with django_assert_max_num_queries(14) as few:
        editor.get(URL, {"q": "hiking", "top_k": "50"})
    for n in range(3, 30):
        chat(tenant, user=f"tui:{n}", lines=[("user", f"hiking {n}")])
        fact(tenant, user=f"tui:{n}", content=f"hiking fact {n}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        response = editor.get(URL, {"q": "hiking", "top_k": "50"})
    assert len(response.context["message_hits"]) == 30
