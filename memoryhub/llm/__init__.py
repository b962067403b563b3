"""The LLM adapter: one protocol, the OpenAI-compatible client, the offline fallback and our
own exception types. Nothing outside this package imports `openai`.

Import models (`memoryhub.llm.models`) and usage recording (`memoryhub.llm.usage`) from their
modules: this package is imported before Django's app registry is ready.
"""

from memoryhub.llm.types import (
    ChatMessage,
    Completion,
    LLMClient,
    LLMError,
    LLMPermanentError,
    LLMTransientError,
)

__all__ = [
    "ChatMessage",
    "Completion",
    "LLMClient",
    "LLMError",
    "LLMPermanentError",
    "LLMTransientError",
]
