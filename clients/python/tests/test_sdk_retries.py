"""Retries: what is sent again, with which key, after how long.

The lost-answer tests run against the live server through a transport wrapper that lets the
request reach the server and be carried out, then raises a connection error instead of handing
back the answer — the failure that makes a naive retry store a message twice. The 429 and 503
tests use a STUB transport (httpx.MockTransport), marked below: MemoryHub answers 429 only past a
configured rate and 503 only when its database is down, neither of which a test server does on
cue.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from memoryhub_client import (
    APIConnectionError,
    AsyncMemoryHub,
    MemoryHub,
    RateLimitedError,
    RetryPolicy,
    ServerError,
    ServiceUnavailableError,
)

PERSON = "telegram:42"


class LoseFirstAnswers(httpx.BaseTransport):
    """Forwards every request to the real server; for the first `times` requests `matching`,
    drops the server's answer and raises a connection error instead."""

    def __init__(self, *, times: int = 1, matching: Callable[[httpx.Request], bool]) -> None:
        self.inner = httpx.HTTPTransport()
        self.times = times
        self.matching = matching
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if self.matching(request):
            self.sent.append(request)
            if len(self.sent) <= self.times:
                response.read()
                response.close()
                raise httpx.ConnectError(
                    "connection lost after the server answered", request=request
                )
        return response


class AsyncLoseFirstAnswers(httpx.AsyncBaseTransport):
    def __init__(self, *, times: int = 1, matching: Callable[[httpx.Request], bool]) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.times = times
        self.matching = matching
        self.sent: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if self.matching(request):
            self.sent.append(request)
            if len(self.sent) <= self.times:
                await response.aread()
                await response.aclose()
                raise httpx.ConnectError(
                    "connection lost after the server answered", request=request
                )
        return response


def appends(request: httpx.Request) -> bool:
    return request.method == "POST" and request.url.path.endswith("/messages/")


def no_wait(hub: MemoryHub) -> list[float]:
    waited: list[float] = []
    hub._sleep = waited.append
    return waited


def test_a_lost_append_answer_is_retried_with_the_same_key_and_stored_once(
    hub: MemoryHub, base_url: str, api_key: str
) -> None:
    session = hub.create_session(user_id=PERSON)
    transport = LoseFirstAnswers(matching=appends)
    flaky = MemoryHub(base_url, api_key, transport=transport)
    waited = no_wait(flaky)

    result = flaky.append_message(session.id, role="user", content="Hi, once.")

    assert len(transport.sent) == 2
    assert len(waited) == 1
    keys = {request.headers["Idempotency-Key"] for request in transport.sent}
    assert len(keys) == 1
    assert keys.pop().startswith("mhc-")
    assert result.replayed
    assert [m.content for m in result.messages] == ["Hi, once."]
    assert [m.content for m in hub.list_messages(session.id, last=10).results] == ["Hi, once."]


