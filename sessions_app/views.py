"""Session pages: the list (filters and text search), a session's transcript and what is kept
about it, its context preview, and its purge. Thin: reads go through the selectors and the
context package, the purge through memoryhub.retention.purge (which audits)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from memoryhub.accounts.pages import TenantRequest, tenant_page
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.search import EmptySearchQuery, search_terms
from sessions_app import selectors, task_selectors
from sessions_app.api.filters import SessionFilter
from sessions_app.forms import SessionFilterForm
from sessions_app.models import Message, Plan, PlanStatus, Session, Summary, TaskContext

PAGE_SIZE = 50
# The text search ranks this many messages and lists the sessions they are in, best first.
SEARCH_MESSAGES = 200
TRANSCRIPT_PAGE = 100
# Messages longer than this are folded in a <details>.
FOLD_CHARS = 1500
FOLD_PREVIEW_CHARS = 300
SNIPPET_BEFORE, SNIPPET_AFTER = 80, 160
# Plans and task contexts shown per session (a worker's session rarely has more).
WORK_ROWS = 50


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _session_or_404(request: TenantRequest, session_id: uuid.UUID) -> Session:
    try:
        return selectors.session_get_for_tenant(tenant=request.tenant, session_id=session_id)
    except ResourceNotFound:
        raise Http404("No such session.") from None


# --- the list ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snippet:
    """Where the search matched, in three parts, so the template marks the match while
    escaping all of it."""

    before: str
    match: str
    after: str


@dataclass(frozen=True)
class SessionRow:
    session: Session
    hit: Message | None = None
    snippet: Snippet | None = None


def _snippet(content: str, query: str) -> Snippet:
    """The stretch of `content` around the first search word found in it. The database stems
    words, so a word may match in another form: then its first letters are looked for, and
    failing that the message's start is shown."""
    lowered = content.lower()
    try:
        terms = search_terms(query)
    except EmptySearchQuery:
        terms = []
    candidates = terms + [term[:5] for term in terms if len(term) > 5]
    for term in candidates:
        at = lowered.find(term)
        if at >= 0:
            start = max(0, at - SNIPPET_BEFORE)
            end = at + len(term)
            stop = min(len(content), end + SNIPPET_AFTER)
            return Snippet(
                before=("…" if start else "") + content[start:at],
                match=content[at:end],
                after=content[end:stop] + ("…" if stop < len(content) else ""),
            )
    cut = SNIPPET_BEFORE + SNIPPET_AFTER
    return Snippet(before=content[:cut] + ("…" if len(content) > cut else ""), match="", after="")


def _filter_params(cleaned: dict[str, Any]) -> dict[str, str]:
    """The form's filters as SessionFilter (the API's filter) takes them: dates become UTC
    day bounds, "to" inclusive."""
    params: dict[str, str] = {}
    if cleaned.get("user_id"):
        params["user_id"] = cleaned["user_id"]
    if cleaned.get("agent_id"):
        params["agent_id"] = cleaned["agent_id"]
    start: dt.date | None = cleaned.get("active_from")
    end: dt.date | None = cleaned.get("active_to")
    if start is not None:
        params["active_since"] = dt.datetime.combine(start, dt.time.min, dt.UTC).isoformat()
    if end is not None and end < dt.date.max:
        after = end + dt.timedelta(days=1)
        params["active_before"] = dt.datetime.combine(after, dt.time.min, dt.UTC).isoformat()
    return params


@tenant_page()
@require_GET
def session_list(request: TenantRequest) -> HttpResponse:
    form = SessionFilterForm(request.GET)
    rows: list[SessionRow] = []
    page = None
    searching = False
    if form.is_valid():
        cleaned = form.cleaned_data
        sessions = SessionFilter(
            data=_filter_params(cleaned),
            queryset=selectors.session_list_for_tenant(tenant=request.tenant),
        ).qs
        query = cleaned.get("q") or ""
        if query:
            searching = True
            try:
                hits = selectors.message_search(
                    tenant=request.tenant,
                    query=query,
                    user_id=cleaned.get("user_id") or None,
                    top_k=SEARCH_MESSAGES,
                )
            except EmptySearchQuery as error:
                form.add_error("q", str(error))
                hits = []
            best: dict[uuid.UUID, Message] = {}
            for hit in hits:  # best first: the first hit of a session is its best
                best.setdefault(hit.message.session_id, hit.message)
            found = {session.pk: session for session in sessions.filter(pk__in=list(best))}
            ranked = [
                SessionRow(session=found[pk], hit=message, snippet=_snippet(message.content, query))
                for pk, message in best.items()
                if pk in found
            ]
            page = Paginator(ranked, PAGE_SIZE).get_page(request.GET.get("page"))
            rows = list(page.object_list)
        else:
            page = Paginator(sessions.order_by("-last_active_at", "-id"), PAGE_SIZE).get_page(
                request.GET.get("page")
            )
            rows = [SessionRow(session=session) for session in page.object_list]
    context = {"form": form, "rows": rows, "page": page, "searching": searching}
    if request.htmx:
        return render(request, "sessions_app/partials/session_list.html", context)
    return render(request, "sessions_app/list.html", context)


