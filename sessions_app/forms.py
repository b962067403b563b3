"""Page forms for sessions: the list's filters."""

from __future__ import annotations

from typing import Any

from django import forms

from memoryhub.accounts.models import END_USER_ID_MAX_LENGTH
from memoryhub.core.search import MAX_QUERY_CHARS
from sessions_app.models import AGENT_ID_MAX_LENGTH


class SessionFilterForm(forms.Form):
    """GET filters of the session list; every field optional."""

    q = forms.CharField(
        label="Text",
        required=False,
        max_length=MAX_QUERY_CHARS,
        strip=True,
        help_text="A word from the conversation.",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "a word said in it"}),
    )
    user_id = forms.CharField(
        label="User id", required=False, max_length=END_USER_ID_MAX_LENGTH, strip=True
    )
    agent_id = forms.CharField(
        label="Agent id", required=False, max_length=AGENT_ID_MAX_LENGTH, strip=True
    )
    active_from = forms.DateField(
        label="Active from", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    active_to = forms.DateField(
        label="Active to",
        required=False,
        help_text="Inclusive.",
        widget=forms.DateInput(attrs={"type": "date"}),
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        start, end = cleaned.get("active_from"), cleaned.get("active_to")
        if start and end and start > end:
            self.add_error("active_to", "Must be on or after “Active from”.")
        return cleaned
