"""Session pages: the list (filters, text search, pagination) and a session's page (transcript,
summaries, state, plans and task contexts, context preview). The purge confirmation's own tests
are in tests/retention/test_purge_pages.py."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from django.test import Client
from django.utils import timezone

from sessions_app.models import (
    Plan,
    Session,
    SubTask,
    Summary,
    TaskContext,
)
from sessions_app.services import (
    MessageInput,
    message_append_batch,
    session_create_or_get,
    state_set,
)

SCRIPT = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
HTMX = {"HTTP_HX_REQUEST": "true"}


def _chat(tenant, user="whatsapp:+4912345", agent="chat", messages=(), **kwargs):
    session, _ = session_create_or_get(tenant=tenant, user_id=user, agent_id=agent, **kwargs)
    if messages:
        message_append_batch(tenant=tenant, session_id=session.pk, messages=list(messages))
    session.refresh_from_db()
    return session


def _say(*texts: str) -> list[MessageInput]:
    roles = ("user", "assistant")
    return [MessageInput(role=roles[i % 2], content=text) for i, text in enumerate(texts)]


def _ids(response) -> list[str]:
    return [str(row.session.pk) for row in response.context["rows"]]


# --- who may see what ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["", "{id}/", "{id}/context/", "{id}/purge/"])
def test_a_visitor_is_sent_to_log_in(client: Client, session, path):
    url = "/sessions/" + path.format(id=session.pk)

    response = client.get(url)

    assert response.status_code == 302
    assert response.url.startswith("/login/?next=")


@pytest.mark.parametrize("path", ["{id}/", "{id}/context/", "{id}/purge/"])
def test_another_tenants_session_is_a_404(editor, other_tenant, path):
    foreign = _chat(other_tenant, messages=_say("hello"))

    assert editor.get("/sessions/" + path.format(id=foreign.pk)).status_code == 404
    assert editor.get("/sessions/" + path.format(id=uuid.uuid4())).status_code == 404


def test_the_list_shows_only_the_tenants_sessions(editor, viewer, tenant, other_tenant):
    mine = _chat(tenant, messages=_say("hi", "hello"))
    _chat(other_tenant, user="theirs", messages=_say("hi"))

    for client in (editor, viewer):
        response = client.get("/sessions/")
        assert response.status_code == 200
        assert _ids(response) == [str(mine.pk)]
    html = response.content.decode()
    assert 'id="session-filters"' in html
    assert 'id="session-list"' in html
    assert 'name="q"' in html
    assert "whatsapp:+4912345" in html
    assert "theirs" not in html


# --- the list's filters and search --------------------------------------------------------------


def test_the_list_filters_by_user_agent_and_dates(editor, tenant):
    ana = _chat(tenant, user="ana", agent="chat")
    bob = _chat(tenant, user="bob", agent="support")
    old = _chat(tenant, user="ana", agent="support")
    Session.objects.filter(pk=old.pk).update(last_active_at=timezone.now() - dt.timedelta(days=10))
    today = timezone.now().date()
    long_ago = (today - dt.timedelta(days=10)).isoformat()

    assert set(_ids(editor.get("/sessions/", {"user_id": "ana"}))) == {str(ana.pk), str(old.pk)}
    assert set(_ids(editor.get("/sessions/", {"agent_id": "support"}))) == {
        str(bob.pk),
        str(old.pk),
    }
    assert _ids(editor.get("/sessions/", {"active_to": long_ago})) == [str(old.pk)]
    assert set(_ids(editor.get("/sessions/", {"active_from": today.isoformat()}))) == {
        str(ana.pk),
        str(bob.pk),
    }
    assert _ids(editor.get("/sessions/", {"user_id": "ana", "agent_id": "support"})) == [
        str(old.pk)
    ]


def test_a_conversation_is_found_by_a_word_in_it(editor, tenant, other_tenant):
    ramen = _chat(tenant, user="ana", messages=_say("hi", "I had the best ramen in Osaka"))
    _chat(tenant, user="bob", messages=_say("the weather is fine"))
    _chat(other_tenant, user="ana", messages=_say("ramen again"))

    response = editor.get("/sessions/", {"q": "ramen"})

    assert _ids(response) == [str(ramen.pk)]
    row = response.context["rows"][0]
    assert row.hit.seq == 2
    assert (row.snippet.match, row.snippet.after) == ("ramen", " in Osaka")
    html = response.content.decode()
    assert "<mark>ramen</mark>" in html
    assert f"/sessions/{ramen.pk}/?around=2#seq-2" in html
    # narrowed by the other filters too
    assert _ids(editor.get("/sessions/", {"q": "ramen", "user_id": "bob"})) == []
    assert _ids(editor.get("/sessions/", {"q": "ramen", "agent_id": "other"})) == []


def test_a_search_without_searchable_words_says_so_inline(editor, tenant):
    _chat(tenant, messages=_say("the"))

    response = editor.get("/sessions/", {"q": "the ?!"})

    assert response.status_code == 200
    assert response.context["form"].errors["q"] == ["The query has no searchable words."]
    assert 'id="errors-q"' in response.content.decode()
    assert "no searchable words" in response.content.decode()


def test_bad_filters_show_inline_errors(editor, tenant):
    _chat(tenant)

    response = editor.get(
        "/sessions/", {"active_from": "2024-05-02", "active_to": "2024-05-01", "user_id": "x"}
    )

    assert response.status_code == 200
    assert "active_to" in response.context["form"].errors
    assert response.context["rows"] == []
    assert "Must be on or after" in response.content.decode()
    response = editor.get("/sessions/", {"active_from": "not a date"})
    assert "Enter a valid date." in response.content.decode()


def test_htmx_gets_the_list_alone_with_the_errors_out_of_band(editor, tenant):
    _chat(tenant)

    response = editor.get("/sessions/", {"active_from": "nope"}, **HTMX)

    html = response.content.decode()
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="session-list"')
    assert '<div id="errors-active_from" class="field-errors" hx-swap-oob="true">' in html
    assert "Enter a valid date." in html


def test_the_list_is_paginated_with_links_that_keep_the_filters(editor, tenant):
    for number in range(55):
        _chat(tenant, user=f"user-{number}", agent="chat")

    first = editor.get("/sessions/", {"agent_id": "chat"})
    second = editor.get("/sessions/", {"agent_id": "chat", "page": 2}, **HTMX)

    assert len(first.context["rows"]) == 50
    assert len(second.context["rows"]) == 5
    assert set(_ids(first)).isdisjoint(_ids(second))
    html = first.content.decode()
    assert 'id="session-pagination"' in html
    assert 'href="?agent_id=chat&amp;page=2"' in html
    assert 'hx-push-url="true"' in html


@pytest.mark.parametrize("params", [{}, {"q": "ramen", "agent_id": "chat"}])
def test_the_list_takes_the_same_queries_for_any_number_of_sessions(
    editor, tenant, django_assert_max_num_queries, params
):
    for number in range(3):
        _chat(tenant, user=f"few-{number}", messages=_say("ramen"))
    with django_assert_max_num_queries(12) as few:
        editor.get("/sessions/", params)
    for number in range(60):
        _chat(tenant, user=f"many-{number}", messages=_say("ramen"))

    with django_assert_max_num_queries(len(few.captured_queries)):
        response = editor.get("/sessions/", params)

    assert len(response.context["rows"]) == 50


def test_the_list_escapes_what_bots_wrote(editor, tenant):
    _chat(tenant, user=SCRIPT, agent=SCRIPT, messages=_say(f"alert {SCRIPT}"))

    for params in ({}, {"q": "alert"}):
        html = editor.get("/sessions/", params).content.decode()
        assert ESCAPED in html
        assert SCRIPT not in html


# --- one session ------------------------------------------------------------------------------


def test_the_transcript_tells_roles_and_tool_calls_apart(editor, viewer, tenant):
    call = [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    ]
    session = _chat(
        tenant,
        messages=[
            MessageInput(role="system", content="Be brief."),
            MessageInput(role="user", content="Weather?"),
            MessageInput(role="assistant", content="", tool_calls=call),
            MessageInput(
                role="tool", content='{"temp": 21}', tool_call_id="call_1", name="weather"
            ),
            MessageInput(role="assistant", content="x" * 2000),
        ],
    )

    for client in (editor, viewer):
        response = client.get(f"/sessions/{session.pk}/")
        assert response.status_code == 200
    html = response.content.decode()
    for seq in range(1, 6):
        assert f'id="seq-{seq}"' in html
    assert 'data-role="system"' in html
    assert "Tool result" in html
    assert "tool_call_id: call_1" in html
    assert "name: weather" in html
    # tool_calls pretty-printed (indented JSON), quotes escaped
    assert "&quot;function&quot;: {\n" in html
    assert 'data-testid="tool-calls"' in html
    # the long message is folded, the short ones are not
    assert html.count('<details class="fold">') == 1
    assert "Show the whole message (2000 characters)" in html


def test_a_long_session_shows_its_last_page_and_loads_earlier_ones(editor, tenant):
    session = _chat(tenant)
    for start in range(0, 250, 100):
        message_append_batch(
            tenant=tenant,
            session_id=session.pk,
            messages=[
                MessageInput(role="user", content=f"m{n}")
                for n in range(start, min(start + 100, 250))
            ],
        )

    latest = editor.get(f"/sessions/{session.pk}/")
    seqs = [item.message.seq for item in latest.context["transcript"].items]
    assert seqs == list(range(151, 251))
    assert 'href="?before=151#transcript"' in latest.content.decode()
    assert 'id="load-later"' not in latest.content.decode()

    earlier = editor.get(
        f"/sessions/{session.pk}/?before=151", HTTP_HX_TARGET="load-earlier", **HTMX
    )
    html = earlier.content.decode()
    assert "<html" not in html
    assert [item.message.seq for item in earlier.context["transcript"].items] == list(
        range(51, 151)
    )
    assert 'hx-get="?before=51"' in html

    around = editor.get(f"/sessions/{session.pk}/?around=20")
    seqs = [item.message.seq for item in around.context["transcript"].items]
    assert seqs == list(range(1, 70))
    assert not around.context["transcript"].has_earlier
    assert 'id="load-later"' in around.content.decode()
    assert 'id="jump-latest"' in around.content.decode()


def test_the_session_page_shows_summaries_state_metadata_plans_and_tasks(editor, tenant):
    session = _chat(tenant, messages=_say("hi", "hello", "bye"), metadata={"channel": "tui"})
    Summary.objects.create(tenant=tenant, session=session, text="old", through_seq=1, model="m1")
    Summary.objects.create(tenant=tenant, session=session, text="newer", through_seq=2, model="m2")
    state_set(tenant=tenant, session_id=session.pk, key="working_memory", value={"step": 2})
    plan = Plan.objects.create(
        tenant=tenant, plan_id="plan-1", end_user=session.end_user, session=session, goal_event="go"
    )
    task = TaskContext.objects.create(
        tenant=tenant, task_id="task-1", plan=plan, session=session, event_type="search"
    )
    SubTask.objects.create(tenant=tenant, task=task, subtask_id="sub-9")

    response = editor.get(f"/sessions/{session.pk}/")

    assert [s.through_seq for s in response.context["summaries"]] == [2, 1]
    html = response.content.decode()
    assert 'id="summary-2"' in html
    assert "m2" in html
    assert "current" in html
    assert 'data-key="working_memory"' in html
    assert "&quot;step&quot;: 2" in html
    assert "&quot;channel&quot;: &quot;tui&quot;" in html
    assert 'data-plan-id="plan-1"' in html
    assert "Running" in html
    assert 'data-task-id="task-1"' in html
    assert "sub-9" in html
    assert 'id="context-preview"' in html
    assert 'hx-trigger="revealed"' in html


def test_the_session_page_escapes_what_bots_wrote(editor, tenant):
    session = _chat(
        tenant,
        user=SCRIPT,
        agent=SCRIPT,
        metadata={"note": SCRIPT},
        messages=[
            MessageInput(role="user", content=SCRIPT),
            MessageInput(role="tool", content=SCRIPT, name=SCRIPT, tool_call_id=SCRIPT),
            MessageInput(role="user", content=SCRIPT * 200),
        ],
    )
    state_set(tenant=tenant, session_id=session.pk, key=SCRIPT, value=SCRIPT)
    Summary.objects.create(tenant=tenant, session=session, text=SCRIPT, through_seq=1, model=SCRIPT)

    html = editor.get(f"/sessions/{session.pk}/").content.decode()

    assert ESCAPED in html
    assert SCRIPT not in html


def test_the_viewer_sees_no_purge_button(editor, viewer, tenant):
    session = _chat(tenant)

    assert 'id="purge-link"' in editor.get(f"/sessions/{session.pk}/").content.decode()
    assert 'id="purge-link"' not in viewer.get(f"/sessions/{session.pk}/").content.decode()


# --- the context preview ----------------------------------------------------------------------


def test_the_context_preview_is_what_the_api_returns(editor, viewer, api, tenant):
    long = " ".join(f"word{n}" for n in range(150))
    session = _chat(tenant, messages=_say(long, "I like green tea", "Noted!", "And " + SCRIPT))
    params = {"max_tokens": 200, "max_messages": 10, "query": "tea"}
    expected = api.get(f"/api/v1/sessions/{session.pk}/context/", params).json()

    for client in (editor, viewer):
        response = client.get(f"/sessions/{session.pk}/context/", params)
        assert response.status_code == 200
    preview = response.context["preview"]
    assert preview.content == expected["content"]
    assert preview.tokens == expected["tokens"]
    assert [
        {
            "name": s.name,
            "tokens": s.tokens,
            "included": s.included,
            "dropped": [{"item": i, "reason": r} for i, r in s.dropped],
        }
        for s in preview.sections
    ] == expected["sections"]
    html = response.content.decode()
    assert "<h1>Context preview</h1>" in html
    assert 'id="context-sections"' in html
    assert 'id="context-markdown"' in html
    assert ESCAPED in html
    assert SCRIPT not in html
    dropped = [item for s in expected["sections"] for item in s["dropped"]]
    assert dropped, "the budget should drop something"
    assert f"<code>{dropped[0]['item']}</code> — {dropped[0]['reason']}" in html
    messages = json.loads(
        json.dumps(
            api.get(
                f"/api/v1/sessions/{session.pk}/context/", {**params, "format": "messages"}
            ).json()["messages"]
        )
    )
    assert json.loads(preview.messages_json) == messages


def test_the_context_preview_loads_as_a_partial_for_htmx(editor, tenant):
    session = _chat(tenant, messages=_say("hello"))

    response = editor.get(f"/sessions/{session.pk}/context/", **HTMX)

    html = response.content.decode()
    assert "<html" not in html
    assert html.startswith('<section id="context-preview"')
    assert "hx-trigger" not in html
    assert response.context["preview"].max_tokens == 4000  # the policy's default


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"max_tokens": 199}, "max_tokens"),
        ({"max_tokens": 200_001}, "max_tokens"),
        ({"max_tokens": "lots"}, "max_tokens"),
        ({"max_messages": 501}, "max_messages"),
        ({"max_messages": -1}, "max_messages"),
        ({"query": "x" * 1001}, "query"),
    ],
)
def test_bad_context_parameters_show_inline_errors(editor, tenant, params, field):
    session = _chat(tenant, messages=_say("hello"))

    response = editor.get(f"/sessions/{session.pk}/context/", params, **HTMX)

    assert response.status_code == 200
    assert response.context["preview"] is None
    assert field in response.context["context_form"].errors
    assert f'id="context-errors-{field}"' in response.content.decode()
    assert 'class="errorlist' in response.content.decode()
