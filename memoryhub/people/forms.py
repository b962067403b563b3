"""Forms of the end-user pages: the people search and the memory forms.

Memory keys and content are checked by the API's own rules (facts_app/api/memories.py:
`validated_memory_key` and `MemoryInputSerializer`), so a page and a bot are refused for the same
things with the same words.
"""

from __future__ import annotations

from typing import Any

from django import forms
from rest_framework import serializers

from facts_app.api.memories import MemoryInputSerializer, validated_memory_key
from facts_app.models import MEMORY_KEY_MAX_LENGTH

SEARCH_MAX_LENGTH = 255


def _messages(detail: Any) -> list[str]:
    """DRF's error detail (a list, or a dict of lists) as plain messages."""
    if isinstance(detail, dict):
        return [message for value in detail.values() for message in _messages(value)]
    if isinstance(detail, list):
        return [message for item in detail for message in _messages(item)]
    return [str(detail)]


class PeopleSearchForm(forms.Form):
    q = forms.CharField(
        label="Search by id or name",
        required=False,
        max_length=SEARCH_MAX_LENGTH,
        widget=forms.TextInput(
            attrs={"type": "search", "id": "people-q", "placeholder": "whatsapp:+49…"}
        ),
    )


class MemoryEditForm(forms.Form):
    """A memory's text and whether it is pinned (the key is the memory's name: fixed)."""

    content = forms.CharField(
        label="Content",
        strip=False,  # as the API: what is typed is what is kept
        widget=forms.Textarea(attrs={"rows": 5, "id": "memory-content"}),
    )
    pinned = forms.BooleanField(
        label="Pinned (never removed by retention)",
        required=False,
        widget=forms.CheckboxInput(attrs={"id": "memory-pinned"}),
    )

    def clean_content(self) -> str:
        content: str = self.cleaned_data["content"]
        checked = MemoryInputSerializer(data={"content": content})
        if not checked.is_valid():
            raise forms.ValidationError(_messages(checked.errors.get("content", checked.errors)))
        return content


class MemoryCreateForm(MemoryEditForm):
    key = forms.CharField(
        label="Key",
        strip=False,
        help_text=(
            f"Lowercase: a letter, then letters, digits or _ (at most {MEMORY_KEY_MAX_LENGTH})."
        ),
        widget=forms.TextInput(
            attrs={"id": "memory-key", "autocomplete": "off", "spellcheck": "false"}
        ),
    )

    field_order = ["key", "content", "pinned"]

    def clean_key(self) -> str:
        key: str = self.cleaned_data["key"]
        try:
            return validated_memory_key(key)
        except serializers.ValidationError as error:
            raise forms.ValidationError(_messages(error.detail)) from None


class MemoryPinForm(forms.Form):
    """Pin or unpin: a hidden `pinned` of "true" or "false"."""

    pinned = forms.BooleanField(required=False)
