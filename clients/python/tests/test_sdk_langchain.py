"""The LangChain chat history against a live MemoryHub.

langchain-tests has no standard suite for chat histories, so these are LangChain's expectations
of one (what its own InMemoryChatMessageHistory tests check), written out: an empty history is
empty; messages come back in the order added, with their types, names, tool calls and tool call
ids; clear empties it; each async twin does the same, over AsyncMemoryHub; and a history works
under RunnableWithMessageHistory.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables.history import RunnableWithMessageHistory
from memoryhub_client import AsyncMemoryHub, MemoryHub
from memoryhub_client.langchain import MemoryHubChatMessageHistory

PERSON = "telegram:7"
KEY = "telegram:7:main"


@pytest.fixture
def history(hub: MemoryHub) -> MemoryHubChatMessageHistory:
    return MemoryHubChatMessageHistory(KEY, client=hub, user_id=PERSON, agent_id="chat")


def conversation() -> list[BaseMessage]:
    return [
        SystemMessage("You are a travel agent."),
        HumanMessage("Find me a flight to Lisbon.", name="sachi"),
        AIMessage(
            "",
            tool_calls=[
                {
                    "name": "search_flights",
                    "args": {"to": "LIS"},
                    "id": "call_1",
                    "type": "tool_call",
                }
            ],
        ),
        ToolMessage('{"flights": ["TP123"]}', tool_call_id="call_1"),
        AIMessage("TP123 leaves at 9:40."),
    ]


def shape(messages: list[BaseMessage]) -> list[tuple[object, ...]]:
    """What a history must keep of each message: its type, content, name, tool calls and tool
    call id (ids are the store's own)."""
    return [
        (
            message.type,
            message.content,
            message.name,
            [(c["name"], c["args"], c["id"]) for c in getattr(message, "tool_calls", [])],
            getattr(message, "tool_call_id", None),
        )
        for message in messages
    ]


def test_it_is_a_base_chat_message_history(history: MemoryHubChatMessageHistory) -> None:
    assert isinstance(history, BaseChatMessageHistory)


def test_a_new_history_is_empty(history: MemoryHubChatMessageHistory) -> None:
    assert history.messages == []


def test_it_reads_back_what_was_added_in_order_with_types_and_tool_calls(
    history: MemoryHubChatMessageHistory,
) -> None:
    history.add_messages(conversation())
    history.add_user_message("And back on Sunday?")
    history.add_ai_message("TP124, at 18:05.")

    assert shape(history.messages) == [
        *shape(conversation()),
        ("human", "And back on Sunday?", None, [], None),
        ("ai", "TP124, at 18:05.", None, [], None),
    ]


def test_it_stores_them_as_memoryhub_messages_of_the_session(
    history: MemoryHubChatMessageHistory, hub: MemoryHub
) -> None:
    history.add_messages(conversation())

    session = hub.create_session(user_id=PERSON, external_key=KEY)
    stored = hub.list_messages(session.id, last=10).results
    assert [(m.role, m.name, m.tool_call_id) for m in stored] == [
        ("system", "", ""),
        ("user", "sachi", ""),
        ("assistant", "", ""),
        ("tool", "", "call_1"),
        ("assistant", "", ""),
    ]
    assert stored[2].tool_calls == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "search_flights", "arguments": '{"to": "LIS"}'},
        }
    ]
    assert session.agent_id == "chat"


def test_a_second_history_with_the_same_key_sees_the_same_messages(
    history: MemoryHubChatMessageHistory, hub: MemoryHub
) -> None:
    history.add_user_message("Hello")
    other_key = MemoryHubChatMessageHistory("telegram:7:other", client=hub, user_id=PERSON)

    again = MemoryHubChatMessageHistory(KEY, client=hub, user_id=PERSON)

    assert shape(again.messages) == shape([HumanMessage("Hello")])
    assert other_key.messages == []


