"""Serializer fields shared by every app's API."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers instead of silently turning 5.5 into "5.5":
    ids and text that arrive with the wrong type are a client bug worth reporting."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)
