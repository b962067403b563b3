"""The one LLM client MemoryHub ships: the official `openai` package pointed at any
OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, llama.cpp).

The openai client's own retries are off (`max_retries=0`): a retry belongs to the Celery task,
which backs off between attempts and gives up on permanent errors. Every vendor exception is
translated here into `LLMTransientError` or `LLMPermanentError`, so nothing above this module
imports `openai`.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, cast

from django.conf import settings

from memoryhub.core.tokens import count_tokens
from memoryhub.llm.types import (
    ChatMessage,
    Completion,
    LLMClient,
    LLMError,
    LLMPermanentError,
    LLMTransientError,
)

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

logger = logging.getLogger(__name__)

# openai refuses to start without a key; local servers ignore whatever is sent.
PLACEHOLDER_API_KEY = "not-needed"
_VENDOR_MESSAGE_MAX_CHARS = 300


class OpenAICompatibleClient:
    """`LLMClient` over `openai.OpenAI`; safe to share between threads."""

    def __init__(
        self, *, base_url: str, model: str, api_key: str = "", timeout_seconds: float = 30.0
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise LLMPermanentError(f"LLM_BASE_URL must be an http(s) URL, not {base_url!r}.")
        if not model:
            raise LLMPermanentError("LLM_MODEL must not be empty.")
        if timeout_seconds <= 0:
            raise LLMPermanentError(f"The LLM timeout must be positive, not {timeout_seconds}.")
        self.model = model
        self.base_url = base_url
        self.timeout_seconds = timeout_seconds
        # Imported here, not with the module: openai's types take 0.4 s to import, and every
        # process imports this module (the admin, the import command) whether it calls or not.
        import openai

        self._openai = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or PLACEHOLDER_API_KEY,
            timeout=timeout_seconds,
            max_retries=0,
        )

    def __repr__(self) -> str:
        # Never the key: reprs end up in logs and Celery task failure records.
        return f"OpenAICompatibleClient(base_url={self.base_url!r}, model={self.model!r})"

    def complete(
        self,
        *,
        messages: list[ChatMessage],
        max_tokens: int | None = None,
        temperature: float = 0.0,
    ) -> Completion:
        if not messages:
            raise ValueError("complete() needs at least one message.")
        # ChatMessage has already checked the role, so each dict is a valid message param.
        params = [
            cast("ChatCompletionMessageParam", {"role": m.role, "content": m.content})
            for m in messages
        ]
        import openai  # loaded by the constructor already: a lookup

        try:
            if max_tokens is None:
                response = self._openai.chat.completions.create(
                    model=self.model, messages=params, temperature=temperature
                )
            else:
                response = self._openai.chat.completions.create(
                    model=self.model,
                    messages=params,
                    temperature=temperature,
                    max_tokens=max_tokens,
                )
        except openai.OpenAIError as exc:
            error = self._translate(exc)
            logger.warning(
                "LLM call to %s failed: %s (%s)", self.base_url, error, type(error).__name__
            )
            raise error from exc
        except ValueError as exc:
            # A body that is not JSON can surface as a decoding error rather than an OpenAIError.
            raise LLMPermanentError(f"The LLM endpoint sent an unreadable answer: {exc}") from exc
        return self._completion_from(response=response, messages=messages)

    def _translate(self, exc: openai.OpenAIError) -> LLMError:
        import openai

        # Order matters: APITimeoutError is a subclass of APIConnectionError, and RateLimitError
        # and InternalServerError are subclasses of APIStatusError.
        if isinstance(exc, openai.APITimeoutError):
            return LLMTransientError(f"The LLM did not answer within {self.timeout_seconds}s.")
        if isinstance(exc, openai.APIConnectionError):
            return LLMTransientError(f"Could not reach the LLM endpoint: {exc}")
        if isinstance(exc, openai.RateLimitError):
            return LLMTransientError(
                f"The LLM endpoint is rate limiting (HTTP 429): {_vendor_message(exc)}",
                retry_after_seconds=_retry_after_seconds(exc),
            )
        if isinstance(exc, openai.InternalServerError):
            return LLMTransientError(
                f"The LLM endpoint failed (HTTP {exc.status_code}): {_vendor_message(exc)}",
                retry_after_seconds=_retry_after_seconds(exc),
            )
        if isinstance(exc, openai.APIStatusError):
            if exc.status_code == 408:
                # Request Timeout: the server's own word for the timeout we treat as transient.
                return LLMTransientError("The LLM endpoint timed out (HTTP 408).")
            # Bad request, auth, permission, unknown model, 422 …: the same call fails again.
            return LLMPermanentError(
                f"The LLM endpoint refused the request (HTTP {exc.status_code}): "
                f"{_vendor_message(exc)}"
            )
        return LLMPermanentError(f"The LLM call failed: {type(exc).__name__}: {exc}")

    def _completion_from(
        self, *, response: ChatCompletion, messages: list[ChatMessage]
    ) -> Completion:
        choices = getattr(response, "choices", None)
        if not choices:
            raise LLMPermanentError("The LLM answered without any choices.")
        message = getattr(choices[0], "message", None)
        text = getattr(message, "content", None)
        if not isinstance(text, str) or not text.strip():
            finish_reason = getattr(choices[0], "finish_reason", None)
            raise LLMPermanentError(
                f"The LLM answered with empty content (finish_reason={finish_reason!r})."
            )
        usage = getattr(response, "usage", None)
        prompt_tokens = getattr(usage, "prompt_tokens", None)
        completion_tokens = getattr(usage, "completion_tokens", None)
        # Some local servers leave usage out; an estimate keeps per-tenant accounting honest.
        if not isinstance(prompt_tokens, int):
            prompt_tokens = sum(count_tokens(m.content) for m in messages)
        if not isinstance(completion_tokens, int):
            completion_tokens = count_tokens(text)
        model = getattr(response, "model", None)
        return Completion(
            text=text,
            model=model if isinstance(model, str) and model else self.model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )


def _vendor_message(exc: openai.APIStatusError) -> str:
    message = str(getattr(exc, "message", "") or exc)
    return message[:_VENDOR_MESSAGE_MAX_CHARS]


def _retry_after_seconds(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: rare from LLM servers, and the task's backoff copes
    return seconds if seconds >= 0 else None


@functools.lru_cache(maxsize=8)
def _cached_client(
    *, base_url: str, model: str, api_key: str, timeout_seconds: float
) -> OpenAICompatibleClient:
    # One client (and its connection pool) per configuration, not one per task run.
    return OpenAICompatibleClient(
        base_url=base_url, model=model, api_key=api_key, timeout_seconds=timeout_seconds
    )


def get_llm_client() -> LLMClient | None:
    """The configured client, or None in offline mode (no `LLM_BASE_URL`): callers then use
    `offline_summary` and skip extraction."""
    base_url: str = settings.LLM_BASE_URL
    if not base_url:
        return None
    return _cached_client(
        base_url=base_url,
        model=settings.LLM_MODEL,
        api_key=settings.LLM_API_KEY,
        timeout_seconds=float(settings.LLM_TIMEOUT_SECONDS),
    )
