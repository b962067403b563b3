"""What an OpenAI-compatible chat API accepts of a conversation's tool calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def assert_sendable(messages: Sequence[Mapping[str, Any]]) -> None:
    """Every tool result answers a call of the message with `tool_calls` right before it (the
    results of one call in a row, one per call), and every call is answered before anything
    else is said: no orphaned result, no unanswered call, at the start, in the middle or at
    the end."""
    waiting: set[str] = set()  # the calls of the last message with tool_calls not answered yet
    answerable = False  # whether a tool result may come now
    for position, message in enumerate(messages):
        if message["role"] == "tool":
            assert answerable, f"message {position}: a tool result without its call"
            assert message.get("tool_call_id") in waiting, (
                f"message {position}: a tool result for no waiting call"
            )
            waiting.discard(message["tool_call_id"])
            continue
        assert not waiting, f"message {position}: calls {sorted(waiting)} were not answered"
        calls = message.get("tool_calls") or []
        ids = [call.get("id") for call in calls]
        assert len(set(ids)) == len(ids), f"message {position}: a call id twice"
        waiting = set(ids)
        answerable = bool(calls)
    assert not waiting, f"the last calls {sorted(waiting)} were not answered"
