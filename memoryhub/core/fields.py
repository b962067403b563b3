"""Serializer fields shared by every app's API."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple, cast, get_args

from rest_framework import serializers

from memoryhub.core.recall import Mode
from memoryhub.core.search import MAX_QUERY_CHARS


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


class PlainSearch(NamedTuple):
    query: str
    user_id: str | None
    top_k: int
    mode: Mode


# A person's search the way nearly every call sends it: these four parameters, no other. Their
# serializers cost ~0.5-0.8 ms a search.
_PLAIN_SEARCH_PARAMETERS = frozenset({"q", "user_id", "top_k", "mode"})
_MODES = frozenset(get_args(Mode))


def plain_search(params: Mapping[str, str], *, user_id_max_length: int) -> PlainSearch | None:
    """q, user_id, top_k (1-100, default 10) and mode (default hybrid) of a search's query
    string whose serializer would take each value as it is, else None (another parameter, a
    value out of range or of another shape, text it refuses, semantic without a person). A
    repeated parameter counts by its last value, as for the serializer."""
    if not _PLAIN_SEARCH_PARAMETERS.issuperset(params):
        return None
    query = plain_text(params.get("q", ""), max_length=MAX_QUERY_CHARS, allow_blank=False)
    if query is None:
        return None
    user_id: str | None = None
    if "user_id" in params:
        user_id = plain_text(
            params.get("user_id", ""), max_length=user_id_max_length, allow_blank=False
        )
        if user_id is None:
            return None
    top_k = 10
    if "top_k" in params:
        given = plain_integer(params.get("top_k", ""), low=1, high=100)
        if given is None:
            return None
        top_k = given
    mode = params.get("mode", "hybrid")
    if mode not in _MODES or (mode == "semantic" and user_id is None):
        return None
    return PlainSearch(query=query, user_id=user_id, top_k=top_k, mode=cast(Mode, mode))
