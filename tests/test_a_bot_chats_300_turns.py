"""Issue 4's "done when", end to end through the API: a bot chats 300 turns the way bots do
(append the user's message, ask for the context, append its reply). The LLM is a real local
chat-completions server; summaries and extraction run as Celery tasks (eagerly here, after each
commit, as a worker would; tests/sessions_app/test_summaries_worker*.py run a real worker).

Every context fits its budget; by the end it holds a summary of the early conversation (which
is no longer there verbatim), the person's memories, and the fact that answers the last
question — a fact the extraction task took from turn 3.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from facts_app.models import Fact
from memoryhub.core.tokens import count_tokens
from memoryhub.llm.prompts import EXTRACTION_SYSTEM_PROMPT
from sessions_app.models import Session, Summary

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TURNS = 300
BUDGET = 1500
FIRST_WORDS = "Hi! I'm planning a vegetable garden on my balcony in Lisbon."
FAVOURITE = "By the way, my favourite colour is teal."
LAST_QUESTION = "Which colour should I paint the kitchen, given my favourite colour?"


def _tagged_json(prompt: str, tag: str) -> Any:
    found = re.search(rf"<{tag}>\n(.*)\n</{tag}>", prompt, re.DOTALL)
    return json.loads(found[1]) if found else None


def plausible_llm(messages: list[dict[str, Any]]) -> str:
    """Answers the two prompts MemoryHub sends the way a model would, deterministically: a
    summary keeps the previous summary's opening plus the first new user message; extraction
    turns "my favourite X is Y" into a fact."""
    system, prompt = messages[0]["content"], messages[-1]["content"]
    conversation = _tagged_json(prompt, "conversation") or []
    user_lines = [m["content"] for m in conversation if m["role"] == "user"]
    if system == EXTRACTION_SYSTEM_PROMPT:
        facts = [
            f"User's favourite {match[1]} is {match[2]}"
            for line in user_lines
            if (match := re.search(r"my favourite (\w+) is (\w+)", line))
        ]
        return "\n".join(facts) or "NONE"
    previous = _tagged_json(prompt, "previous_summary") or ""
    opening = previous.split("\n")[0] if previous else f"It began with: {user_lines[0]}"
    return f"{opening}\nLater the user asked {len(user_lines)} more questions about the garden."


@pytest.fixture
def llm(fake_llm, settings):
    fake_llm.responder = plausible_llm
    settings.SUMMARY_THRESHOLD_TOKENS = 2000
    return fake_llm


def test_a_bot_chats_300_turns_and_its_context_always_has_what_matters(api, llm):
    session = api.post(
        "/api/v1/sessions/", {"user_id": "telegram:42", "agent_id": "gardener"}, format="json"
    ).json()
    url = f"/api/v1/sessions/{session['id']}"
    api.put(
        "/api/v1/users/telegram:42/memories/name/", {"content": "Her name is Ana"}, format="json"
    )

    contexts = []
    for turn in range(TURNS):
        if turn == 0:
            text = FIRST_WORDS
        elif turn == 3:
            text = FAVOURITE
        elif turn == TURNS - 1:
            text = LAST_QUESTION
        else:
            text = f"Turn {turn}: when should I water the tomatoes, and how much is enough?"
        assert (
            api.post(
                f"{url}/messages/", {"role": "user", "content": text}, format="json"
            ).status_code
            == 201
        )
        context = api.get(f"{url}/context/", {"max_tokens": BUDGET})
        assert context.status_code == 200
        body = context.json()
        assert body["tokens"] <= BUDGET
        assert count_tokens(body["content"]) <= BUDGET
        contexts.append(body)
        reply = f"Answer {turn}: water them in the early morning, about a litre per plant."
        assert (
            api.post(
                f"{url}/messages/", {"role": "assistant", "content": reply}, format="json"
            ).status_code
            == 201
        )

    # The workers kept up: several incremental summaries, and the one fact, once.
    stored = Session.objects.get(pk=session["id"])
    assert stored.message_count == TURNS * 2
    assert Summary.objects.filter(session_id=session["id"]).count() >= 3
    assert list(Fact.objects.values_list("content", flat=True)) == [
        "User's favourite colour is teal"
    ]
    assert stored.extracted_seq == TURNS * 2

    last = contexts[-1]
    content = last["content"]
    assert "Her name is Ana" in content
    assert "favourite colour is teal" in content
    assert "It began with: " + FIRST_WORDS in content  # from the summary...
    messages = api.get(f"{url}/messages/", {"last": 20}).json()["results"]
    assert FIRST_WORDS not in [m["content"] for m in messages]  # ...not from the messages
    assert LAST_QUESTION in content
    sections = {section["name"]: section for section in last["sections"]}
    assert sections["summary"]["included"]
    assert sections["facts"]["included"]
