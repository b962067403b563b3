"""`{% context_preview_panel session %}`: the session page's lazily loaded context preview.

A tag rather than a form passed by the session page, so the sessions app needs to know nothing of
the context wing that stands on it."""

from __future__ import annotations

from typing import Any

from django import template

from memoryhub.context.forms import ContextPreviewForm

register = template.Library()


@register.inclusion_tag("context/partials/preview.html")
def context_preview_panel(session: Any) -> dict[str, Any]:
    return {
        "session": session,
        "context_form": ContextPreviewForm(),
        "lazy": True,
        "preview": None,
    }
