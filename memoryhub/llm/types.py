"""The adapter's vocabulary: what goes in (messages), what comes out (a completion with usage),
the protocol every client implements, and the only exceptions callers need to know about.

Callers never see a vendor exception: the client translates them here, so a Celery task can
retry on `LLMTransientError` alone and give up on everything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

CHAT_ROLES = frozenset({"system", "user", "assistant", "tool"})


@dataclass(frozen=True)
class ChatMessage:
    role: str  # system | user | assistant | tool
    content: str

    def __post_init__(self) -> None:
        if self.role not in CHAT_ROLES:
            raise ValueError(
                f"Unknown chat role {self.role!r}; expected one of {sorted(CHAT_ROLES)}"
            )


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int


class LLMClient(Protocol):
    model: str

    def complete(
        self,
        *,
        messages: list[ChatMessage],
        max_tokens: int | None = None,
        temperature: float = 0.0,
    ) -> Completion: ...


class LLMError(Exception):
    """Anything that went wrong talking to the LLM."""


class LLMTransientError(LLMError):
    """Timeouts, connection errors, 429 and 5xx: the same call may well succeed later."""

    def __init__(self, message: str, *, retry_after_seconds: float | None = None) -> None:
        super().__init__(message)
        # What the server asked for (a 429's Retry-After), so a task can wait that long instead
        # of guessing; None when it did not say.
        self.retry_after_seconds = retry_after_seconds


class LLMPermanentError(LLMError):
    """4xx other than 429, an empty or unusable answer, bad configuration: retrying won't help."""
