"""`MemoryHub` (sync) and `AsyncMemoryHub`: the same methods, built from the same Call builders
(`_operations`); they differ only in how a Call is sent and how they wait between attempts."""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

import httpx

from memoryhub_client import _operations as ops
from memoryhub_client._base import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    BaseClient,
    Call,
)
from memoryhub_client.types import Message, Page

P = ParamSpec("P")
T = TypeVar("T")

# The largest page the server serves for messages.
MESSAGES_PAGE = 500


class _SyncClient(BaseClient):
    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        super().__init__(
            base_url, api_key, timeout=timeout, max_retries=max_retries, headers=headers
        )
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout, transport=transport)
        self._sleep: Callable[[float], None] = time.sleep

    def _execute(self, call: Call[T]) -> T:
        kwargs = self._request_kwargs(call)
        kwargs["headers"] = {**self._default_headers, **kwargs["headers"]}
        url = self.base_url + call.path
        attempt = 0
        while True:
            try:
                response = self._http.request(call.method, url, **kwargs)
            except httpx.TransportError as error:
                delay = self.retry_policy.delay_after_error(call, error, attempt)
                if delay is None:
                    raise self._connection_error(error) from error
            else:
                delay = self.retry_policy.delay_after_answer(call, response, attempt)
                if delay is None:
                    return self._finish(call, response, attempt)
            self._sleep(delay)
            attempt += 1

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class _AsyncClient(BaseClient):
    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(
            base_url, api_key, timeout=timeout, max_retries=max_retries, headers=headers
        )
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout, transport=transport)
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    async def _execute(self, call: Call[T]) -> T:
        kwargs = self._request_kwargs(call)
        kwargs["headers"] = {**self._default_headers, **kwargs["headers"]}
        url = self.base_url + call.path
        attempt = 0
        while True:
            try:
                response = await self._http.request(call.method, url, **kwargs)
            except httpx.TransportError as error:
                delay = self.retry_policy.delay_after_error(call, error, attempt)
                if delay is None:
                    raise self._connection_error(error) from error
            else:
                delay = self.retry_policy.delay_after_answer(call, response, attempt)
                if delay is None:
                    return self._finish(call, response, attempt)
            await self._sleep(delay)
            attempt += 1

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


# --- one builder → one method, typed from the builder's own signature ---------------------------


def _document(method: Callable[..., Any], build: Callable[..., Any], returns: str) -> None:
    """Give a generated method the builder's name, docstring and arguments (for help() and
    editors), with `self` first and what the method returns instead of the Call."""
    functools.update_wrapper(method, build)
    del method.__wrapped__  # type: ignore[attr-defined]
    built = inspect.signature(build)
    result = str(built.return_annotation)
    if result.startswith("Call[") and result.endswith("]"):
        result = result[len("Call[") : -1]
    if returns != "{}" and result.startswith("Page[") and result.endswith("]"):
        result = result[len("Page[") : -1]
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    method.__signature__ = built.replace(  # type: ignore[attr-defined]
        parameters=[self_parameter, *built.parameters.values()],
        return_annotation=returns.format(result),
    )


