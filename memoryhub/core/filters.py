"""django-filter pieces shared by every app's API."""

from __future__ import annotations

import datetime as dt
from typing import Any

import django_filters  # type: ignore[import-untyped]  # ships no type hints
from django import forms
from django_filters.fields import IsoDateTimeField  # type: ignore[import-untyped]


class UtcIsoDateTimeField(IsoDateTimeField):
    """ISO 8601 in, UTC out. PostgreSQL refuses UTC offsets beyond ±15:59 (which ISO 8601 and
    Python allow), so an odd offset would otherwise reach the database and fail there."""

    def to_python(self, value: Any) -> dt.datetime | None:
        parsed: dt.datetime | None = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(dt.UTC)
        except OverflowError:
            raise forms.ValidationError(
                "This date and time is out of range.", code="invalid"
            ) from None


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField
