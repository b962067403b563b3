"""A local HTTP server speaking the OpenAI chat-completions protocol, for tests.

The real `openai` client talks to it over a socket on 127.0.0.1, so request building, response
parsing, timeouts and status-code handling are the library's own code, not a mock. Each test
scripts what the next calls get (`reply`, `fail`, `stall`, `malformed`, `empty`, ...); when the
queue is empty, `responder` answers from the request's messages. Every request is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    def content_of(self, role: str) -> str:
        """All message contents with this role, joined: what a test asserts the prompt says."""
        return "\n".join(m.get("content") or "" for m in self.messages if m.get("role") == role)


@dataclass(frozen=True)
class Behaviour:
    """One scripted answer: an HTTP status with a JSON or raw body, after an optional delay."""

    status: int = 200
    text: str | None = None
    raw_body: bytes | None = None
    error_message: str = ""
    delay_seconds: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    include_usage: bool = True
    no_choices: bool = False


def echo_last_user_message(messages: list[dict[str, Any]]) -> str:
    users = [m.get("content") or "" for m in messages if m.get("role") == "user"]
    return f"echo: {users[-1]}" if users else "echo"


def _word_count(text: str) -> int:
    return len(text.split())


class FakeOpenAIServer:
    def __init__(
        self,
        *,
        model: str = "fake-model",
        responder: Callable[[list[dict[str, Any]]], str] = echo_last_user_message,
    ) -> None:
        self.model = model
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        # Set on stop() so a stalled handler wakes up at once instead of holding the test.
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        handler = _handler_for(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the server first"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting -------------------------------------------------------------------------
    def push(self, behaviour: Behaviour) -> None:
        with self._lock:
            self._queue.append(behaviour)

    def reply(
        self,
        text: str,
        *,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        include_usage: bool = True,
    ) -> None:
        self.push(
            Behaviour(
                text=text,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                include_usage=include_usage,
            )
        )

    def fail(
        self,
        status: int,
        *,
        message: str = "scripted failure",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.push(Behaviour(status=status, error_message=message, headers=headers or {}))

    def stall(self, seconds: float, *, text: str = "too late") -> None:
        """Answer only after `seconds`: longer than the client's timeout makes it a timeout."""
        self.push(Behaviour(text=text, delay_seconds=seconds))

    def malformed(self) -> None:
        self.push(Behaviour(raw_body=b'{"id": "chatcmpl-broken", "choices": [{"mess'))

    def empty(self) -> None:
        self.push(Behaviour(text=""))

    def no_choices(self) -> None:
        self.push(Behaviour(no_choices=True))

    @property
    def last_request(self) -> RecordedRequest:
        assert self.requests, "the fake LLM received no request"
        return self.requests[-1]

    # --- serving ---------------------------------------------------------------------------
    def _next_behaviour(self, messages: list[dict[str, Any]]) -> Behaviour:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return Behaviour(text=self.responder(messages))

    def _answer(self, request: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
        behaviour = self._next_behaviour(request.messages)
        if behaviour.delay_seconds:
            self._stopping.wait(behaviour.delay_seconds)
        if behaviour.raw_body is not None:
            return behaviour.status, dict(JSON), behaviour.raw_body
        if behaviour.status != 200:
            error = {
                "error": {
                    "message": behaviour.error_message,
                    "type": "server_error" if behaviour.status >= 500 else "invalid_request_error",
                    "code": None,
                }
            }
            headers = {**JSON, **behaviour.headers}
            return behaviour.status, headers, json.dumps(error).encode()
        text = behaviour.text or ""
        prompt_tokens = behaviour.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = sum(_word_count(m.get("content") or "") for m in request.messages)
        completion_tokens = behaviour.completion_tokens
        if completion_tokens is None:
            completion_tokens = _word_count(text)
        body: dict[str, Any] = {
            "id": f"chatcmpl-fake-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.body.get("model") or self.model,
            "choices": []
            if behaviour.no_choices
            else [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
        if behaviour.include_usage:
            body["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
        return 200, dict(JSON), json.dumps(body).encode()

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)


def _handler_for(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if path not in CHAT_PATHS:
                self._send(404, dict(JSON), b'{"error": {"message": "not found"}}')
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, dict(JSON), b'{"error": {"message": "bad json"}}')
                return
            # Lower-cased names: HTTP headers are case-insensitive and clients differ in spelling.
            request_headers = {name.lower(): value for name, value in self.headers.items()}
            request = RecordedRequest(path=path, headers=request_headers, body=body)
            server._record(request)
            self._send(*server._answer(request))

        def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
            try:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test): nothing left to tell it

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
