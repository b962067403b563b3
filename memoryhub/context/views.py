"""The context preview page: what GET /api/v1/sessions/{id}/context/ answers for a session, in
both formats, with the per-section report. It runs the endpoint's own code path."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from memoryhub.accounts.pages import TenantRequest, tenant_page
from memoryhub.context import Budget, SectionReport, render_markdown, render_messages
from memoryhub.context.forms import ContextPreviewForm
from memoryhub.context.session_context import session_context_for_tenant
from memoryhub.core.pages import htmx_partial, not_found_as_404
from sessions_app.selectors import session_get_for_tenant


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@dataclass(frozen=True)
class ContextPreview:
    """What GET /api/v1/sessions/{id}/context/ answers, in both formats."""

    content: str
    tokens: int
    messages_json: str
    messages_tokens: int
    max_tokens: int
    budget: Budget
    memory_enabled: bool
    sections: list[SectionReport]


def _context_preview(
    *,
    request: TenantRequest,
    session_id: uuid.UUID,
    max_tokens: int | None,
    max_messages: int | None,
    max_facts: int | None,
    facts_max_tokens: int | None,
    query: str,
) -> ContextPreview:
    """The context endpoint's code path (memoryhub.context.api.SessionContextView): the same
    selectors, policy defaults, gather, assemble and render."""
    with not_found_as_404("No such session."):
        built = session_context_for_tenant(
            tenant=request.tenant,
            session_id=session_id,
            max_tokens=max_tokens,
            max_messages=max_messages,
            max_facts=max_facts,
            facts_max_tokens=facts_max_tokens,
            query=query,
        )
    context = built.context
    return ContextPreview(
        content=render_markdown(context),
        tokens=context.markdown_tokens,
        messages_json=_json(render_messages(context)),
        messages_tokens=context.messages_tokens,
        max_tokens=context.max_tokens,
        budget=built.budget,
        memory_enabled=built.memory_enabled,
        sections=context.sections,
    )


@tenant_page()
@require_GET
def session_context(request: TenantRequest, session_id: uuid.UUID) -> HttpResponse:
    with not_found_as_404("No such session."):
        session = session_get_for_tenant(tenant=request.tenant, session_id=session_id)
    form = ContextPreviewForm(request.GET)
    preview = None
    if form.is_valid():
        preview = _context_preview(
            request=request,
            session_id=session.pk,
            max_tokens=form.cleaned_data["max_tokens"],
            max_messages=form.cleaned_data["max_messages"],
            max_facts=form.cleaned_data["max_facts"],
            facts_max_tokens=form.cleaned_data["facts_max_tokens"],
            query=form.cleaned_data["query"],
        )
    context = {"session": session, "context_form": form, "preview": preview}
    if htmx_partial(request):
        return render(request, "context/partials/preview.html", context)
    return render(request, "context/page.html", context)
