"""What a web process loads before it takes its first request."""

from __future__ import annotations

from django.urls import get_resolver

from memoryhub.core.tokens import count_tokens


def web_process_warm() -> None:
    """Load now what the first requests of a web process would otherwise load while their
    clients wait: every view with its serializers (the URLconf: about 400 modules), the token
    counter's encoding, and openai (0.4 s to import; the first LLM or embeddings client loads
    it, so that commands and the admin do not pay for it, but a web process pays at start).
    Measured in a fresh process on the 2-core bench machine, idle: its first request took
    1.0-1.2 s and its first append 0.5-0.6 s more; 3 ms and 33 ms once warmed here (the ONNX
    query model stays lazy: per process, after any fork, and only where recall runs).

    It opens no database connection and starts no thread: under gunicorn's `preload_app` it
    runs once, in the master, and every worker forked from it (at start, or when
    `max_requests` replaces one) inherits what it loaded."""
    # Resolving builds the URL tree and imports every module it names, as the first request's
    # resolve would.
    get_resolver().resolve("/healthz")
    count_tokens("warm")
    import openai  # noqa: F401