def test_the_async_client_retries_a_lost_batch_append_once_too(
    hub: MemoryHub, base_url: str, api_key: str
) -> None:
    session = hub.create_session(user_id=PERSON)
    transport = AsyncLoseFirstAnswers(matching=appends)

    async def run() -> list[int]:
        async with AsyncMemoryHub(base_url, api_key, transport=transport) as flaky:
            flaky.retry_policy.initial_delay = 0.01
            result = await flaky.append_messages(
                session.id,
                [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
            )
            return [m.seq for m in result.messages]

    assert asyncio.run(run()) == [1, 2]
    assert len(transport.sent) == 2
    assert (
        transport.sent[0].headers["Idempotency-Key"] == transport.sent[1].headers["Idempotency-Key"]
    )
    assert hub.get_session(session.id).message_count == 2


def test_a_lost_answer_to_a_write_without_idempotency_is_not_retried(
    hub: MemoryHub, base_url: str, api_key: str
) -> None:
    transport = LoseFirstAnswers(matching=lambda request: request.method in {"POST", "PATCH"})
    flaky = MemoryHub(base_url, api_key, transport=transport)
    no_wait(flaky)

    with pytest.raises(APIConnectionError) as lost:
        flaky.create_fact("User likes tea", user_id=PERSON)

    assert lost.value.code == "connection_error"
    assert lost.value.status is None
    assert len(transport.sent) == 1  # sent once; the server did store it
    assert [f.content for f in hub.list_facts(user_id=PERSON)] == ["User likes tea"]


def test_a_lost_delete_answer_is_retried_and_the_retry_finding_it_gone_is_success(
    hub: MemoryHub, base_url: str, api_key: str
) -> None:
    hub.put_memory(PERSON, "tea", content="Likes tea.")
    transport = LoseFirstAnswers(matching=lambda request: request.method == "DELETE")
    flaky = MemoryHub(base_url, api_key, transport=transport)
    no_wait(flaky)

    flaky.delete_memory(PERSON, "tea")

    assert len(transport.sent) == 2
    assert hub.list_memories(PERSON) == []


def test_it_gives_up_after_max_retries(hub: MemoryHub, base_url: str, api_key: str) -> None:
    session = hub.create_session(user_id=PERSON)
    transport = LoseFirstAnswers(times=10, matching=appends)
    flaky = MemoryHub(base_url, api_key, transport=transport, max_retries=3)
    waited = no_wait(flaky)

    with pytest.raises(APIConnectionError):
        flaky.append_message(session.id, role="user", content="Hi")

    assert len(transport.sent) == 4
    assert len(waited) == 3
    assert hub.get_session(session.id).message_count == 1


# --- STUB transports: answers the live server does not give on cue ------------------------------


Answer = Callable[[], httpx.Response]


def stub(*answers: Answer) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A stub server answering `answers` in turn (the last one repeats) — not MemoryHub."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[min(len(seen), len(answers)) - 1]()

    return httpx.MockTransport(handle), seen


def answer(status: int, **kwargs: Any) -> Answer:
    return lambda: httpx.Response(status, **kwargs)


MESSAGE = {
    "id": 1,
    "session_id": "00000000-0000-0000-0000-000000000001",
    "seq": 1,
    "role": "user",
    "content": "Hi",
    "name": "",
    "tool_call_id": "",
    "tool_calls": None,
    "metadata": {},
    "token_count": 2,
    "created_at": "2026-01-01T00:00:00Z",
}
RATE_LIMITED = answer(
    429,
    headers={"Retry-After": "2"},
    json={"error": {"code": "rate_limited", "message": "Too many requests for this API key."}},
)


def test_stub_a_429_is_retried_after_its_retry_after_with_the_same_key() -> None:
    transport, seen = stub(RATE_LIMITED, answer(201, json=MESSAGE))
    hub = MemoryHub("http://stub", "mh_x.y", transport=transport)
    waited = no_wait(hub)

    result = hub.append_message(MESSAGE["session_id"], role="user", content="Hi")

    assert waited == [2.0]
    assert result.messages[0].content == "Hi"
    assert seen[0].headers["Idempotency-Key"] == seen[1].headers["Idempotency-Key"]


def test_stub_a_429_is_retried_for_any_request_since_the_server_refused_it() -> None:
    fact = {
        "id": 7,
        "user_id": PERSON,
        "content": "x",
        "tags": [],
        "metadata": {},
        "source_session_id": None,
        "source_message_ids": [],
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "valid_until": None,
        "superseded_by": None,
    }
    transport, seen = stub(RATE_LIMITED, answer(201, json=fact))
    hub = MemoryHub("http://stub", "mh_x.y", transport=transport)
    no_wait(hub)

    assert hub.create_fact("x", user_id=PERSON).id == 7
    assert len(seen) == 2
    assert "Idempotency-Key" not in seen[0].headers


def test_stub_rate_limited_error_carries_retry_after_when_retries_are_spent() -> None:
    transport, seen = stub(RATE_LIMITED)
    hub = MemoryHub("http://stub", "mh_x.y", transport=transport, max_retries=1)
    no_wait(hub)

    with pytest.raises(RateLimitedError) as limited:
        hub.list_sessions()

    assert len(seen) == 2
    assert limited.value.status == 429
    assert limited.value.retry_after == 2.0
    assert limited.value.code == "rate_limited"


def test_stub_a_retry_after_too_long_to_wait_is_raised_at_once() -> None:
    long_wait = answer(429, headers={"Retry-After": "3600"}, json={"error": {}})
    transport, seen = stub(long_wait)
    hub = MemoryHub("http://stub", "mh_x.y", transport=transport)

    with pytest.raises(RateLimitedError) as limited:
        hub.list_sessions()

    assert len(seen) == 1
    assert limited.value.retry_after == 3600.0


def test_stub_503_is_retried_for_reads_and_raised_with_retry_after() -> None:
    unavailable = answer(
        503,
        headers={"Retry-After": "1"},
        json={"error": {"code": "service_unavailable", "message": "Not ready."}},
    )
    transport, seen = stub(unavailable)
    hub = MemoryHub("http://stub", "mh_x.y", transport=transport, max_retries=2)
    waited = no_wait(hub)

    with pytest.raises(ServiceUnavailableError) as down:
        hub.get_session("00000000-0000-0000-0000-000000000001")

    assert len(seen) == 3
    assert waited == [1.0, 1.0]
    assert down.value.status == 503
    assert down.value.retry_after == 1.0


def test_stub_502_after_a_patch_is_not_retried() -> None:
    transport, seen = stub(answer(502, text="<html>Bad gateway</html>"))
    hub = MemoryHub("http://stub", "mh_x.y", transport=transport)

    with pytest.raises(ServerError) as failed:
        hub.update_session("00000000-0000-0000-0000-000000000001", agent_id="x")

    assert len(seen) == 1
    assert failed.value.code == "http_502"
    assert failed.value.message == "Bad Gateway"


def test_stub_the_async_client_honours_retry_after_too() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return RATE_LIMITED() if len(seen) == 1 else httpx.Response(201, json=MESSAGE)

    waited: list[float] = []

    async def record(seconds: float) -> None:
        waited.append(seconds)

    async def run() -> str:
        async with AsyncMemoryHub(
            "http://stub", "mh_x.y", transport=httpx.MockTransport(handle)
        ) as hub:
            hub._sleep = record
            result = await hub.append_message(MESSAGE["session_id"], role="user", content="Hi")
            return result.messages[0].content

    assert asyncio.run(run()) == "Hi"
    assert waited == [2.0]
    assert json.loads(seen[1].content) == {"role": "user", "content": "Hi"}


def test_backoff_is_exponential_with_full_jitter_and_capped() -> None:
    policy = RetryPolicy(initial_delay=0.5, max_delay=4.0)

    delays = {attempt: [policy.backoff(attempt) for _ in range(200)] for attempt in range(6)}

    for attempt, values in delays.items():
        assert all(0 <= value <= min(4.0, 0.5 * 2**attempt) for value in values)
    assert max(delays[3]) > 2.0  # grows past the first attempts' ceiling
