"""The extractive fallback summary: deterministic, within budget, no network."""

import pytest

from memoryhub.core.tokens import count_tokens
from memoryhub.llm import ChatMessage
from memoryhub.llm.offline import offline_summary

CONVERSATION = [
    ChatMessage(role="system", content="You are a helpful bot."),
    ChatMessage(role="user", content="I moved to Berlin last month. The weather is awful."),
    ChatMessage(role="assistant", content="Welcome to Berlin! Want some indoor tips?"),
    ChatMessage(role="tool", content='{"weather": "rain"}'),
    ChatMessage(role="user", content="Yes please, I like museums and jazz."),
]


def test_it_keeps_the_first_sentence_of_each_user_and_assistant_message():
    summary = offline_summary(previous_summary="", messages=CONVERSATION)

    assert summary == (
        "- User: I moved to Berlin last month.\n"
        "- Assistant: Welcome to Berlin!\n"
        "- User: Yes please, I like museums and jazz."
    )


def test_it_builds_on_the_previous_summary():
    summary = offline_summary(
        previous_summary="  - User: My name is Ada.\n\n", messages=CONVERSATION[1:2]
    )

    assert summary == "- User: My name is Ada.\n- User: I moved to Berlin last month."


def test_it_is_deterministic():
    first = offline_summary(previous_summary="Earlier: talked about cats.", messages=CONVERSATION)

    assert (
        offline_summary(previous_summary="Earlier: talked about cats.", messages=CONVERSATION)
        == first
    )


def test_it_drops_the_oldest_lines_to_stay_within_the_budget():
    messages = [
        ChatMessage(role="user", content=f"Message number {n} is about topic {n}.")
        for n in range(200)
    ]

    summary = offline_summary(
        previous_summary="Old summary line.", messages=messages, max_tokens=60
    )

    assert count_tokens(summary) <= 60
    assert summary.endswith("- User: Message number 199 is about topic 199.")
    assert "Old summary line." not in summary


def test_it_cuts_a_single_long_line_to_the_budget():
    long_sentence = " ".join(["word"] * 400)  # no full stop: one enormous "sentence"

    summary = offline_summary(previous_summary=long_sentence, messages=[], max_tokens=20)

    assert 0 < count_tokens(summary) <= 20
    assert summary.endswith("…")


def test_it_skips_repeated_lines():
    messages = [ChatMessage(role="user", content="ok"), ChatMessage(role="user", content="ok")]

    assert offline_summary(previous_summary="", messages=messages) == "- User: ok"


def test_a_budget_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        offline_summary(previous_summary="", messages=CONVERSATION, max_tokens=0)
