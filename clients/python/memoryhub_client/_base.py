"""What both clients share, without I/O: a request described as a `Call` (method, path, query,
body, headers and how to read the answer), the retry policy, and the answer → result or error
step. `MemoryHub` and `AsyncMemoryHub` only send a Call through their httpx transport and sleep
between attempts, one with `time.sleep`, the other with `asyncio.sleep`."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any, Final, Generic, TypeVar
from urllib.parse import parse_qs, quote, urlsplit

import httpx

from memoryhub_client.errors import (
    APIConnectionError,
    MemoryHubError,
    error_for,
    parse_retry_after,
)

T = TypeVar("T")

API_PREFIX = "/api/v1"
IDEMPOTENCY_HEADER = "Idempotency-Key"
# The server's answer to a repeated Idempotency-Key: the first response, nothing written again.
REPLAYED_HEADER = "Idempotent-Replayed"
RETRY_STATUSES: Final = frozenset({502, 503, 504})
# Methods whose repetition changes nothing more than the first attempt did (RFC 9110 §9.2.2).
_IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "PUT", "DELETE"})
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RETRIES = 2


class NotGiven:
    """The default of a PATCH argument: "leave it as it is" (None would mean "clear it")."""

    _instance: NotGiven | None = None

    def __new__(cls) -> NotGiven:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_GIVEN"

    def __bool__(self) -> bool:
        return False


NOT_GIVEN: Final = NotGiven()


@dataclass(frozen=True)
class Answer:
    """An HTTP answer, decoded: what a Call's `parse` reads."""

    status: int
    headers: httpx.Headers
    body: Any

    @property
    def replayed(self) -> bool:
        return self.headers.get(REPLAYED_HEADER) == "true"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API request, described without sending it. The same Call object is sent again on a
    retry, so a generated Idempotency-Key stays the same across attempts."""

    method: str
    path: str
    parse: Callable[[Answer], T]
    params: tuple[tuple[str, str], ...] = ()
    json: Any = NOT_GIVEN
    headers: tuple[tuple[str, str], ...] = ()
    idempotency_key: str | None = None

    @property
    def retry_safe(self) -> bool:
        """Whether sending it twice is harmless: reads, PUT/DELETE, and writes carrying an
        Idempotency-Key (the server replays the first answer). Never a bare POST or PATCH."""
        return self.method in _IDEMPOTENT_METHODS or self.idempotency_key is not None

    def with_param(self, name: str, value: str) -> Call[T]:
        kept = tuple((key, val) for key, val in self.params if key != name)
        return replace(self, params=(*kept, (name, value)))

    def request_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.idempotency_key is not None:
            headers[IDEMPOTENCY_HEADER] = self.idempotency_key
        return headers


def new_idempotency_key() -> str:
    return f"mhc-{uuid.uuid4().hex}"


def segment(value: str | int) -> str:
    """One path segment, escaped: ids such as `whatsapp:+4912345` go into URLs as they are."""
    return quote(str(value), safe="")


def query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def params_of(**values: Any) -> tuple[tuple[str, str], ...]:
    """Query parameters without the unset ones; a list or tuple repeats its name, and a dict
    (the `metadata` filter) becomes repeated `name=key=value`."""
    out: list[tuple[str, str]] = []
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            out.extend((name, f"{key}={query_value(item)}") for key, item in value.items())
        elif isinstance(value, list | tuple):
            out.extend((name, query_value(item)) for item in value)
        else:
            out.append((name, query_value(value)))
    return tuple(out)


def body(**values: Any) -> dict[str, Any]:
    """A JSON body without the arguments left at NOT_GIVEN (None is sent: it means null)."""
    return {name: json_value(value) for name, value in values.items() if value is not NOT_GIVEN}


def body_without_none(**values: Any) -> dict[str, Any]:
    return {name: json_value(value) for name, value in values.items() if value is not None}


def json_value(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def cursor_of(link: Any) -> str | None:
    """The `cursor` of a `next`/`previous` link. The client asks its own base URL again rather
    than following the link, whose host is whatever the server was called by (a proxy's)."""
    if not isinstance(link, str) or not link:
        return None
    values = parse_qs(urlsplit(link).query).get("cursor")
    return values[0] if values else None


def base_url_of(base_url: str | None) -> str:
    url = (base_url or os.environ.get("MEMORYHUB_URL") or "").strip().rstrip("/")
    if not url:
        raise ValueError("base_url is required (or set MEMORYHUB_URL)")
    if not url.endswith(API_PREFIX):
        url += API_PREFIX
    return url + "/"


def api_key_of(api_key: str | None) -> str:
    key = api_key or os.environ.get("MEMORYHUB_API_KEY")
    if not key:
        raise ValueError("api_key is required (or set MEMORYHUB_API_KEY)")
    return key


def decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


@dataclass
class RetryPolicy:
    """When to try a Call again, and after how long.

    Retried: a 429 (the server refused it, so any request may be sent again) after its
    Retry-After; and, for retry-safe calls only, connection failures, timeouts and 502/503/504,
    with exponential backoff and full jitter. A POST or PATCH without an Idempotency-Key is never
    sent twice: the first attempt may have been carried out.
    """

    max_retries: int = DEFAULT_MAX_RETRIES
    initial_delay: float = 0.5
    max_delay: float = 8.0
    # A Retry-After longer than this is not waited for: the error is raised with `retry_after`.
    max_retry_after: float = 60.0
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def backoff(self, attempt: int) -> float:
        return self.rng.uniform(0, min(self.max_delay, self.initial_delay * 2**attempt))

    def delay_after_answer(
        self, call: Call[Any], answer: httpx.Response, attempt: int
    ) -> float | None:
        if attempt >= self.max_retries:
            return None
        status = answer.status_code
        if status != 429 and not (status in RETRY_STATUSES and call.retry_safe):
            return None
        asked = parse_retry_after(answer.headers.get("Retry-After"))
        if asked is None:
            return self.backoff(attempt)
        return asked if asked <= self.max_retry_after else None

    def delay_after_error(self, call: Call[Any], error: Exception, attempt: int) -> float | None:
        if attempt >= self.max_retries or not call.retry_safe:
            return None
        return self.backoff(attempt) if isinstance(error, httpx.TransportError) else None


class BaseClient:
    """Configuration and the answer → result step both clients share."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.base_url = base_url_of(base_url)
        self.api_key = api_key_of(api_key)
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_policy = RetryPolicy(max_retries=max_retries)
        self._default_headers = {
            "Authorization": f"Bearer {self.api_key}",
            "Accept": "application/json",
            "User-Agent": "memoryhub-client-python/0.1",
            **(headers or {}),
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    def _request_kwargs(self, call: Call[Any]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "params": list(call.params),
            "headers": call.request_headers(),
        }
        if call.json is not NOT_GIVEN:
            kwargs["json"] = call.json
        return kwargs

    def _finish(self, call: Call[T], response: httpx.Response, attempt: int) -> T:
        if response.status_code == 404 and call.method == "DELETE" and attempt > 0:
            # The first attempt deleted it and its answer was lost: the retry finds it gone.
            return call.parse(Answer(204, response.headers, None))
        payload = decode(response)
        if response.status_code >= 400:
            raise error_for(
                status=response.status_code,
                body=payload,
                reason=response.reason_phrase,
                retry_after=response.headers.get("Retry-After"),
            )
        return call.parse(Answer(response.status_code, response.headers, payload))

    @staticmethod
    def _connection_error(error: Exception) -> MemoryHubError:
        code = "timeout" if isinstance(error, httpx.TimeoutException) else "connection_error"
        return APIConnectionError(str(error) or type(error).__name__, code=code)
