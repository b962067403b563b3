"""Serializer fields shared by every app's API."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers instead of silently turning 5.5 into "5.5":
    ids and text that arrive with the wrong type are a client bug worth reporting."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictUUIDField(serializers.UUIDField):
    """A UUIDField that takes only strings: DRF would read `0` or `false` as the nil UUID."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


# Query strings read without a serializer (a hot endpoint's usual call): these say whether a value
# is one the serializer's field takes as it is. None sends the request to the serializer, so what
# it accepts, and every 400 it answers, stays its own.
_PLAIN_INTEGER = re.compile(r"[0-9]{1,7}")


def plain_text(value: str, *, max_length: int, allow_blank: bool) -> str | None:
    """What a (trimming) StrictCharField makes of this text, or None when it would refuse it or
    the serializer should decide: blank where not allowed, too long, a NUL character or a lone
    surrogate (which cannot be encoded)."""
    text = value.strip()
    if (not text and not allow_blank) or len(text) > max_length or "\x00" in text:
        return None
    try:
        text.encode()
    except UnicodeEncodeError:
        return None
    return text


def plain_integer(value: str, *, low: int, high: int) -> int | None:
    """An IntegerField's value in [low, high] for plain digits, else None."""
    if not _PLAIN_INTEGER.fullmatch(value):
        return None
    number = int(value)
    return number if low <= number <= high else None
