"""The badge the pages show on stored text holding redaction placeholders (`[redacted:email]`)."""

from __future__ import annotations

from collections import Counter

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from memoryhub.core.redaction import placeholders_in

register = template.Library()


@register.filter
def redaction_badge(text: object) -> SafeString | str:
    """A badge naming the classes masked in `text` (with a count past one), or "" when none."""
    if not isinstance(text, str):
        return ""
    found = Counter(placeholders_in(text))
    if not found:
        return ""
    label = ", ".join(
        kind if count == 1 else f"{kind} ({count})" for kind, count in sorted(found.items())
    )
    return format_html(
        '<span class="badge badge-redacted" data-testid="redacted-badge" '
        'title="Masked by the memory policy\'s redaction">redacted: {}</span>',
        label,
    )
