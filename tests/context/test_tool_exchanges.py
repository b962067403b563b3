"""Tool calls in the context: a call and its results are shown together or not at all, so
`format=messages` never starts with a result whose call was cut (by max_messages or by the
budget) and never ends with a call waiting for its results; the Markdown transcript is cut at
the same places."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryhub.context import (
    AssembledContext,
    Budget,
    ContextInputs,
    FactItem,
    MemoryItem,
    MessageItem,
    SummaryItem,
    assemble_context,
    render,
    render_markdown,
    render_messages,
)
from memoryhub.context.assemble import BUDGET, DISPLACED, INCOMPLETE_EXCHANGE, MAX_MESSAGES
from memoryhub.core.tokens import count_tokens
from tests.context.sendable import assert_sendable

TODAY = dt.date(2026, 2, 10)


def words(text: str) -> int:
    return len(text.split())


def seams_cost_extra(text: str) -> int:
    # Not additive: blank lines, which only appear where two pieces meet, cost extra, so the
    # final repair gives back claims (down to messages when nothing else was claimed).
    return len(text.split()) + 5 * text.count("\n\n")


def tool_call(call_id: str, name: str = "look") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def call(seq: int, *ids: str, content: str = "") -> MessageItem:
    return MessageItem(seq, "assistant", content, tool_calls=[tool_call(i) for i in ids])


def result(seq: int, call_id: str, content: str = "ok") -> MessageItem:
    return MessageItem(seq, "tool", content, tool_call_id=call_id)


def say(seq: int, role: str = "user", content: str = "hello there") -> MessageItem:
    return MessageItem(seq, role, content)


def assemble(
    messages: list[MessageItem],
    budget: Budget | None = None,
    *,
    earlier: bool = False,
    counter: Callable[[str], int] = words,
    **extra: Any,
) -> AssembledContext:
    inputs = ContextInputs(today=TODAY, messages=messages, earlier_messages_exist=earlier, **extra)
    return assemble_context(inputs=inputs, budget=budget or Budget(), count_tokens=counter)


def dropped(context: AssembledContext) -> list[tuple[str, str]]:
    (report,) = [r for r in context.sections if r.name == "messages"]
    return report.dropped


def seqs(context: AssembledContext) -> list[int]:
    return [m.seq for m in context.messages]


# -- examples ---------------------------------------------------------------------------------


def test_results_whose_call_was_cut_by_max_messages_are_left_out_with_it() -> None:
    messages = [say(1), call(2, "a", "b"), result(3, "a"), result(4, "b"), say(5, "assistant")]

    context = assemble(messages, Budget(max_messages=3))

    assert seqs(context) == [5]
    assert dropped(context) == [
        ("message:4", MAX_MESSAGES),
        ("message:3", MAX_MESSAGES),
        ("message:2", MAX_MESSAGES),
        ("message:1", MAX_MESSAGES),
    ]
    assert render_messages(context) == [{"role": "assistant", "content": "hello there"}]


def test_results_at_the_start_of_the_gathered_tail_go_with_their_older_call() -> None:
    # The gather read the last messages only: the call is older than what it read.
    context = assemble([result(7, "a"), result(8, "b"), say(9)], earlier=True)

    assert seqs(context) == [9]
    assert dropped(context) == [("message:8", MAX_MESSAGES), ("message:7", MAX_MESSAGES)]


def test_an_exchange_that_does_not_fit_whole_is_left_out_whole() -> None:
    messages = [say(1), call(2, "a"), result(3, "a", "x " * 40), say(4, "assistant"), say(5)]
    header = words(render.section_header("messages"))
    frame = words(render.OPEN) + words(render.CLOSE) + render.MESSAGE_OVERHEAD
    # Room for the last two messages and the call, not for its result too.
    budget = Budget(max_tokens=frame + header + 2 * (render.MESSAGE_OVERHEAD + 2) + 30)

    context = assemble(messages, budget)

    assert seqs(context) == [4, 5]
    assert dropped(context) == [
        ("message:3", BUDGET),
        ("message:2", BUDGET),
        ("message:1", BUDGET),
    ]


def test_a_call_still_waiting_for_its_results_is_not_sent() -> None:
    messages = [say(1), call(2, "a", "b", content="Let me look."), result(3, "a")]

    context = assemble(messages)

    assert seqs(context) == [1]
    assert dropped(context) == [
        ("message:3", INCOMPLETE_EXCHANGE),
        ("message:2", INCOMPLETE_EXCHANGE),
    ]
    assert render_messages(context) == [{"role": "user", "content": "hello there"}]


def test_an_unanswered_call_in_the_middle_and_a_stray_result_are_left_out() -> None:
    # A bot that crashed between its call and the results, and one that stored a result alone.
    messages = [say(1), call(2, "a"), say(3), result(4, "z"), say(5, "assistant")]

    context = assemble(messages)

    assert seqs(context) == [1, 3, 5]
    assert dropped(context) == [
        ("message:4", INCOMPLETE_EXCHANGE),
        ("message:2", INCOMPLETE_EXCHANGE),
    ]
    assert_sendable(render_messages(context))


def test_the_summary_displaces_whole_exchanges() -> None:
    messages = [call(1, "a"), result(2, "a"), say(3), say(4, "assistant")]
    header = words(render.section_header("messages"))
    frame = words(render.OPEN) + words(render.CLOSE) + render.MESSAGE_OVERHEAD
    # The call: overhead + its calls as one JSON word; the result: overhead + "ok" + its id;
    # the two text messages: overhead + two words each. Exactly full.
    charges = [render.MESSAGE_OVERHEAD + 1, render.MESSAGE_OVERHEAD + 2]
    exact = frame + header + sum(charges) + 2 * (render.MESSAGE_OVERHEAD + 2)
    summary = SummaryItem(" ".join(["s"] * 6), through_seq=0)

    context = assemble(messages, Budget(max_tokens=exact), earlier=True, summary=summary)

    assert context.summary == summary
    assert seqs(context) == [3, 4]
    assert dropped(context) == [("message:1", DISPLACED), ("message:2", DISPLACED)]


# -- the property -----------------------------------------------------------------------------

_words = st.integers(min_value=0, max_value=120).map(lambda n: " ".join(["word"] * n))


@st.composite
def _conversation(draw: st.DrawFn) -> list[MessageItem]:
    """A well-formed conversation (every call answered at once, its results in any order, text
    in between), possibly ending with a call whose results are not all there yet."""
    messages: list[MessageItem] = []

    def add(role: str, content: str, call_id: str = "", calls: Any = None) -> None:
        messages.append(MessageItem(len(messages) + 1, role, content, "", call_id, calls))

    def exchange(answered: Callable[[list[str]], list[str]]) -> None:
        ids = [f"call_{len(messages)}_{i}" for i in range(draw(st.integers(1, 3)))]
        add(
            "assistant",
            draw(st.sampled_from(["", "Let me check."])),
            calls=[tool_call(i, "f") for i in ids],
        )
        for call_id in answered(draw(st.permutations(ids))):
            add("tool", draw(_words), call_id)

    for kind in draw(st.lists(st.sampled_from(["user", "assistant", "tools"]), max_size=30)):
        if kind == "tools":
            exchange(lambda ids: ids)
        else:
            add(kind, draw(_words))
    if draw(st.booleans()):  # the bot asks for the context while its tools still run
        exchange(lambda ids: ids[: draw(st.integers(0, len(ids) - 1))])
    return messages


def _whole_exchanges(window: list[MessageItem]) -> list[MessageItem]:
    """What may be sent of a window of a well-formed conversation: without the results at its
    start (their call is older) and without a last call still waiting."""
    start = 0
    while start < len(window) and window[start].role == "tool":
        start += 1
    kept = window[start:]
    for position in range(len(kept) - 1, -1, -1):
        if kept[position].tool_calls:
            answered = {m.tool_call_id for m in kept[position + 1 :]}
            if {c["id"] for c in kept[position].tool_calls or []} - answered:
                kept = kept[:position]
            break
    return kept


@pytest.mark.slow
@pytest.mark.parametrize(
    "counter", [words, count_tokens, seams_cost_extra], ids=["words", "tiktoken", "seams"]
)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    conversation=_conversation(),
    data=st.data(),
    max_tokens=st.integers(min_value=200, max_value=6000),
    max_messages=st.integers(min_value=0, max_value=30),
    with_summary=st.booleans(),
    with_memories=st.booleans(),
)
def test_no_orphaned_result_and_no_unanswered_call_for_any_budget(
    counter: Callable[[str], int],
    conversation: list[MessageItem],
    data: st.DataObject,
    max_tokens: int,
    max_messages: int,
    with_summary: bool,
    with_memories: bool,
) -> None:
    # The gather reads the last messages only: the window may start inside an exchange.
    start = data.draw(st.integers(min_value=0, max_value=len(conversation)))
    window = conversation[start:]
    context = assemble(
        window,
        Budget(max_tokens=max_tokens, max_messages=max_messages),
        earlier=start > 0,
        counter=counter,
        summary=SummaryItem("They talked " * 30, 0) if with_summary else None,
        user_memories=[MemoryItem("m", "likes tea " * 20)] if with_memories else [],
        facts=[FactItem(1, "drinks coffee " * 10, 1.0)] if with_memories else [],
    )

    rendered = render_messages(context)
    assert_sendable(rendered)
    conversation_part = [m for m in rendered if m["role"] != "system"]
    assert conversation_part == [render.message_dict(m) for m in context.messages]
    # The Markdown transcript holds the same messages, so it is cut at the same places.
    markdown = render_markdown(context)
    transcript = "".join(render.transcript_line(m) for m in context.messages)
    if context.messages:
        assert markdown.endswith(f"{render.section_header('messages')}{transcript}</memory>")
    # Without holes: the newest whole exchanges, within max_messages.
    sendable = _whole_exchanges(window[max(len(window) - max_messages, 0) :])
    assert context.messages == sendable[len(sendable) - len(context.messages) :]
    assert len(context.messages) <= max_messages
    # Every message is accounted for, once.
    (report,) = [r for r in context.sections if r.name == "messages"]
    labels = report.included + [label for label, _ in report.dropped]
    assert sorted(labels) == sorted(f"message:{m.seq}" for m in window)
    assert max(context.markdown_tokens, context.messages_tokens) <= max_tokens
