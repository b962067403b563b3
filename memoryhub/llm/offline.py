"""The fallback when no LLM is configured: an extractive summary, built without any network.

Deterministic (same input, same output) so that re-running a summarization task writes the
same text. It keeps the previous summary and adds the first sentence of each newer user and
assistant message; when that passes the budget, the oldest lines go first, because a rolling
summary should remember what happened most recently.
"""

from __future__ import annotations

import re

from memoryhub.core.tokens import count_tokens
from memoryhub.llm.types import ChatMessage

# A first "sentence" with no punctuation can be a whole pasted document; cap it.
LINE_MAX_CHARS = 240
_ROLE_LABELS = {"user": "User", "assistant": "Assistant"}
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_WHITESPACE = re.compile(r"\s+")


def _first_sentence(text: str) -> str:
    flat = _WHITESPACE.sub(" ", text).strip()
    sentence = _SENTENCE_END.split(flat, maxsplit=1)[0]
    if len(sentence) <= LINE_MAX_CHARS:
        return sentence
    cut = sentence[:LINE_MAX_CHARS].rsplit(" ", 1)[0] or sentence[:LINE_MAX_CHARS]
    return cut.rstrip(" ,;:") + "…"


def _cut_to_tokens(text: str, *, max_tokens: int) -> str:
    """The longest word prefix of `text` within `max_tokens` (binary search: counting is cheap,
    but not free, and a line can be long)."""
    words = text.split(" ")
    low, high = 0, len(words)
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(" ".join(words[:middle]) + "…") <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low]) + "…" if low else ""


def offline_summary(
    *, previous_summary: str, messages: list[ChatMessage], max_tokens: int = 600
) -> str:
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, not {max_tokens}.")
    lines = [line.strip() for line in previous_summary.splitlines() if line.strip()]
    seen = set(lines)
    for message in messages:
        label = _ROLE_LABELS.get(message.role)
        if label is None:
            continue  # system prompts and tool output are not what the conversation was about
        sentence = _first_sentence(message.content)
        if not sentence:
            continue
        line = f"- {label}: {sentence}"
        if line not in seen:  # "ok", "thanks" and other repeats add nothing
            seen.add(line)
            lines.append(line)

    # Drop the oldest lines until the rest fits. Per-line counts plus one per newline are close
    # to the joined count; the loop below checks the real count and keeps dropping if not.
    costs = [count_tokens(line) + 1 for line in lines]
    total = sum(costs)
    start = 0
    while start < len(lines) - 1 and total > max_tokens:
        total -= costs[start]
        start += 1
    kept = lines[start:]
    summary = "\n".join(kept)
    while len(kept) > 1 and count_tokens(summary) > max_tokens:
        kept = kept[1:]
        summary = "\n".join(kept)
    if count_tokens(summary) > max_tokens:
        summary = _cut_to_tokens(summary, max_tokens=max_tokens)
    return summary
