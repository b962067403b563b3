"""Page forms of semantic memory: the fact part of the search page's filters.

The same filters as `GET /api/v1/facts/search/` (facts_app.api.facts), as a Django form: the
person, tags, metadata `key=value`, a created range, "as it stood then" and superseded facts.
`fact_filters()` turns the cleaned form into the selector's FactFilters.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from django import forms
from django.utils import timezone

from facts_app.selectors.facts import FactFilters
from memoryhub.accounts.models import END_USER_ID_MAX_LENGTH

TOP_K_DEFAULT = 10
TOP_K_MAX = 100  # what the API allows
TAG_MAX_LENGTH = 64
TAGS_MAX = 32
METADATA_MAX = 16
METADATA_ITEM = re.compile(r"^[A-Za-z0-9_.\-]{1,64}=.{0,256}$")


def _day_start(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


class FactFilterForm(forms.Form):
    """The query and the filters facts can be narrowed by. All optional: an empty query is the
    page before a search, not an error."""

    q = forms.CharField(
        label="Search for",
        required=False,
        max_length=1000,
        strip=True,
        widget=forms.TextInput(attrs={"type": "search", "autocomplete": "off"}),
    )
    top_k = forms.IntegerField(
        label="Best",
        required=False,
        min_value=1,
        max_value=TOP_K_MAX,
        help_text=f"Hits per kind, 1-{TOP_K_MAX}.",
        widget=forms.NumberInput(attrs={"min": 1, "max": TOP_K_MAX, "placeholder": TOP_K_DEFAULT}),
    )
    user_id = forms.CharField(
        label="Person (user id)", required=False, max_length=END_USER_ID_MAX_LENGTH
    )
    tags = forms.CharField(
        label="Tags",
        required=False,
        max_length=TAGS_MAX * (TAG_MAX_LENGTH + 2),
        help_text="Comma-separated; a fact must have all of them.",
    )
    metadata = forms.CharField(
        label="Metadata",
        required=False,
        help_text="key=value, one per line; all must match.",
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    created_after = forms.DateField(
        label="Created from", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    created_before = forms.DateField(
        label="Created until",
        required=False,
        help_text="Inclusive.",
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    valid_at = forms.DateTimeField(
        label="As it stood at",
        required=False,
        help_text="Facts true at that moment, including ones replaced since.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    include_superseded = forms.BooleanField(label="Include superseded facts", required=False)

    def clean_q(self) -> str:
        value: str = self.cleaned_data.get("q") or ""
        if "\x00" in value:
            raise forms.ValidationError("The query may not contain NUL characters.")
        return value

    def clean_user_id(self) -> str:
        value: str = self.cleaned_data.get("user_id") or ""
        if "\x00" in value:
            raise forms.ValidationError("A user id has no NUL characters.")
        return value

    def clean_tags(self) -> tuple[str, ...]:
        raw: str = self.cleaned_data.get("tags") or ""
        tags = tuple(dict.fromkeys(tag.strip() for tag in raw.split(",") if tag.strip()))
        if len(tags) > TAGS_MAX:
            raise forms.ValidationError(f"At most {TAGS_MAX} tags.")
        too_long = [tag for tag in tags if len(tag) > TAG_MAX_LENGTH or "\x00" in tag]
        if too_long:
            raise forms.ValidationError(
                f"A tag is at most {TAG_MAX_LENGTH} characters (without NUL): {too_long[0][:80]}"
            )
        return tags

    def clean_metadata(self) -> tuple[tuple[str, str], ...]:
        raw: str = self.cleaned_data.get("metadata") or ""
        lines = [line.strip() for line in raw.splitlines() if line.strip()]
        if len(lines) > METADATA_MAX:
            raise forms.ValidationError(f"At most {METADATA_MAX} key=value lines.")
        pairs = []
        for line in lines:
            if not METADATA_ITEM.match(line) or "\x00" in line:
                raise forms.ValidationError(
                    "Each line is key=value: a key of 1-64 letters, digits, _ . or -, "
                    f"and a value of at most 256 characters. Not: {line[:80]}"
                )
            key, _, value = line.partition("=")
            pairs.append((key, value))
        return tuple(pairs)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        after, before = data.get("created_after"), data.get("created_before")
        if after and before and after > before:
            self.add_error("created_before", "Must not be before “Created from”.")
        return data

    def top_k_value(self) -> int:
        return int(self.cleaned_data.get("top_k") or TOP_K_DEFAULT)

    def fact_filters(self) -> FactFilters:
        data = self.cleaned_data
        before: dt.date | None = data.get("created_before")
        after: dt.date | None = data.get("created_after")
        return FactFilters(
            user_id=data.get("user_id") or None,
            tags=data.get("tags") or (),
            metadata=data.get("metadata") or (),
            created_after=_day_start(after) if after else None,
            created_before=_day_start(before + dt.timedelta(days=1)) if before else None,
            valid_at=data.get("valid_at"),
            include_superseded=bool(data.get("include_superseded")),
        )

    def fact_filters_used(self) -> bool:
        """Whether any fact-only filter is set (the page opens the filters then)."""
        data: dict[str, Any] = getattr(self, "cleaned_data", {})
        names = ("tags", "metadata", "created_after", "created_before", "valid_at")
        return any(data.get(name) for name in names) or bool(data.get("include_superseded"))
