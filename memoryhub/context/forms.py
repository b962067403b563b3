"""The context preview's form: the context endpoint's query parameters, bounded alike."""

from __future__ import annotations

from django import forms

from memoryhub.context.api import (
    FACTS_MAX_TOKENS_RANGE,
    MAX_FACTS_RANGE,
    MAX_MESSAGES_RANGE,
    MAX_TOKENS_RANGE,
)
from memoryhub.core.search import MAX_QUERY_CHARS


class ContextPreviewForm(forms.Form):
    """The context endpoint's query parameters, bounded as the API bounds them; an empty field
    takes the tenant's memory-policy default, as an absent parameter does."""

    max_tokens = forms.IntegerField(
        label="Max tokens",
        required=False,
        min_value=MAX_TOKENS_RANGE[0],
        max_value=MAX_TOKENS_RANGE[1],
        help_text=f"{MAX_TOKENS_RANGE[0]}-{MAX_TOKENS_RANGE[1]}; empty: the policy's default.",
    )
    max_messages = forms.IntegerField(
        label="Max messages",
        required=False,
        min_value=MAX_MESSAGES_RANGE[0],
        max_value=MAX_MESSAGES_RANGE[1],
        help_text=f"{MAX_MESSAGES_RANGE[0]}-{MAX_MESSAGES_RANGE[1]}; empty: the policy's default.",
    )
    max_facts = forms.IntegerField(
        label="Max facts",
        required=False,
        min_value=MAX_FACTS_RANGE[0],
        max_value=MAX_FACTS_RANGE[1],
        help_text=f"{MAX_FACTS_RANGE[0]}-{MAX_FACTS_RANGE[1]}; empty: 10.",
    )
    facts_max_tokens = forms.IntegerField(
        label="Facts' max tokens",
        required=False,
        min_value=FACTS_MAX_TOKENS_RANGE[0],
        max_value=FACTS_MAX_TOKENS_RANGE[1],
        help_text="The facts' own share of max tokens; empty: no share of their own.",
    )
    query = forms.CharField(
        label="Query",
        required=False,
        max_length=MAX_QUERY_CHARS,
        help_text=(
            "Picks the relevant facts and earlier turns; empty: the latest user message does."
        ),
    )