def test_clear_empties_it_and_it_can_be_used_again(
    history: MemoryHubChatMessageHistory, hub: MemoryHub
) -> None:
    history.add_messages(conversation())
    first_session = history.session_id

    history.clear()

    assert history.messages == []
    assert history.session_id != first_session  # a new session under the same key
    history.add_user_message("Fresh start")
    assert shape(history.messages) == shape([HumanMessage("Fresh start")])
    assert hub.list_sessions(user_id=PERSON).results[0].external_key == KEY


def test_content_blocks_ids_and_extra_fields_round_trip(
    history: MemoryHubChatMessageHistory,
) -> None:
    blocks = [{"type": "text", "text": "Look at this"}, {"type": "text", "text": "and this"}]
    history.add_messages(
        [
            HumanMessage(blocks, id="msg-1"),
            AIMessage("ok", additional_kwargs={"refusal": None, "reasoning": "short"}),
            ToolMessage("boom", tool_call_id="call_9", status="error"),
            ChatMessage(role="assistant", content="as a chat message"),
        ]
    )

    human, ai, tool, chat = history.messages

    assert (human.content, human.id) == (blocks, "msg-1")
    assert ai.additional_kwargs == {"refusal": None, "reasoning": "short"}
    assert isinstance(tool, ToolMessage)
    assert tool.status == "error"
    assert (chat.type, chat.content) == ("ai", "as a chat message")


def test_a_message_memoryhub_cannot_store_is_refused_before_anything_is_sent(
    history: MemoryHubChatMessageHistory,
) -> None:
    with pytest.raises(ValueError, match="function"):
        history.add_messages([HumanMessage("a"), FunctionMessage("x", name="f")])

    assert history.messages == []


class RefuseEverything(httpx.BaseTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"the async path used the sync client: {request.url}")


def test_the_async_twins_go_through_the_async_client(base_url: str, api_key: str) -> None:
    refusing = MemoryHub(base_url, api_key, transport=RefuseEverything())

    async def scenario() -> tuple[list[BaseMessage], list[BaseMessage], list[BaseMessage]]:
        async with AsyncMemoryHub(base_url, api_key) as client:
            history = MemoryHubChatMessageHistory(
                KEY, client=refusing, async_client=client, user_id=PERSON
            )
            empty = await history.aget_messages()
            await history.aadd_messages(conversation())
            added = await history.aget_messages()
            await history.aclear()
            return empty, added, await history.aget_messages()

    empty, added, cleared = asyncio.run(scenario())

    assert empty == []
    assert shape(added) == shape(conversation())
    assert cleared == []


def test_an_async_client_alone_makes_its_sync_twin(base_url: str, api_key: str) -> None:
    async def add() -> MemoryHubChatMessageHistory:
        async with AsyncMemoryHub(base_url, api_key) as client:
            history = MemoryHubChatMessageHistory(KEY, async_client=client, user_id=PERSON)
            await history.aadd_messages([HumanMessage("from async")])
            return history

    history = asyncio.run(add())

    assert shape(history.messages) == shape([HumanMessage("from async")])


# LangChain 1.x deprecates RunnableWithMessageHistory for LangGraph's persistence; it is still
# the way most LCEL apps use a chat history.
@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_it_remembers_a_conversation_under_runnable_with_message_history(
    hub: MemoryHub,
) -> None:
    model = FakeListChatModel(responses=["Hello Sachi!", "You are Sachi."])
    chat = RunnableWithMessageHistory(
        model,
        lambda session_key: MemoryHubChatMessageHistory(session_key, client=hub, user_id=PERSON),
    )
    config = {"configurable": {"session_id": KEY}}

    chat.invoke("Hi, I am Sachi.", config=config)  # type: ignore[arg-type]
    chat.invoke("Who am I?", config=config)  # type: ignore[arg-type]

    history = MemoryHubChatMessageHistory(KEY, client=hub, user_id=PERSON)
    assert [(m.type, m.content) for m in history.messages] == [
        ("human", "Hi, I am Sachi."),
        ("ai", "Hello Sachi!"),
        ("human", "Who am I?"),
        ("ai", "You are Sachi."),
    ]
