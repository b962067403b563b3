"""A local HTTP server speaking the OpenAI embeddings protocol, for tests.

`POST /v1/embeddings` with `{"model", "input": [...]}` answers
`{"object": "list", "data": [{"object": "embedding", "embedding": [...], "index": i}], "model",
"usage"}`, over a socket on 127.0.0.1, so the real `openai` client does its own request building
and response parsing. Vectors are deterministic bags of hashed words, deliberately not of unit
length (the client must normalise them). Tests script failures with `fail`, `malformed`,
`wrong_dimensions` and `reversed_order`; every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EMBEDDINGS_PATHS = ("/v1/embeddings", "/embeddings")
JSON = {"Content-Type": "application/json"}
WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def inputs(self) -> list[str]:
        value = self.body.get("input")
        return [value] if isinstance(value, str) else list(value or [])


@dataclass(frozen=True)
class Behaviour:
    status: int = 200
    error_message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None
    dimensions: int | None = None
    reverse: bool = False


def hashed_bag_of_words(text: str, dimensions: int) -> list[float]:
    """Each word adds 1 to a bucket chosen by its hash, plus a constant offset so that no vector
    is zero and none has unit length."""
    vector = [0.5] * dimensions
    for word in WORD.findall(text.lower()):
        bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % dimensions
        vector[bucket] += 3.0
    return vector


class FakeEmbeddingsServer:
    def __init__(self, *, model: str = "fake-embed", dimensions: int = 16) -> None:
        self.model = model
        self.dimensions = dimensions
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeEmbeddingsServer:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeEmbeddingsServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() the server first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    # --- scripting -------------------------------------------------------------------------
    def push(self, behaviour: Behaviour) -> None:
        with self._lock:
            self._queue.append(behaviour)

    def fail(
        self,
        status: int,
        *,
        message: str = "scripted failure",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.push(Behaviour(status=status, error_message=message, headers=headers or {}))

    def malformed(self) -> None:
        self.push(Behaviour(raw_body=b'{"object": "list", "data": [{"embed'))

    def wrong_dimensions(self, dimensions: int) -> None:
        self.push(Behaviour(dimensions=dimensions))

    def reversed_order(self) -> None:
        self.push(Behaviour(reverse=True))

    @property
    def last_request(self) -> RecordedRequest:
        assert self.requests, "the fake embeddings server received no request"
        return self.requests[-1]

    # --- serving ---------------------------------------------------------------------------
    def _answer(self, request: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.requests.append(request)
            behaviour = self._queue.popleft() if self._queue else Behaviour()
        if behaviour.raw_body is not None:
            return behaviour.status, dict(JSON), behaviour.raw_body
        if behaviour.status != 200:
            kind = "server_error" if behaviour.status >= 500 else "invalid_request_error"
            error = {"error": {"message": behaviour.error_message, "type": kind, "code": None}}
            return behaviour.status, {**JSON, **behaviour.headers}, json.dumps(error).encode()
        dimensions = behaviour.dimensions or self.dimensions
        data = [
            {
                "object": "embedding",
                "embedding": hashed_bag_of_words(text, dimensions),
                "index": index,
            }
            for index, text in enumerate(request.inputs)
        ]
        if behaviour.reverse:
            data.reverse()
        tokens = sum(len(text.split()) for text in request.inputs)
        body = {
            "object": "list",
            "data": data,
            "model": request.body.get("model") or self.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return 200, dict(JSON), json.dumps(body).encode()


def _handler_for(server: FakeEmbeddingsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if path not in EMBEDDINGS_PATHS:
                self._send(404, dict(JSON), b'{"error": {"message": "not found"}}')
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, dict(JSON), b'{"error": {"message": "bad json"}}')
                return
            headers = {name.lower(): value for name, value in self.headers.items()}
            self._send(*server._answer(RecordedRequest(path=path, headers=headers, body=body)))

        def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
            try:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
