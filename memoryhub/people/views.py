"""End-user pages: the people a tenant's bots talk to, one person's memory, export and erase.

Thin: reads go through the selectors (accounts, facts_app, sessions_app), writes through the
services (memory_save / memory_delete, end_user_export / end_user_erase). What is left here is
paging and the few batch look-ups a page needs so that its query count does not grow with its
rows (counts per person, versions per page of memories or notes, message seqs of provenance).

Person ids are the bot's own strings (`whatsapp:+4912345`, `slack:T1/U2`), so the URLs take them
with a `path` converter: `reverse()` percent-encodes what a path cannot hold (`?`, `#`, `%`,
spaces) and leaves `:` `+` `@` `/` readable. The suffixed routes (erase/, export/, memories/…)
come before the bare detail route, so the detail page of an id that itself ends in `/erase` or
`/export` is shadowed by those routes (documented in page_urls.py).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import reduce
from operator import or_
from typing import Any

from django.contrib import messages
from django.core.paginator import Page, Paginator
from django.db.models import Count, IntegerField, Model, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from facts_app.models import Fact, Note, NoteKind, UserMemory, UserMemoryVersion
from facts_app.selectors.facts import FactFilters, fact_list_for_tenant
from facts_app.selectors.memories import memory_get, memory_list, memory_versions
from facts_app.selectors.notes import note_daily_history, note_long_term_history
from facts_app.services.memories import memory_delete, memory_save
from memoryhub.accounts.models import EndUser
from memoryhub.accounts.pages import TenantRequest, actor_for_request, tenant_page
from memoryhub.accounts.selectors import end_user_get_for_tenant
from memoryhub.accounts.services import deletion_counts, end_user_erase
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.pages import Pager, count_rows, counts_text, htmx_partial, pager_for
from memoryhub.people.forms import MemoryCreateForm, MemoryEditForm, MemoryPinForm, PeopleSearchForm
from memoryhub.people.services import end_user_export
from sessions_app.models import Message, Session
from sessions_app.selectors import session_list_for_tenant

PEOPLE_PER_PAGE = 50
SESSIONS_PER_PAGE = 20
MEMORIES_PER_PAGE = 50
FACTS_PER_PAGE = 50
NOTE_DAYS_PER_PAGE = 10
LONG_TERM_VERSIONS_SHOWN = 50

_PLACEHOLDER_SESSION = uuid.UUID(int=0)


# -- helpers -----------------------------------------------------------------------------------


def _person_or_404(request: TenantRequest, user_id: str) -> EndUser:
    try:
        return end_user_get_for_tenant(tenant=request.tenant, external_id=user_id)
    except ResourceNotFound:
        raise Http404("No such person.") from None


def _memory_or_404(request: TenantRequest, end_user: EndUser, key: str) -> UserMemory:
    try:
        return memory_get(tenant=request.tenant, end_user=end_user, key=key)
    except ResourceNotFound:
        raise Http404("No memory under this key.") from None


def _person_url(end_user: EndUser, anchor: str = "") -> str:
    url = reverse("people_pages:detail", kwargs={"user_id": end_user.external_id})
    return f"{url}#{anchor}" if anchor else url


def session_url_builder() -> Callable[[uuid.UUID | str], str]:
    """The sessions pages' URL of a session: `sessions_pages:detail` when that page exists,
    else the path it will have. Reversed once per request, not once per row."""
    try:
        pattern = reverse("sessions_pages:detail", args=[_PLACEHOLDER_SESSION])
    except NoReverseMatch:
        try:
            pattern = reverse("sessions_pages:detail", args=[str(_PLACEHOLDER_SESSION)])
        except NoReverseMatch:
            pattern = f"/sessions/{_PLACEHOLDER_SESSION}/"
    placeholder = str(_PLACEHOLDER_SESSION)
    return lambda session_id: pattern.replace(placeholder, str(session_id))


def _count_per_person(model: type[Model]) -> Coalesce:
    # A correlated subquery per kind, not Count() over joins: three joined one-to-many tables
    # would multiply each other's rows.
    rows = (
        model._default_manager.filter(end_user=OuterRef("pk"))
        .order_by()
        .values("end_user")
        .annotate(count=Count("pk"))
        .values("count")
    )
    return Coalesce(Subquery(rows, output_field=IntegerField()), 0)


def _any_of(querysets: Iterable[QuerySet[Any]]) -> QuerySet[Any]:
    """Several selector querysets of one model as one query (their filters OR-ed); at least
    one queryset."""
    first, *rest = querysets
    return reduce(or_, rest, first)


def _section_pager(request: TenantRequest, page: Page[Any], *, name: str, label: str) -> Pager:
    return pager_for(request, page, param=f"{name}_page", target=f"{name}-section", label=label)


# -- the list ----------------------------------------------------------------------------------


@require_GET
@tenant_page()
def people_list(request: TenantRequest) -> HttpResponse:
    form = PeopleSearchForm(request.GET)
    query = form.cleaned_data["q"].strip() if form.is_valid() else ""
    people = (
        EndUser.objects.for_tenant(request.tenant)
        .annotate(
            session_count=_count_per_person(Session),
            memory_count=_count_per_person(UserMemory),
            fact_count=_count_per_person(Fact),
        )
        .order_by("-created_at", "-id")
    )
    if query:
        people = people.filter(Q(external_id__icontains=query) | Q(display_name__icontains=query))
    page = Paginator(people, PEOPLE_PER_PAGE).get_page(request.GET.get("page"))
    pager = pager_for(
        request, page, param="page", target="people-results", swap="innerHTML", label="People pages"
    )
    context = {"form": form, "query": query, "page": page, "pager": pager}
    if htmx_partial(request):
        return render(request, "people/partials/people_results.html", context)
    return render(request, "people/list.html", context)


# -- one person --------------------------------------------------------------------------------


@dataclass
class MemoryRow:
    memory: UserMemory
    versions: list[UserMemoryVersion]
    expired: bool


@dataclass
class SourceLink:
    label: str
    url: str


@dataclass
class FactRow:
    fact: Fact
    status: str  # "current" | "superseded" | "expired"
    sources: list[SourceLink] = field(default_factory=list)
    source_missing: bool = False


@dataclass
class NoteDay:
    day: dt.date
    versions: list[Note]

    @property
    def current(self) -> Note:
        return self.versions[0]


def _sessions_section(request: TenantRequest, end_user: EndUser) -> dict[str, Any]:
    sessions = (
        session_list_for_tenant(tenant=request.tenant)
        .filter(end_user=end_user)
        .order_by("-last_active_at", "-id")
    )
    page = Paginator(sessions, SESSIONS_PER_PAGE).get_page(request.GET.get("sessions_page"))
    url_of = session_url_builder()
    rows = [{"session": session, "url": url_of(session.pk)} for session in page]
    return {
        "sessions_pager": _section_pager(request, page, name="sessions", label="Session pages"),
        "session_rows": rows,
    }


def _memories_section(request: TenantRequest, end_user: EndUser) -> dict[str, Any]:
    memories = memory_list(tenant=request.tenant, end_user=end_user, include_expired=True)
    page = Paginator(memories, MEMORIES_PER_PAGE).get_page(request.GET.get("memories_page"))
    on_page = list(page)
    versions: dict[int, list[UserMemoryVersion]] = defaultdict(list)
    if on_page:
        history = _any_of(memory_versions(memory=memory) for memory in on_page)
        for version in history.order_by("memory_id", "-version"):
            versions[version.memory_id].append(version)
    now = timezone.now()
    rows = [
        MemoryRow(
            memory=memory,
            versions=versions.get(memory.pk, []),
            expired=memory.expires_at is not None and memory.expires_at <= now,
        )
        for memory in on_page
    ]
    return {
        "memories_pager": _section_pager(request, page, name="memories", label="Memory pages"),
        "memory_rows": rows,
    }


def _facts_section(request: TenantRequest, end_user: EndUser) -> dict[str, Any]:
    facts = (
        fact_list_for_tenant(
            tenant=request.tenant,
            filters=FactFilters(user_id=end_user.external_id, include_superseded=True),
        )
        .select_related("superseded_by")
        .order_by("-created_at", "-id")
    )
    page = Paginator(facts, FACTS_PER_PAGE).get_page(request.GET.get("facts_page"))
    on_page: list[Fact] = list(page)
    message_ids = {pk for fact in on_page for pk in fact.source_message_ids if isinstance(pk, int)}
    # Provenance: message ids to (session, seq) in one query; sessions named without a message
    # checked for existence in one more, so a link never leads to a purged conversation.
    located: dict[int, tuple[uuid.UUID, int]] = {}
    if message_ids:
        located = {
            pk: (session_id, seq)
            for pk, session_id, seq in Message.objects.for_tenant(request.tenant)
            .filter(pk__in=message_ids)
            .values_list("pk", "session_id", "seq")
        }
    bare_sessions = {
        fact.source_session_id
        for fact in on_page
        if fact.source_session_id
        and not any(isinstance(pk, int) and pk in located for pk in fact.source_message_ids)
    }
    live_sessions: set[uuid.UUID] = set()
    if bare_sessions:
        live_sessions = set(
            Session.objects.for_tenant(request.tenant)
            .filter(pk__in=bare_sessions)
            .values_list("pk", flat=True)
        )
    url_of = session_url_builder()
    now = timezone.now()
    rows = []
    for fact in on_page:
        if fact.superseded_by_id is not None:
            status = "superseded"
        elif fact.valid_until is not None and fact.valid_until <= now:
            status = "expired"
        else:
            status = "current"
        row = FactRow(fact=fact, status=status)
        for pk in fact.source_message_ids:
            if isinstance(pk, int) and pk in located:
                session_id, seq = located[pk]
                row.sources.append(
                    SourceLink(
                        label=f"message #{seq}", url=f"{url_of(session_id)}?around={seq}#seq-{seq}"
                    )
                )
        if not row.sources and fact.source_session_id:
            if fact.source_session_id in live_sessions:
                row.sources.append(SourceLink(label="session", url=url_of(fact.source_session_id)))
            else:
                row.source_missing = True
        elif fact.source_message_ids and not row.sources:
            row.source_missing = True
        rows.append(row)
    return {
        "facts_pager": _section_pager(request, page, name="facts", label="Fact pages"),
        "fact_rows": rows,
    }


def _notes_section(request: TenantRequest, end_user: EndUser) -> dict[str, Any]:
    tenant = request.tenant
    long_term = list(
        note_long_term_history(tenant=tenant, end_user=end_user)[: LONG_TERM_VERSIONS_SHOWN + 1]
    )
    days = (
        Note.objects.for_tenant(tenant)
        .filter(end_user=end_user, kind=NoteKind.DAILY)
        .order_by("-day")
        .values_list("day", flat=True)
        .distinct()
    )
    page = Paginator(days, NOTE_DAYS_PER_PAGE).get_page(request.GET.get("notes_page"))
    on_page: list[dt.date] = list(page)
    by_day: dict[dt.date, list[Note]] = defaultdict(list)
    if on_page:
        history = _any_of(
            note_daily_history(tenant=tenant, end_user=end_user, day=day) for day in on_page
        )
        for note in history.order_by("-day", "-version"):
            if note.day is not None:  # always, for daily notes (a check constraint)
                by_day[note.day].append(note)
    return {
        "long_term": long_term[0] if long_term else None,
        "long_term_history": long_term[1:LONG_TERM_VERSIONS_SHOWN],
        "long_term_more": len(long_term) > LONG_TERM_VERSIONS_SHOWN,
        "notes_pager": _section_pager(request, page, name="notes", label="Daily note pages"),
        "note_days": [NoteDay(day=day, versions=by_day[day]) for day in on_page if by_day[day]],
    }


SECTIONS: dict[str, tuple[Callable[[TenantRequest, EndUser], dict[str, Any]], str]] = {
    "sessions-section": (_sessions_section, "people/partials/sessions_section.html"),
    "memories-section": (_memories_section, "people/partials/memories_section.html"),
    "facts-section": (_facts_section, "people/partials/facts_section.html"),
    "notes-section": (_notes_section, "people/partials/notes_section.html"),
}


@require_GET
@tenant_page()
def person_detail(request: TenantRequest, user_id: str) -> HttpResponse:
    end_user = _person_or_404(request, user_id)
    context: dict[str, Any] = {"end_user": end_user}
    target = request.htmx.target if htmx_partial(request) else None
    if target in SECTIONS:
        # Paging one section with htmx: only that section is read and sent back.
        build, template = SECTIONS[target]
        context.update(build(request, end_user))
        return render(request, template, context)
    for build, _ in SECTIONS.values():
        context.update(build(request, end_user))
    return render(request, "people/detail.html", context)


@require_GET
@tenant_page()
def person_export(request: TenantRequest, user_id: str) -> HttpResponse:
    """Download everything kept about the person (audited by the service, as the API's export)."""
    end_user = _person_or_404(request, user_id)
    document = end_user_export(end_user=end_user, actor=actor_for_request(request))
    response = JsonResponse(document, json_dumps_params={"indent": 2, "ensure_ascii": False})
    name = slugify(end_user.external_id) or "person"
    response["Content-Disposition"] = f'attachment; filename="memoryhub-user-{name}.json"'
    response["Cache-Control"] = "no-store"
    return response


# -- erase -------------------------------------------------------------------------------------


@tenant_page()
def _erase_confirm(request: TenantRequest, user_id: str) -> HttpResponse:
    end_user = _person_or_404(request, user_id)
    counts = deletion_counts(obj=end_user)
    return render(
        request,
        "people/erase_confirm.html",
        {"end_user": end_user, "counts": counts, "count_rows": count_rows(counts)},
    )


@tenant_page(editor=True)
def _erase(request: TenantRequest, user_id: str) -> HttpResponse:
    end_user = _person_or_404(request, user_id)
    try:
        counts = end_user_erase(end_user=end_user, actor=actor_for_request(request))
    except ResourceNotFound:
        raise Http404("No such person.") from None  # erased by someone else meanwhile
    messages.success(
        request, f"Erased {end_user.external_id}: {counts_text(counts) or 'nothing'} removed."
    )
    return redirect("people_pages:list")


@require_http_methods(["GET", "POST"])
def person_erase(request: TenantRequest, user_id: str) -> HttpResponse:
    """GET: what erasing the person would remove (the dry run of the same deletion collector);
    POST (editors only): erase it, audited, and go back to the list with the counts."""
    if request.method == "POST":
        return _erase(request, user_id)
    return _erase_confirm(request, user_id)


# -- memories ----------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@tenant_page(editor=True)
def memory_create(request: TenantRequest, user_id: str) -> HttpResponse:
    end_user = _person_or_404(request, user_id)
    form = MemoryCreateForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        key = form.cleaned_data["key"]
        try:
            memory_get(tenant=request.tenant, end_user=end_user, key=key)
        except ResourceNotFound:
            memory_save(
                tenant=request.tenant,
                end_user=end_user,
                key=key,
                content=form.cleaned_data["content"],
                pinned=form.cleaned_data["pinned"],
            )
            messages.success(request, f"Saved the memory “{key}”.")
            return redirect(_person_url(end_user, f"memory-{key}"))
        form.add_error("key", "This person already has a memory under this key: edit that one.")
    return render(
        request, "people/memory_form.html", {"end_user": end_user, "form": form, "memory": None}
    )


@require_http_methods(["GET", "POST"])
@tenant_page(editor=True)
def memory_edit(request: TenantRequest, user_id: str, key: str) -> HttpResponse:
    end_user = _person_or_404(request, user_id)
    memory = _memory_or_404(request, end_user, key)
    if request.method == "POST":
        form = MemoryEditForm(request.POST)
        if form.is_valid():
            memory_save(
                tenant=request.tenant,
                end_user=end_user,
                key=memory.key,
                content=form.cleaned_data["content"],
                pinned=form.cleaned_data["pinned"],
            )
            messages.success(request, f"Saved the memory “{memory.key}”.")
            return redirect(_person_url(end_user, f"memory-{memory.key}"))
    else:
        form = MemoryEditForm(initial={"content": memory.content, "pinned": memory.pinned})
    return render(
        request,
        "people/memory_form.html",
        {
            "end_user": end_user,
            "form": form,
            "memory": memory,
            "versions": list(memory_versions(memory=memory)),
        },
    )


@require_POST
@tenant_page(editor=True)
def memory_pin(request: TenantRequest, user_id: str, key: str) -> HttpResponse:
    end_user = _person_or_404(request, user_id)
    memory = _memory_or_404(request, end_user, key)
    form = MemoryPinForm(request.POST)
    form.is_valid()  # a BooleanField that is not required always is
    pinned = bool(form.cleaned_data.get("pinned"))
    memory_save(
        tenant=request.tenant,
        end_user=end_user,
        key=memory.key,
        content=memory.content,
        pinned=pinned,
    )
    messages.success(request, f"{'Pinned' if pinned else 'Unpinned'} “{memory.key}”.")
    return redirect(_person_url(end_user, f"memory-{memory.key}"))


@tenant_page()
def _memory_delete_confirm(request: TenantRequest, user_id: str, key: str) -> HttpResponse:
    end_user = _person_or_404(request, user_id)
    memory = _memory_or_404(request, end_user, key)
    return render(
        request,
        "people/memory_delete_confirm.html",
        {
            "end_user": end_user,
            "memory": memory,
            "count_rows": count_rows(deletion_counts(obj=memory)),
        },
    )


@tenant_page(editor=True)
def _memory_delete(request: TenantRequest, user_id: str, key: str) -> HttpResponse:
    end_user = _person_or_404(request, user_id)
    memory = _memory_or_404(request, end_user, key)
    memory_delete(memory=memory, actor=actor_for_request(request))
    messages.success(request, f"Deleted the memory “{key}” and its earlier versions.")
    return redirect(_person_url(end_user, "memories-section"))


@require_http_methods(["GET", "POST"])
def memory_delete_view(request: TenantRequest, user_id: str, key: str) -> HttpResponse:
    """GET: what deleting the memory removes (it and its versions); POST (editors): delete it."""
    if request.method == "POST":
        return _memory_delete(request, user_id, key)
    return _memory_delete_confirm(request, user_id, key)
