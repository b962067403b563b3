"""memoryhub-client: the MemoryHub API from Python, sync (`MemoryHub`) and async
(`AsyncMemoryHub`), with the same method names.

Optional parts: `memoryhub_client.langchain` (a LangChain chat history; extra `langchain`),
`memoryhub_client.langgraph` (a LangGraph store over memories; extra `langgraph`) and
`memoryhub_client.tools` (OpenAI function-calling tools and their resolver; no extra needed).
"""

from memoryhub_client._base import NOT_GIVEN, NotGiven, RetryPolicy
from memoryhub_client._client import AsyncMemoryHub, MemoryHub
from memoryhub_client.errors import (
    APIConnectionError,
    AuthenticationError,
    ConflictError,
    IdempotencyKeyReusedError,
    MemoryHubError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    PreconditionFailedError,
    RateLimitedError,
    ServerError,
    ServiceUnavailableError,
    ValidationError,
)
from memoryhub_client.types import (
    AppendResult,
    Context,
    ContextSection,
    Fact,
    Memory,
    MemoryVersion,
    MemoryVersions,
    Message,
    MessagePage,
    Note,
    NoteRecall,
    Page,
    Plan,
    PurgeResult,
    SearchHit,
    SearchResults,
    Session,
    StateEntry,
    StateList,
    Summary,
    TaskContext,
    User,
)

__version__ = "0.1.0"

__all__ = [
    "NOT_GIVEN",
    "APIConnectionError",
    "AppendResult",
    "AsyncMemoryHub",
    "AuthenticationError",
    "ConflictError",
    "Context",
    "ContextSection",
    "Fact",
    "IdempotencyKeyReusedError",
    "Memory",
    "MemoryHub",
    "MemoryHubError",
    "MemoryVersion",
    "MemoryVersions",
    "Message",
    "MessagePage",
    "NotFoundError",
    "NotGiven",
    "Note",
    "NoteRecall",
    "Page",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "Plan",
    "PreconditionFailedError",
    "PurgeResult",
    "RateLimitedError",
    "RetryPolicy",
    "SearchHit",
    "SearchResults",
    "ServerError",
    "ServiceUnavailableError",
    "Session",
    "StateEntry",
    "StateList",
    "Summary",
    "TaskContext",
    "User",
    "ValidationError",
]
