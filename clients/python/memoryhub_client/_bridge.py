"""Code written once as coroutines, run on either client: against AsyncMemoryHub it is awaited;
against MemoryHub every call returns an awaitable that is already done, so the coroutine runs
to its end in one step, with no event loop (the tools' resolver and the LangGraph store)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from memoryhub_client._client import MemoryHub

T = TypeVar("T")


class AwaitableHub:
    """A MemoryHub whose methods are awaited like AsyncMemoryHub's (they return at once)."""

    def __init__(self, client: MemoryHub) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self._client, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return call


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that awaits only AwaitableHub calls."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the coroutine waited on something a sync client cannot provide")