def _sync(build: Callable[P, Call[T]]) -> Callable[Concatenate[_SyncClient, P], T]:
    def method(self: _SyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._execute(build(*args, **kwargs))

    _document(method, build, "{}")
    return method


def _async(build: Callable[P, Call[T]]) -> Callable[Concatenate[_AsyncClient, P], Awaitable[T]]:
    async def method(self: _AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._execute(build(*args, **kwargs))

    _document(method, build, "{}")
    return method


def _sync_pages(
    build: Callable[P, Call[Page[T]]],
) -> Callable[Concatenate[_SyncClient, P], Iterator[T]]:
    """Every item of every page, following the cursors lazily (`limit` is the page size)."""

    def method(self: _SyncClient, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        call: Call[Page[T]] | None = build(*args, **kwargs)
        while call is not None:
            page = self._execute(call)
            yield from page.results
            call = call.with_param("cursor", page.next_cursor) if page.next_cursor else None

    _document(method, build, "Iterator[{}]")
    _name_pages(method, build)
    return method


def _async_pages(
    build: Callable[P, Call[Page[T]]],
) -> Callable[Concatenate[_AsyncClient, P], AsyncIterator[T]]:
    async def method(self: _AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        call: Call[Page[T]] | None = build(*args, **kwargs)
        while call is not None:
            page = await self._execute(call)
            for item in page.results:
                yield item
            call = call.with_param("cursor", page.next_cursor) if page.next_cursor else None

    _document(method, build, "AsyncIterator[{}]")
    _name_pages(method, build)
    return method


def _name_pages(method: Callable[..., Any], build: Callable[..., Any]) -> None:
    method.__name__ = method.__qualname__ = "iter_" + build.__name__.removeprefix("list_")
    method.__doc__ = (
        f"Iterate over every result of `{build.__name__}`, page after page "
        "(`limit` is the page size)."
    )


class MemoryHub(_SyncClient):
    """The MemoryHub API, synchronous.

        hub = MemoryHub("http://127.0.0.1:8000", "mh_…")
        session = hub.create_session(user_id="tg:42", external_key="tg:42:main")
        hub.append_message(session.id, role="user", content="Hi, I am Sachi.")
        messages = hub.context_messages(session.id, user_message="What is my name?")

    `base_url` may include `/api/v1` or not; `base_url`/`api_key` default to the environment's
    MEMORYHUB_URL / MEMORYHUB_API_KEY. Transient failures are retried `max_retries` times when
    that is safe (see `RetryPolicy`). Errors raise `memoryhub_client.errors` exceptions.
    """

    # sessions
    create_session = _sync(ops.create_session)
    get_session = _sync(ops.get_session)
    list_sessions = _sync(ops.list_sessions)
    iter_sessions = _sync_pages(ops.list_sessions)
    update_session = _sync(ops.update_session)
    delete_session = _sync(ops.delete_session)
    # messages
    append_message = _sync(ops.append_message)
    append_messages = _sync(ops.append_messages)
    list_messages = _sync(ops.list_messages)
    # state
    list_state = _sync(ops.list_state)
    get_state = _sync(ops.get_state)
    set_state = _sync(ops.set_state)
    delete_state = _sync(ops.delete_state)
    # context and summary
    get_context = _sync(ops.get_context)
    context_messages = _sync(ops.context_messages)
    get_summary = _sync(ops.get_summary)
    set_summary = _sync(ops.set_summary)
    request_summary = _sync(ops.request_summary)
    # people
    list_users = _sync(ops.list_users)
    iter_users = _sync_pages(ops.list_users)
    get_user = _sync(ops.get_user)
    export_user = _sync(ops.export_user)
    erase_user = _sync(ops.erase_user)
    # memories
    list_memories = _sync(ops.list_memories)
    get_memory = _sync(ops.get_memory)
    put_memory = _sync(ops.put_memory)
    delete_memory = _sync(ops.delete_memory)
    memory_versions = _sync(ops.memory_versions)
    list_tenant_memories = _sync(ops.list_tenant_memories)
    get_tenant_memory = _sync(ops.get_tenant_memory)
    put_tenant_memory = _sync(ops.put_tenant_memory)
    delete_tenant_memory = _sync(ops.delete_tenant_memory)
    tenant_memory_versions = _sync(ops.tenant_memory_versions)
    # facts and search
    create_fact = _sync(ops.create_fact)
    list_facts = _sync(ops.list_facts)
    iter_facts = _sync_pages(ops.list_facts)
    get_fact = _sync(ops.get_fact)
    update_fact = _sync(ops.update_fact)
    delete_fact = _sync(ops.delete_fact)
    search_facts = _sync(ops.search_facts)
    search_messages = _sync(ops.search_messages)
    # notes
    get_long_term_note = _sync(ops.get_long_term_note)
    put_long_term_note = _sync(ops.put_long_term_note)
    long_term_note_history = _sync(ops.long_term_note_history)
    iter_long_term_note_history = _sync_pages(ops.long_term_note_history)
    add_daily_note = _sync(ops.add_daily_note)
    get_daily_note = _sync(ops.get_daily_note)
    recall_notes = _sync(ops.recall_notes)
    clear_notes = _sync(ops.clear_notes)
    # plans and task contexts
    create_plan = _sync(ops.create_plan)
    get_plan = _sync(ops.get_plan)
    list_plans = _sync(ops.list_plans)
    iter_plans = _sync_pages(ops.list_plans)
    replace_plan = _sync(ops.replace_plan)
    update_plan = _sync(ops.update_plan)
    delete_plan = _sync(ops.delete_plan)
    create_task_context = _sync(ops.create_task_context)
    get_task_context = _sync(ops.get_task_context)
    task_context_by_subtask = _sync(ops.task_context_by_subtask)
    list_task_contexts = _sync(ops.list_task_contexts)
    iter_task_contexts = _sync_pages(ops.list_task_contexts)
    replace_task_context = _sync(ops.replace_task_context)
    update_task_context = _sync(ops.update_task_context)
    delete_task_context = _sync(ops.delete_task_context)
    # purge
    purge = _sync(ops.purge)

    def iter_messages(self, session_id: str, *, after_seq: int = 0) -> Iterator[Message]:
        """Every message after `after_seq`, oldest first, in pages of the server's maximum."""
        while True:
            page = self._execute(
                ops.list_messages(session_id, after_seq=after_seq, limit=MESSAGES_PAGE)
            )
            yield from page.results
            if not page.has_more or not page.results:
                return
            after_seq = page.results[-1].seq


class AsyncMemoryHub(_AsyncClient):
    """The MemoryHub API, asynchronous: the same methods as `MemoryHub`, awaited; the
    `iter_…` methods are async iterators (`async for`)."""

    # sessions
    create_session = _async(ops.create_session)
    get_session = _async(ops.get_session)
    list_sessions = _async(ops.list_sessions)
    iter_sessions = _async_pages(ops.list_sessions)
    update_session = _async(ops.update_session)
    delete_session = _async(ops.delete_session)
    # messages
    append_message = _async(ops.append_message)
    append_messages = _async(ops.append_messages)
    list_messages = _async(ops.list_messages)
    # state
    list_state = _async(ops.list_state)
    get_state = _async(ops.get_state)
    set_state = _async(ops.set_state)
    delete_state = _async(ops.delete_state)
    # context and summary
    get_context = _async(ops.get_context)
    context_messages = _async(ops.context_messages)
    get_summary = _async(ops.get_summary)
    set_summary = _async(ops.set_summary)
    request_summary = _async(ops.request_summary)
    # people
    list_users = _async(ops.list_users)
    iter_users = _async_pages(ops.list_users)
    get_user = _async(ops.get_user)
    export_user = _async(ops.export_user)
    erase_user = _async(ops.erase_user)
    # memories
    list_memories = _async(ops.list_memories)
    get_memory = _async(ops.get_memory)
    put_memory = _async(ops.put_memory)
    delete_memory = _async(ops.delete_memory)
    memory_versions = _async(ops.memory_versions)
    list_tenant_memories = _async(ops.list_tenant_memories)
    get_tenant_memory = _async(ops.get_tenant_memory)
    put_tenant_memory = _async(ops.put_tenant_memory)
    delete_tenant_memory = _async(ops.delete_tenant_memory)
    tenant_memory_versions = _async(ops.tenant_memory_versions)
    # facts and search
    create_fact = _async(ops.create_fact)
    list_facts = _async(ops.list_facts)
    iter_facts = _async_pages(ops.list_facts)
    get_fact = _async(ops.get_fact)
    update_fact = _async(ops.update_fact)
    delete_fact = _async(ops.delete_fact)
    search_facts = _async(ops.search_facts)
    search_messages = _async(ops.search_messages)
    # notes
    get_long_term_note = _async(ops.get_long_term_note)
    put_long_term_note = _async(ops.put_long_term_note)
    long_term_note_history = _async(ops.long_term_note_history)
    iter_long_term_note_history = _async_pages(ops.long_term_note_history)
    add_daily_note = _async(ops.add_daily_note)
    get_daily_note = _async(ops.get_daily_note)
    recall_notes = _async(ops.recall_notes)
    clear_notes = _async(ops.clear_notes)
    # plans and task contexts
    create_plan = _async(ops.create_plan)
    get_plan = _async(ops.get_plan)
    list_plans = _async(ops.list_plans)
    iter_plans = _async_pages(ops.list_plans)
    replace_plan = _async(ops.replace_plan)
    update_plan = _async(ops.update_plan)
    delete_plan = _async(ops.delete_plan)
    create_task_context = _async(ops.create_task_context)
    get_task_context = _async(ops.get_task_context)
    task_context_by_subtask = _async(ops.task_context_by_subtask)
    list_task_contexts = _async(ops.list_task_contexts)
    iter_task_contexts = _async_pages(ops.list_task_contexts)
    replace_task_context = _async(ops.replace_task_context)
    update_task_context = _async(ops.update_task_context)
    delete_task_context = _async(ops.delete_task_context)
    # purge
    purge = _async(ops.purge)

    async def iter_messages(self, session_id: str, *, after_seq: int = 0) -> AsyncIterator[Message]:
        """Every message after `after_seq`, oldest first, in pages of the server's maximum."""
        while True:
            page = await self._execute(
                ops.list_messages(session_id, after_seq=after_seq, limit=MESSAGES_PAGE)
            )
            for message in page.results:
                yield message
            if not page.has_more or not page.results:
                return
            after_seq = page.results[-1].seq