# --- one session -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TranscriptItem:
    message: Message
    tool_calls_json: str | None
    folded: bool
    preview: str


@dataclass(frozen=True)
class Transcript:
    items: list[TranscriptItem]
    has_earlier: bool
    earlier_before: int | None  # the `before` of the page of earlier messages
    has_later: bool
    later_before: int | None


def _int_param(request: TenantRequest, name: str) -> int | None:
    try:
        value = int(request.GET.get(name, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def _transcript(*, request: TenantRequest, session: Session, before: int | None) -> Transcript:
    """Up to TRANSCRIPT_PAGE messages with seq < `before` (all: the last ones), in seq order:
    a long session is read a page at a time, never whole."""
    rows = Message.objects.for_tenant(request.tenant).filter(session=session)
    if before is not None:
        rows = rows.filter(seq__lt=before)
    newest_first = list(rows.order_by("-seq")[: TRANSCRIPT_PAGE + 1])
    shown = newest_first[:TRANSCRIPT_PAGE][::-1]
    items = [
        TranscriptItem(
            message=message,
            tool_calls_json=_json(message.tool_calls) if message.tool_calls else None,
            folded=len(message.content) > FOLD_CHARS,
            preview=message.content[:FOLD_PREVIEW_CHARS],
        )
        for message in shown
    ]
    has_earlier = len(newest_first) > TRANSCRIPT_PAGE
    has_later = before is not None and bool(shown) and shown[-1].seq < session.last_seq
    return Transcript(
        items=items,
        has_earlier=has_earlier,
        earlier_before=shown[0].seq if has_earlier else None,
        has_later=has_later,
        later_before=shown[-1].seq + TRANSCRIPT_PAGE + 1 if has_later else None,
    )


def _transcript_before(request: TenantRequest) -> int | None:
    """`?before=N`: the messages before seq N. `?around=N`: a page that holds message N with
    up to half a page after it (for links to one message, e.g. a fact's source)."""
    around = _int_param(request, "around")
    if around is not None:
        return around + TRANSCRIPT_PAGE // 2
    return _int_param(request, "before")


@tenant_page()
@require_GET
def session_detail(request: TenantRequest, session_id: uuid.UUID) -> HttpResponse:
    session = _session_or_404(request, session_id)
    before = _transcript_before(request)
    transcript = _transcript(request=request, session=session, before=before)
    if request.htmx and request.htmx.target == "load-earlier":
        return render(
            request,
            "sessions_app/partials/transcript_items.html",
            {"session": session, "transcript": transcript},
        )
    tenant = request.tenant
    summaries = list(
        Summary.objects.for_tenant(tenant).filter(session=session).order_by("-through_seq")
    )
    state = [
        (entry, _json(entry.value)) for entry in selectors.state_list_for_session(session=session)
    ]
    plans = list(
        Plan.objects.for_tenant(tenant)
        .filter(session=session)
        .order_by("-created_at", "-id")[: WORK_ROWS + 1]
    )
    tasks = list(
        TaskContext.objects.for_tenant(tenant)
        .filter(session=session)
        .select_related("plan")
        .prefetch_related("sub_tasks")
        .order_by("-created_at", "-id")[: WORK_ROWS + 1]
    )
    return render(
        request,
        "sessions_app/detail.html",
        {
            "session": session,
            "transcript": transcript,
            "windowed": before is not None,
            "summaries": summaries,
            "state": state,
            "metadata_json": _json(session.metadata),
            "plans": [
                (plan, _json(plan.goal_data), _json(plan.state)) for plan in plans[:WORK_ROWS]
            ],
            "more_plans": len(plans) > WORK_ROWS,
            "tasks": [(task, _json(task.data), _json(task.state)) for task in tasks[:WORK_ROWS]],
            "more_tasks": len(tasks) > WORK_ROWS,
        },
    )


# --- asynchronous work (seed 002) ---------------------------------------------------------------

WORK_PAGE_SIZE = 50


@tenant_page()
@require_GET
def work_list(request: TenantRequest) -> HttpResponse:
    """Running plans and the task contexts still waiting for sub-tasks, newest first."""
    plans = list(
        task_selectors.plan_list_for_tenant(tenant=request.tenant)
        .filter(status=PlanStatus.RUNNING)
        .order_by("-updated_at", "-id")[: WORK_PAGE_SIZE + 1]
    )
    tasks = list(
        task_selectors.task_context_list_for_tenant(tenant=request.tenant)
        .filter(sub_tasks__isnull=False)
        .distinct()
        .order_by("-updated_at", "-id")[: WORK_PAGE_SIZE + 1]
    )
    return render(
        request,
        "sessions_app/work.html",
        {
            "plans": plans[:WORK_PAGE_SIZE],
            "more_plans": len(plans) > WORK_PAGE_SIZE,
            "tasks": tasks[:WORK_PAGE_SIZE],
            "more_tasks": len(tasks) > WORK_PAGE_SIZE,
        },
    )
