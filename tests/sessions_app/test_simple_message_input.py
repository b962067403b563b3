"""The fast validations of an append's body and a read's `?last=` (api.serializers:
simple_message_input, last_only_query) are the serializers' for what they take, and leave
everything else (and so every error) to the serializers."""

from __future__ import annotations

import itertools
from typing import Any

from django.http import QueryDict

from memoryhub.core.limits import limit
from sessions_app.api.serializers import (
    MessageInputSerializer,
    MessageListQuerySerializer,
    last_only_query,
    simple_message_input,
)

VALUES: list[Any] = [
    "user",
    "assistant",
    "system",
    "tool",
    "USER",
    "",
    " ",
    " hi\n",
    "\x00a",
    "a\ud800",
    "é🙂",
    5,
    5.5,
    None,
    True,
    [],
    {},
    ["a"],
]


def _bodies() -> list[Any]:
    bodies: list[Any] = [[], "user", None]
    for role, content in itertools.product(VALUES, VALUES):
        bodies += [
            {"role": role, "content": content},
            {"role": role},
            {"content": content},
            {"role": role, "content": content, "name": ""},
            {"role": role, "content": content, "metadata": {}},
        ]
    return bodies


def test_the_fast_path_is_the_serializer_or_steps_aside() -> None:
    taken = 0
    for body in _bodies():
        fast = simple_message_input(body)
        if fast is None:
            continue
        taken += 1
        serializer = MessageInputSerializer(data=body)
        assert serializer.is_valid(), (body, serializer.errors)
        validated = dict(serializer.validated_data)
        assert validated == fast
        assert list(validated) == list(fast)
        assert [type(v) for v in validated.values()] == [type(v) for v in fast.values()]
    assert taken == 3 * 8  # the three roles x every non-empty, storable string of VALUES


def test_the_usual_bodies_take_the_fast_path() -> None:
    for role in ("user", "assistant", "system"):
        assert simple_message_input({"role": role, "content": "Hi!"}) is not None


def test_content_over_the_size_limit_is_left_to_the_serializer() -> None:
    maximum = limit("MESSAGE_CONTENT_MAX_BYTES")
    assert simple_message_input({"role": "user", "content": "é" * (maximum // 2)}) is not None
    body = {"role": "user", "content": "é" * (maximum // 2 + 1)}
    assert simple_message_input(body) is None
    serializer = MessageInputSerializer(data=body)
    assert not serializer.is_valid()
    assert serializer.errors["content"][0].code == "too_large"


def test_the_last_only_read_is_the_serializer_or_steps_aside() -> None:
    maximum = limit("MESSAGES_READ_MAX")
    strings = [
        "last=20",
        "last=1",
        f"last={maximum}",
        f"last={maximum + 1}",
        "last=0",
        "last=020",
        "last=-5",
        "last=+5",
        "last=2_0",
        "last=20.0",
        "last= 20",
        "last=",
        "last=abc",
        "last=5&last=abc",
        "last=abc&last=5",
        "last=5&limit=3",
        "after_seq=3",
        "limit=5",
        "",
        "last=99999999999999999999",
    ]
    taken = 0
    for string in strings:
        query = QueryDict(string)
        fast = last_only_query(query)
        if fast is None:
            continue
        taken += 1
        serializer = MessageListQuerySerializer(data=query)
        assert serializer.is_valid(), (string, serializer.errors)
        assert dict(serializer.validated_data) == fast
    assert taken == 4  # last=20, last=1, last=<maximum>, last=abc&last=5
