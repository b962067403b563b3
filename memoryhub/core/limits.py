"""Size limits, read from settings.MEMORYHUB_LIMITS so they are configurable per deployment."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework import serializers


def limit(name: str) -> int:
    return int(settings.MEMORYHUB_LIMITS[name])


def json_size_bytes(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def validate_json_size(value: Any, *, limit_name: str, what: str) -> Any:
    maximum = limit(limit_name)
    if json_size_bytes(value) > maximum:
        raise serializers.ValidationError(
            f"{what} is larger than {maximum} bytes when encoded as JSON.", code="too_large"
        )
    return value


def validate_text_size(value: str, *, limit_name: str, what: str) -> str:
    maximum = limit(limit_name)
    if len(value.encode("utf-8")) > maximum:
        raise serializers.ValidationError(
            f"{what} is larger than {maximum} bytes (UTF-8).", code="too_large"
        )
    return value


def _walk_strings(value: Any) -> Any:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _walk_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk_strings(item)


def validate_json_value(value: Any, *, limit_name: str, what: str) -> Any:
    """Refuse what the databases cannot store (NUL, lone surrogates) and what is too big."""
    for text in _walk_strings(value):
        if "\x00" in text:
            raise serializers.ValidationError(
                f"{what} contains a NUL character.", code="null_characters_not_allowed"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise serializers.ValidationError(
                f"{what} contains text that is not valid Unicode.", code="invalid_unicode"
            ) from None
    return validate_json_size(value, limit_name=limit_name, what=what)
