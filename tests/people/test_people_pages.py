"""The end-user pages: the people list, a person's page, memory forms, export and erase."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from facts_app.models import Fact, Note, UserMemory, UserMemoryVersion
from facts_app.services.facts import fact_create
from facts_app.services.memories import memory_save
from facts_app.services.notes import note_daily_append, note_long_term_save
from memoryhub.accounts.models import AuditAction, AuditEvent, EndUser, Tenant
from memoryhub.accounts.services import deletion_counts, end_user_get_or_create
from sessions_app.models import Message, Session
from sessions_app.services import MessageInput, message_append_batch, session_create_or_get

XSS = "<script>alert(1)</script>"
XSS_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
ODD_ID = "whatsapp:+4912345"


# -- building a person ---------------------------------------------------------------------------


def make_person(tenant: Tenant, external_id: str = ODD_ID, display_name: str = "") -> EndUser:
    end_user = end_user_get_or_create(tenant=tenant, external_id=external_id)
    if display_name:
        EndUser.objects.filter(pk=end_user.pk).update(display_name=display_name)
        end_user.refresh_from_db()
    return end_user


def chat(tenant: Tenant, end_user: EndUser, *contents: str, agent: str = "chat") -> Session:
    session, _ = session_create_or_get(tenant=tenant, user_id=end_user.external_id, agent_id=agent)
    message_append_batch(
        tenant=tenant,
        session_id=session.pk,
        messages=[MessageInput(role="user", content=content) for content in contents],
    )
    return session


def remember(tenant: Tenant, end_user: EndUser, key: str, *texts: str) -> UserMemory:
    memory = None
    for text in texts:
        memory, _ = memory_save(tenant=tenant, end_user=end_user, key=key, content=text)
    assert memory is not None
    return memory


def fill(tenant: Tenant, end_user: EndUser, size: int = 1) -> dict[str, Any]:
    """A person with `size` of everything: sessions with messages, memories with versions,
    facts (one superseded) with provenance, a long-term note and daily notes with versions."""
    sessions = [chat(tenant, end_user, f"hello {n}", f"again {n}") for n in range(size)]
    first_messages = list(Message.objects.filter(session=sessions[0]).order_by("seq"))
    memories = [remember(tenant, end_user, f"key_{n}", f"old {n}", f"new {n}") for n in range(size)]
    facts = []
    for n in range(size):
        fact, _ = fact_create(
            tenant=tenant,
            end_user=end_user,
            content=f"likes tea {n}",
            source_session_id=sessions[n].pk,
            source_message_ids=[
                m.pk for m in Message.objects.filter(session=sessions[n]).order_by("seq")
            ],
        )
        facts.append(fact)
    newer, _ = fact_create(
        tenant=tenant, end_user=end_user, content="likes coffee now", supersedes=facts[0]
    )
    note_long_term_save(tenant=tenant, end_user=end_user, content="long v1")
    note_long_term_save(tenant=tenant, end_user=end_user, content="long v2")
    today = dt.date(2025, 5, 1)
    for n in range(size):
        day = today - dt.timedelta(days=n)
        note_daily_append(tenant=tenant, end_user=end_user, content=f"day {n} a", day=day)
        note_daily_append(tenant=tenant, end_user=end_user, content=f"day {n} b", day=day)
    return {
        "sessions": sessions,
        "messages": first_messages,
        "memories": memories,
        "facts": facts,
        "newer": newer,
    }


def detail_url(end_user: EndUser | str) -> str:
    user_id = end_user if isinstance(end_user, str) else end_user.external_id
    return reverse("people_pages:detail", kwargs={"user_id": user_id})


def url(name: str, end_user: EndUser, **more: str) -> str:
    return reverse(f"people_pages:{name}", kwargs={"user_id": end_user.external_id, **more})


def queries_of(client: Client, path: str, **extra: Any) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path, **extra)
    assert response.status_code == 200
    return len(captured)


# -- the list ------------------------------------------------------------------------------------


def test_the_list_shows_the_tenants_people_with_their_counts(editor, tenant, other_tenant):
    ana = make_person(tenant, ODD_ID, display_name="Ana")
    fill(tenant, ana, size=2)
    make_person(tenant, "tui:local")
    make_person(other_tenant, "someone:else")

    response = editor.get("/people/")

    assert response.status_code == 200
    rows = {person.external_id: person for person in response.context["page"]}
    assert set(rows) == {ODD_ID, "tui:local"}
    assert (rows[ODD_ID].session_count, rows[ODD_ID].memory_count, rows[ODD_ID].fact_count) == (
        2,
        2,
        3,
    )
    assert rows["tui:local"].session_count == 0
    html = response.content.decode()
    assert 'id="people-table"' in html
    assert f'href="{detail_url(ODD_ID)}"' in html
    assert "someone:else" not in html


def test_the_list_searches_by_id_and_by_name(viewer, tenant):
    make_person(tenant, ODD_ID, display_name="Ana Lopez")
    make_person(tenant, "tui:local", display_name="Bob")

    by_id = viewer.get("/people/", {"q": "+4912"})
    by_name = viewer.get("/people/", {"q": "bob"})
    nobody = viewer.get("/people/", {"q": "zzz"})

    assert [p.external_id for p in by_id.context["page"]] == [ODD_ID]
    assert [p.external_id for p in by_name.context["page"]] == ["tui:local"]
    assert list(nobody.context["page"]) == []
    assert b"No one matches" in nobody.content


def test_the_list_pages_with_and_without_htmx(viewer, tenant):
    for n in range(55):
        make_person(tenant, f"user:{n:02d}")

    first = viewer.get("/people/")
    second = viewer.get("/people/", {"page": 2})
    partial = viewer.get("/people/", {"page": 2}, HTTP_HX_REQUEST="true")

    assert len(first.context["page"]) == 50
    assert len(second.context["page"]) == 5
    assert first.context["pager"].next_url == "?page=2"
    assert b'rel="next"' in first.content
    assert b'hx-get="?page=2"' in first.content
    assert b"<html" not in partial.content
    assert b'id="people-table"' in partial.content
    assert b"Page 2 of 2" in partial.content


def test_the_list_keeps_the_search_in_its_page_links(viewer, tenant):
    for n in range(55):
        make_person(tenant, f"user:{n:02d}")

    response = viewer.get("/people/", {"q": "user"})

    assert response.context["pager"].next_url == "?q=user&page=2"


def test_the_list_costs_the_same_queries_for_few_and_many_people(viewer, tenant):
    for n in range(2):
        fill(tenant, make_person(tenant, f"few:{n}"))
    few = queries_of(viewer, "/people/")
    for n in range(20):
        fill(tenant, make_person(tenant, f"many:{n}"))
    many = queries_of(viewer, "/people/")

    assert few == many


def test_the_list_query_count_is_bounded(viewer, tenant, django_assert_max_num_queries):
    for n in range(10):
        fill(tenant, make_person(tenant, f"u:{n}"))

    with django_assert_max_num_queries(8):
        viewer.get("/people/")


def test_the_list_escapes_names(viewer, tenant):
    make_person(tenant, f"x:{XSS}", display_name=XSS)

    html = viewer.get("/people/").content.decode()

    assert XSS_ESCAPED in html
    assert XSS not in html


def test_pages_need_a_login(client, tenant):
    end_user = make_person(tenant)
    for path in (
        "/people/",
        detail_url(end_user),
        url("export", end_user),
        url("erase", end_user),
        url("memory-create", end_user),
    ):
        response = client.get(path)
        assert response.status_code == 302, path
        assert response.url.startswith("/login/?next="), path
    assert EndUser.objects.filter(pk=end_user.pk).exists()
    response = client.post(url("erase", end_user))
    assert response.status_code == 302
    assert EndUser.objects.filter(pk=end_user.pk).exists()


# -- one person ----------------------------------------------------------------------------------


def test_an_id_with_colon_and_plus_round_trips(editor, tenant):
    end_user = make_person(tenant, ODD_ID)

    assert detail_url(end_user) == "/people/whatsapp:+4912345/"
    response = editor.get("/people/whatsapp:+4912345/")

    assert response.status_code == 200
    assert response.context["end_user"] == end_user


@pytest.mark.parametrize(
    "odd", ["mail:ana@example.com", "slack:T1/U2", "a b?c#d%e", "über:ü", "line:x&y=z"]
)
def test_odd_ids_reach_their_pages(editor, tenant, odd):
    end_user = make_person(tenant, odd)
    remember(tenant, end_user, "name", "Ana")

    for path in (
        detail_url(end_user),
        url("erase", end_user),
        url("memory-edit", end_user, key="name"),
        url("memory-delete", end_user, key="name"),
    ):
        response = editor.get(path)
        assert response.status_code == 200, path
        assert response.context["end_user"] == end_user
    assert editor.get(url("export", end_user)).status_code == 200


def test_the_person_page_shows_sessions_memories_facts_and_notes(editor, tenant):
    end_user = make_person(tenant, ODD_ID, display_name="Ana")
    made = fill(tenant, end_user, size=2)

    response = editor.get(detail_url(end_user))

    assert response.status_code == 200
    html = response.content.decode()
    assert '<h1 id="person-title">Ana</h1>' in html
    for session in made["sessions"]:
        assert f'href="/sessions/{session.pk}/"' in html
    assert len(response.context["memory_rows"]) == 2
    row = response.context["memory_rows"][0]
    assert row.memory.content == "new 0"
    assert [version.content for version in row.versions] == ["old 0"]
    assert 'id="memory-key_0"' in html
    assert "old 0" in html
    # Notes: the long-term one with its history; each day with its versions.
    assert response.context["long_term"].content == "long v2"
    assert [note.content for note in response.context["long_term_history"]] == ["long v1"]
    days = response.context["note_days"]
    assert [day.day for day in days] == [dt.date(2025, 5, 1), dt.date(2025, 4, 30)]
    assert [note.content for note in days[0].versions] == ["day 0 a\nday 0 b", "day 0 a"]
    assert 'data-testid="note-long-term"' in html
    assert 'id="note-2025-05-01"' in html
    assert f'id="export-link" class="button secondary" href="{url("export", end_user)}"' in html
    assert 'id="erase-link"' in html


def test_facts_show_provenance_and_what_superseded_them(editor, tenant):
    end_user = make_person(tenant)
    made = fill(tenant, end_user, size=1)
    old, newer = made["facts"][0], made["newer"]
    session = made["sessions"][0]

    response = editor.get(detail_url(end_user))

    rows = {row.fact.pk: row for row in response.context["fact_rows"]}
    assert rows[old.pk].status == "superseded"
    assert rows[newer.pk].status == "current"
    assert [source.url for source in rows[old.pk].sources] == [
        f"/sessions/{session.pk}/?around=1#seq-1",
        f"/sessions/{session.pk}/?around=2#seq-2",
    ]
    html = response.content.decode()
    assert f'id="fact-{old.pk}"' in html
    assert 'data-status="superseded"' in html
    assert f'href="#fact-{newer.pk}" data-testid="fact-replaced-by"' in html
    assert f'href="/sessions/{session.pk}/?around=2#seq-2"' in html


def test_a_fact_whose_source_was_purged_says_so(editor, tenant):
    end_user = make_person(tenant)
    session = chat(tenant, end_user, "hi")
    message_ids = list(Message.objects.filter(session=session).values_list("pk", flat=True))
    fact_create(
        tenant=tenant,
        end_user=end_user,
        content="was said",
        source_session_id=session.pk,
        source_message_ids=message_ids,
    )
    Session.objects.filter(pk=session.pk).delete()

    response = editor.get(detail_url(end_user))

    (row,) = response.context["fact_rows"]
    assert row.sources == []
    assert row.source_missing
    assert b"source removed" in response.content


def test_the_person_page_costs_the_same_queries_for_little_and_much(editor, tenant):
    small = make_person(tenant, "small:1")
    fill(tenant, small, size=1)
    big = make_person(tenant, "big:1")
    fill(tenant, big, size=12)

    assert queries_of(editor, detail_url(small)) == queries_of(editor, detail_url(big))


def test_the_person_page_query_count_is_bounded(editor, tenant, django_assert_max_num_queries):
    end_user = make_person(tenant)
    fill(tenant, end_user, size=5)

    with django_assert_max_num_queries(20):
        editor.get(detail_url(end_user))


def test_sections_page_on_their_own_with_htmx(editor, tenant):
    end_user = make_person(tenant)
    for n in range(25):
        chat(tenant, end_user, f"hi {n}", agent=f"agent-{n}")

    full = editor.get(detail_url(end_user))
    assert full.context["sessions_pager"].next_url == "?sessions_page=2"
    partial = editor.get(
        detail_url(end_user),
        {"sessions_page": 2},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="sessions-section",
    )

    assert partial.status_code == 200
    html = partial.content.decode()
    assert html.lstrip().startswith('<section id="sessions-section"')
    assert len(partial.context["session_rows"]) == 5
    assert "memories-section" not in html
    plain = editor.get(detail_url(end_user), {"sessions_page": 2})
    assert len(plain.context["session_rows"]) == 5
    assert b"<html" in plain.content


def test_a_viewer_sees_the_person_without_change_buttons(viewer, tenant):
    end_user = make_person(tenant)
    fill(tenant, end_user)

    response = viewer.get(detail_url(end_user))

    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="export-link"' in html
    for absent in (
        'id="erase-link"',
        'id="memory-add"',
        "memory-edit",
        "memory-pin",
        "memory-delete",
    ):
        assert absent not in html, absent


def test_another_tenants_person_is_a_404(editor, other_tenant):
    outsider = make_person(other_tenant, ODD_ID)
    remember(other_tenant, outsider, "name", "Eve")

    for path in (
        detail_url(outsider),
        url("export", outsider),
        url("erase", outsider),
        url("memory-create", outsider),
        url("memory-edit", outsider, key="name"),
        url("memory-delete", outsider, key="name"),
    ):
        assert editor.get(path).status_code == 404, path
    assert editor.post(url("erase", outsider)).status_code == 404
    assert editor.post(url("memory-delete", outsider, key="name")).status_code == 404
    assert (
        editor.post(url("memory-pin", outsider, key="name"), {"pinned": "true"}).status_code == 404
    )
    assert EndUser.objects.filter(pk=outsider.pk).exists()
    assert UserMemory.objects.get(end_user=outsider).pinned is False
    assert not AuditEvent.objects.exists()


def test_an_unknown_person_or_memory_is_a_404(editor, tenant):
    end_user = make_person(tenant)

    assert editor.get("/people/nobody:1/").status_code == 404
    assert editor.get(url("memory-edit", end_user, key="missing")).status_code == 404
    assert editor.get(url("memory-edit", end_user, key="Not-A-Key")).status_code == 404


def test_the_person_page_escapes_what_people_and_bots_wrote(editor, tenant):
    end_user = make_person(tenant, f"x:{XSS}", display_name=XSS)
    remember(tenant, end_user, "note", XSS, XSS + " again")
    session = chat(tenant, end_user, XSS)
    fact_create(
        tenant=tenant,
        end_user=end_user,
        content=XSS,
        tags=[XSS],
        source_session_id=session.pk,
        source_message_ids=list(
            Message.objects.filter(session=session).values_list("pk", flat=True)
        ),
    )
    note_long_term_save(tenant=tenant, end_user=end_user, content=XSS)
    note_daily_append(tenant=tenant, end_user=end_user, content=XSS, day=dt.date(2025, 5, 1))

    for path in (
        detail_url(end_user),
        url("erase", end_user),
        url("memory-edit", end_user, key="note"),
        url("memory-delete", end_user, key="note"),
    ):
        html = editor.get(path).content.decode()
        assert XSS_ESCAPED in html, path
        assert XSS not in html, path


# -- export --------------------------------------------------------------------------------------


def test_the_export_downloads_the_json_document_and_is_audited(viewer, tenant):
    end_user = make_person(tenant)
    fill(tenant, end_user)

    response = viewer.get(url("export", end_user))

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert (
        response["Content-Disposition"]
        == 'attachment; filename="memoryhub-user-whatsapp4912345.json"'
    )
    document = json.loads(response.content)
    assert document["format"] == "memoryhub.export"
    kinds = {record["type"] for record in document["records"]}
    assert {"end_user", "session", "message", "memory", "fact", "note"} <= kinds
    event = AuditEvent.objects.get(action=AuditAction.EXPORT)
    assert (event.actor_type, event.object_id, event.tenant) == ("staff", ODD_ID, tenant)
    assert event.actor == response.wsgi_request.user.get_username()
    assert event.counts["message"] == 2


# -- erase ---------------------------------------------------------------------------------------


def test_erase_confirmation_lists_exactly_what_will_go(editor, tenant):
    end_user = make_person(tenant)
    fill(tenant, end_user, size=2)
    expected = deletion_counts(obj=end_user)

    response = editor.get(url("erase", end_user))

    assert response.status_code == 200
    assert response.context["counts"] == expected
    html = response.content.decode()
    assert 'data-testid="erase-counts"' in html
    messages_row = (
        '<tr data-kind="messages"><th scope="row">Messages</th>'
        f'<td class="num">{expected["messages"]}</td></tr>'
    )
    assert messages_row in html
    assert expected["messages"] == 4
    assert expected["sessions"] == 2
    assert expected["end_users"] == 1
    assert 'id="erase-confirm"' in html
    assert EndUser.objects.filter(pk=end_user.pk).exists()
    assert not AuditEvent.objects.exists()


def test_erase_removes_what_the_confirmation_said_and_audits_it(editor, tenant):
    end_user = make_person(tenant)
    fill(tenant, end_user, size=2)
    bystander = make_person(tenant, "tui:local")
    fill(tenant, bystander)
    shown = editor.get(url("erase", end_user)).context["counts"]
    before = {
        model: model.objects.count()
        for model in (Session, Message, UserMemory, UserMemoryVersion, Fact, Note)
    }

    response = editor.post(url("erase", end_user), follow=True)

    assert response.redirect_chain == [("/people/", 302)]
    assert not EndUser.objects.filter(pk=end_user.pk).exists()
    assert Session.objects.count() == before[Session] - shown["sessions"]
    assert Message.objects.count() == before[Message] - shown["messages"]
    assert UserMemory.objects.count() == before[UserMemory] - shown["user_memories"]
    assert Fact.objects.count() == before[Fact] - shown["facts"]
    assert Note.objects.count() == before[Note] - shown["notes"]
    assert EndUser.objects.filter(pk=bystander.pk).exists()
    event = AuditEvent.objects.get(action=AuditAction.ERASE)
    assert (event.actor_type, event.object_id, event.counts) == ("staff", ODD_ID, shown)
    assert event.actor == response.wsgi_request.user.get_username()
    html = response.content.decode()
    assert f"Erased {ODD_ID}:" in html
    assert f"{shown['messages']} messages" in html


def test_a_viewer_sees_the_erase_counts_but_cannot_erase(viewer, tenant):
    end_user = make_person(tenant)
    fill(tenant, end_user)

    page = viewer.get(url("erase", end_user))
    refused = viewer.post(url("erase", end_user))

    assert page.status_code == 200
    assert b'data-testid="erase-counts"' in page.content
    assert b'id="erase-confirm"' not in page.content
    assert refused.status_code == 403
    assert EndUser.objects.filter(pk=end_user.pk).exists()
    assert not AuditEvent.objects.exists()


# -- memories ------------------------------------------------------------------------------------


def test_adding_a_memory(editor, tenant):
    end_user = make_person(tenant)

    form = editor.get(url("memory-create", end_user))
    response = editor.post(
        url("memory-create", end_user), {"key": "favourite_tea", "content": "green", "pinned": "on"}
    )

    assert form.status_code == 200
    assert b'id="memory-form"' in form.content
    assert response.status_code == 302
    assert response.url == f"{detail_url(end_user)}#memory-favourite_tea"
    memory = UserMemory.objects.get(end_user=end_user)
    assert (memory.key, memory.content, memory.pinned) == ("favourite_tea", "green", True)


@pytest.mark.parametrize(
    ("key", "content", "field", "message"),
    [
        ("Bad Key", "x", "key", "Keys are lowercase"),
        ("system_secret", "x", "key", "Keys may not start with system_ or internal_"),
        ("k" * 65, "x", "key", "Keys are at most 64 characters"),
        ("", "x", "key", "This field is required"),
        ("ok_key", "   ", "content", "Content may not be blank"),
        ("ok_key", "x" * (8 * 1024 + 1), "content", "content is larger than 8192 bytes"),
    ],
)
def test_a_bad_new_memory_shows_inline_errors_and_saves_nothing(
    editor, tenant, key, content, field, message
):
    end_user = make_person(tenant)

    response = editor.post(url("memory-create", end_user), {"key": key, "content": content})

    assert response.status_code == 200
    assert message in " ".join(response.context["form"].errors[field])
    assert f'data-testid="field-{field}"' in response.content.decode()
    assert 'class="errorlist' in response.content.decode()
    assert not UserMemory.objects.exists()


def test_a_memory_key_already_in_use_is_refused_inline(editor, tenant):
    end_user = make_person(tenant)
    remember(tenant, end_user, "name", "Ana")

    response = editor.post(url("memory-create", end_user), {"key": "name", "content": "Eve"})

    assert response.status_code == 200
    assert "already has a memory under this key" in response.context["form"].errors["key"][0]
    assert UserMemory.objects.get(end_user=end_user).content == "Ana"


def test_editing_a_memory_keeps_the_old_text_as_a_version(editor, tenant):
    end_user = make_person(tenant)
    remember(tenant, end_user, "name", "Ana")

    form = editor.get(url("memory-edit", end_user, key="name"))
    response = editor.post(url("memory-edit", end_user, key="name"), {"content": "Ana María"})

    assert form.context["form"].initial == {"content": "Ana", "pinned": False}
    assert response.status_code == 302
    memory = UserMemory.objects.get(end_user=end_user)
    assert (memory.content, memory.version) == ("Ana María", 2)
    assert [v.content for v in memory.versions.all()] == ["Ana"]
    page = editor.get(url("memory-edit", end_user, key="name"))
    assert b'data-testid="memory-history"' in page.content


def test_a_bad_memory_edit_shows_inline_errors_and_changes_nothing(editor, tenant):
    end_user = make_person(tenant)
    remember(tenant, end_user, "name", "Ana")

    blank = editor.post(url("memory-edit", end_user, key="name"), {"content": "  "})
    too_long = editor.post(url("memory-edit", end_user, key="name"), {"content": "é" * 4097})

    assert blank.status_code == 200
    assert "Content may not be blank." in blank.context["form"].errors["content"]
    assert too_long.status_code == 200
    assert "larger than 8192 bytes" in too_long.context["form"].errors["content"][0]
    memory = UserMemory.objects.get(end_user=end_user)
    assert (memory.content, memory.version) == ("Ana", 1)


def test_pinning_and_unpinning(editor, tenant):
    end_user = make_person(tenant)
    remember(tenant, end_user, "name", "Ana")
    pin = url("memory-pin", end_user, key="name")

    response = editor.post(pin, {"pinned": "true"})
    assert response.status_code == 302
    assert UserMemory.objects.get().pinned is True
    editor.post(pin, {"pinned": "false"})
    memory = UserMemory.objects.get()
    assert (memory.pinned, memory.version) == (False, 1)
    assert editor.get(pin).status_code == 405


def test_deleting_a_memory_removes_what_was_shown_and_audits_it(editor, tenant):
    end_user = make_person(tenant)
    remember(tenant, end_user, "name", "Ana", "Ana M", "Ana María")
    remember(tenant, end_user, "city", "Berlin")
    delete = url("memory-delete", end_user, key="name")

    page = editor.get(delete)
    rows = {row["kind"]: row["count"] for row in page.context["count_rows"]}
    response = editor.post(delete)

    assert rows == {"user_memories": 1, "user_memory_versions": 2}
    assert b'id="memory-delete-confirm"' in page.content
    assert response.status_code == 302
    assert list(UserMemory.objects.values_list("key", flat=True)) == ["city"]
    assert not UserMemoryVersion.objects.exists()
    event = AuditEvent.objects.get(action=AuditAction.DELETE)
    assert (event.actor_type, event.object_type, event.object_id) == (
        "staff",
        "user_memory",
        f"{ODD_ID}:name",
    )
    assert event.counts == rows


def test_a_viewer_cannot_change_memories(viewer, tenant):
    end_user = make_person(tenant)
    remember(tenant, end_user, "name", "Ana")

    assert viewer.get(url("memory-create", end_user)).status_code == 403
    assert viewer.get(url("memory-edit", end_user, key="name")).status_code == 403
    assert (
        viewer.post(url("memory-create", end_user), {"key": "k", "content": "x"}).status_code == 403
    )
    assert (
        viewer.post(url("memory-edit", end_user, key="name"), {"content": "Eve"}).status_code == 403
    )
    assert (
        viewer.post(url("memory-pin", end_user, key="name"), {"pinned": "true"}).status_code == 403
    )
    confirm = viewer.get(url("memory-delete", end_user, key="name"))
    assert confirm.status_code == 200
    assert b'id="memory-delete-confirm"' not in confirm.content
    assert viewer.post(url("memory-delete", end_user, key="name")).status_code == 403
    memory = UserMemory.objects.get()
    assert (memory.key, memory.content, memory.pinned, memory.version) == ("name", "Ana", False, 1)
    assert not AuditEvent.objects.exists()


def test_every_form_carries_a_csrf_token(editor, tenant):
    end_user = make_person(tenant)
    fill(tenant, end_user)
    key = "key_0"

    for path in (
        detail_url(end_user),
        url("erase", end_user),
        url("memory-create", end_user),
        url("memory-edit", end_user, key=key),
        url("memory-delete", end_user, key=key),
    ):
        html = editor.get(path).content.decode()
        assert html.count('method="post"') == html.count("csrfmiddlewaretoken"), path


def test_csrf_is_enforced_on_erase(tenant, member_client):
    end_user = make_person(tenant)
    client = member_client(tenant)
    client.handler.enforce_csrf_checks = True

    assert client.post(url("erase", end_user)).status_code == 403
    assert EndUser.objects.filter(pk=end_user.pk).exists()
